// A chunk of a parameter server as it is stored: weights, optimizer state
// and version, and its binary encoding (the value format of every on-disk
// tier and snapshot).
#ifndef STRATA_STORAGE_CHUNK_RECORD_H_
#define STRATA_STORAGE_CHUNK_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strata {

// Everything needed to restore a chunk bit-identically.
struct ChunkRecord {
  uint64_t id = 0;
  uint64_t version = 0;  // updates applied
  // Opaque bytes; the server stores a serialized strata.v1.ChunkSpec here.
  std::string spec;
  std::vector<float> weights;
  // Optimizer state (e.g. Adam m, v; Adafactor's row and column moments,
  // shorter than `weights`). A record may also hold state only (empty
  // `weights`): a tiered store spills a chunk's optimizer state apart from
  // its weights.
  std::vector<std::vector<float>> slots;

  friend bool operator==(const ChunkRecord&, const ChunkRecord&) = default;
};

// A record's fields by reference: what is encoded, without copying the
// arrays (a tiered store writes a tile's weights and its state as two
// records, taken from one ChunkRecord).
struct ChunkRecordRef {
  ChunkRecordRef() = default;
  ChunkRecordRef(const ChunkRecord& r)  // NOLINT: implicit, as a view
      : id(r.id),
        version(r.version),
        spec(r.spec),
        weights(r.weights),
        slots(r.slots) {}
  uint64_t id = 0;
  uint64_t version = 0;
  absl::string_view spec;
  absl::Span<const float> weights;
  absl::Span<const std::vector<float>> slots;
};

// The most state slots a record may carry.
inline constexpr size_t kMaxStateSlots = 16;

// OK if `record` can be stored: at most kMaxStateSlots slots, a spec under
// 4 GiB. Else INVALID_ARGUMENT.
absl::Status ValidateChunkRecord(const ChunkRecordRef& record);

// Bytes of memory `record` holds (its arrays and spec), for RAM budgets.
size_t ChunkRecordBytes(const ChunkRecord& record);

// Encodes `record` (format version 1, little-endian):
//   u32 magic "SCHK" | u32 format version | u64 id | u64 version |
//   u64 numel | u32 num_slots | u32 spec_size | u32 flags (bit 0: weights
//   present; bit 1: slot sizes follow the spec) | spec |
//   u64 slot_sizes[num_slots] (if bit 1) | f32 weights[numel] (if present) |
//   f32 slots[num_slots][slot size, else numel] |
//   u32 CRC-32C of everything before it.
// numel is the weights' length, or with none the first slot's; bit 1 is
// set only when some slot is not numel long, so records of equal-length
// slots are as they were before the bit existed.
// Floats are stored bit for bit (NaN payloads included). Errors: as
// ValidateChunkRecord.
absl::StatusOr<std::string> EncodeChunkRecord(const ChunkRecordRef& record);

// The same bytes as pieces to write one after another (a database's
// scatter-gather Put): the header and the CRC are kept in `scratch`, the
// spec and arrays are viewed in place, not copied. The views are valid
// while `record`'s arrays and `scratch` are unchanged.
absl::Status EncodeChunkRecordPieces(const ChunkRecordRef& record,
                                     std::string* scratch,
                                     std::vector<absl::string_view>* pieces);

// Decodes what EncodeChunkRecord wrote. DATA_LOSS if the bytes are
// truncated, have a bad magic, sizes that disagree, or a bad checksum;
// FAILED_PRECONDITION for an intact record of a newer format version.
absl::StatusOr<ChunkRecord> DecodeChunkRecord(absl::string_view bytes);

}  // namespace strata

#endif  // STRATA_STORAGE_CHUNK_RECORD_H_

#include "storage/chunk_record.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/crc32c.h"

namespace strata {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the record format is little-endian; add byte swaps here");

constexpr uint32_t kMagic = 0x4b484353;  // "SCHK" in little-endian bytes
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 4;
constexpr uint32_t kHasWeights = 1;  // flags bit: weights are present
constexpr size_t kCrcBytes = 4;

template <typename T>
void Append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Reads fixed-size fields front to back. REQUIRES: enough bytes left (the
// caller checks sizes first).
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : p_(bytes.data()) {}
  template <typename T>
  T Read() {
    T value;
    std::memcpy(&value, p_, sizeof(T));
    p_ += sizeof(T);
    return value;
  }
  void ReadFloats(std::vector<float>& out, size_t n) {
    out.resize(n);
    std::memcpy(out.data(), p_, n * sizeof(float));
    p_ += n * sizeof(float);
  }
  std::string ReadString(size_t n) {
    std::string s(p_, n);
    p_ += n;
    return s;
  }

 private:
  const char* p_;
};

// The length every array of `r` shares (ValidateChunkRecord checks that).
size_t ArrayLength(const ChunkRecordRef& r) {
  return r.slots.empty() || !r.weights.empty() ? r.weights.size()
                                               : r.slots[0].size();
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt chunk record: ", what));
}

}  // namespace

absl::Status ValidateChunkRecord(const ChunkRecordRef& r) {
  if (r.slots.size() > kMaxStateSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", r.id, ": ", r.slots.size(),
                     " state slots, at most ", kMaxStateSlots));
  }
  const size_t numel = ArrayLength(r);
  if (!r.weights.empty() && r.weights.size() != numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", r.id, ": ", r.weights.size(), " weights, state of ", numel));
  }
  for (const std::vector<float>& slot : r.slots) {
    if (slot.size() != numel) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", r.id, ": state slots of ", slot.size(),
                       " and ", numel, " elements"));
    }
  }
  if (r.spec.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", r.id, ": spec of 4 GiB or more"));
  }
  return absl::OkStatus();
}

size_t ChunkRecordBytes(const ChunkRecord& r) {
  size_t floats = r.weights.size();
  for (const std::vector<float>& slot : r.slots) floats += slot.size();
  return sizeof(ChunkRecord) + r.spec.size() + floats * sizeof(float);
}

absl::Status EncodeChunkRecordPieces(const ChunkRecordRef& r,
                                     std::string* scratch,
                                     std::vector<absl::string_view>* pieces) {
  if (absl::Status s = ValidateChunkRecord(r); !s.ok()) return s;
  const bool has_weights = !r.weights.empty() || r.slots.empty();
  scratch->clear();
  scratch->reserve(kHeaderBytes + kCrcBytes);  // no reallocation below
  Append<uint32_t>(*scratch, kMagic);
  Append<uint32_t>(*scratch, kFormatVersion);
  Append<uint64_t>(*scratch, r.id);
  Append<uint64_t>(*scratch, r.version);
  Append<uint64_t>(*scratch, ArrayLength(r));
  Append<uint32_t>(*scratch, static_cast<uint32_t>(r.slots.size()));
  Append<uint32_t>(*scratch, static_cast<uint32_t>(r.spec.size()));
  Append<uint32_t>(*scratch, has_weights ? kHasWeights : 0);
  auto floats = [](absl::Span<const float> a) {
    return absl::string_view(reinterpret_cast<const char*>(a.data()),
                             a.size() * sizeof(float));
  };
  pieces->clear();
  pieces->push_back(absl::string_view(*scratch));
  pieces->push_back(r.spec);
  pieces->push_back(floats(r.weights));
  for (const std::vector<float>& slot : r.slots)
    pieces->push_back(floats(slot));
  uint32_t crc = 0;
  for (absl::string_view piece : *pieces) crc = crc32c::Extend(crc, piece);
  Append<uint32_t>(*scratch, crc);
  pieces->push_back(absl::string_view(*scratch).substr(kHeaderBytes));
  (*pieces)[0] = absl::string_view(*scratch).substr(0, kHeaderBytes);
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeChunkRecord(const ChunkRecordRef& r) {
  std::string scratch;
  std::vector<absl::string_view> pieces;
  if (absl::Status s = EncodeChunkRecordPieces(r, &scratch, &pieces); !s.ok())
    return s;
  size_t size = 0;
  for (absl::string_view piece : pieces) size += piece.size();
  std::string out;
  out.reserve(size);
  for (absl::string_view piece : pieces) out.append(piece.data(), piece.size());
  return out;
}

absl::StatusOr<ChunkRecord> DecodeChunkRecord(absl::string_view bytes) {
  if (bytes.size() < kHeaderBytes + kCrcBytes) return Corrupt("truncated");
  Reader header(bytes);
  if (header.Read<uint32_t>() != kMagic) return Corrupt("bad magic");
  const absl::string_view body = bytes.substr(0, bytes.size() - kCrcBytes);
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + body.size(), kCrcBytes);
  if (crc32c::Value(body) != stored_crc) return Corrupt("checksum mismatch");
  const uint32_t format = header.Read<uint32_t>();
  if (format != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "chunk record format ", format, " is not supported (this build reads ",
        kFormatVersion, ")"));
  }
  ChunkRecord r;
  r.id = header.Read<uint64_t>();
  r.version = header.Read<uint64_t>();
  const uint64_t numel = header.Read<uint64_t>();
  const uint32_t num_slots = header.Read<uint32_t>();
  const uint32_t spec_size = header.Read<uint32_t>();
  const uint32_t flags = header.Read<uint32_t>();
  const uint64_t arrays = num_slots + ((flags & kHasWeights) ? 1 : 0);
  // Sizes come from the disk: check them without overflowing.
  const size_t payload = body.size() - kHeaderBytes;
  if ((flags & ~kHasWeights) != 0 || num_slots > kMaxStateSlots ||
      spec_size > payload ||
      (arrays > 0 && numel > (payload - spec_size) / sizeof(float) / arrays) ||
      numel * sizeof(float) * arrays != payload - spec_size) {
    return Corrupt("sizes disagree with the record length");
  }
  Reader data(body.substr(kHeaderBytes));
  r.spec = data.ReadString(spec_size);
  if (flags & kHasWeights) data.ReadFloats(r.weights, numel);
  r.slots.resize(num_slots);
  for (std::vector<float>& slot : r.slots) data.ReadFloats(slot, numel);
  return r;
}

}  // namespace strata

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
// Flags bit: the slots' lengths follow the spec (u64 each), because they
// are not all the array length in the header.
constexpr uint32_t kSlotSizes = 2;
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

// The header's array length: the weights', or with none the first slot's.
size_t ArrayLength(const ChunkRecordRef& r) {
  return r.slots.empty() || !r.weights.empty() ? r.weights.size()
                                               : r.slots[0].size();
}

// Whether every slot is ArrayLength long (the record needs no size table).
bool UniformSlots(const ChunkRecordRef& r) {
  const size_t numel = ArrayLength(r);
  for (const std::vector<float>& slot : r.slots) {
    if (slot.size() != numel) return false;
  }
  return true;
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
  const bool sized = !UniformSlots(r);
  scratch->clear();
  // No reallocation below: the pieces view it.
  scratch->reserve(kHeaderBytes + kCrcBytes + 8 * r.slots.size());
  Append<uint32_t>(*scratch, kMagic);
  Append<uint32_t>(*scratch, kFormatVersion);
  Append<uint64_t>(*scratch, r.id);
  Append<uint64_t>(*scratch, r.version);
  Append<uint64_t>(*scratch, ArrayLength(r));
  Append<uint32_t>(*scratch, static_cast<uint32_t>(r.slots.size()));
  Append<uint32_t>(*scratch, static_cast<uint32_t>(r.spec.size()));
  Append<uint32_t>(*scratch,
                   (has_weights ? kHasWeights : 0) | (sized ? kSlotSizes : 0));
  auto floats = [](absl::Span<const float> a) {
    return absl::string_view(reinterpret_cast<const char*>(a.data()),
                             a.size() * sizeof(float));
  };
  pieces->clear();
  pieces->push_back(absl::string_view(*scratch));
  pieces->push_back(r.spec);
  if (sized) {
    for (const std::vector<float>& slot : r.slots) {
      Append<uint64_t>(*scratch, slot.size());
    }
    pieces->push_back(absl::string_view(*scratch).substr(kHeaderBytes));
  }
  pieces->push_back(floats(r.weights));
  for (const std::vector<float>& slot : r.slots)
    pieces->push_back(floats(slot));
  uint32_t crc = 0;
  for (absl::string_view piece : *pieces) crc = crc32c::Extend(crc, piece);
  const size_t crc_at = scratch->size();
  Append<uint32_t>(*scratch, crc);
  pieces->push_back(absl::string_view(*scratch).substr(crc_at));
  (*pieces)[0] = absl::string_view(*scratch).substr(0, kHeaderBytes);
  if (sized) {
    (*pieces)[2] =
        absl::string_view(*scratch).substr(kHeaderBytes, crc_at - kHeaderBytes);
  }
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
  if ((flags & ~(kHasWeights | kSlotSizes)) != 0 ||
      num_slots > kMaxStateSlots) {
    return Corrupt("unknown flags or too many slots");
  }
  // Sizes come from the disk: check them without overflowing.
  size_t left = body.size() - kHeaderBytes;
  auto take = [&left](uint64_t floats) {
    if (floats > left / sizeof(float)) return false;
    left -= floats * sizeof(float);
    return true;
  };
  if (spec_size > left) return Corrupt("sizes disagree with the record length");
  left -= spec_size;
  Reader data(body.substr(kHeaderBytes));
  r.spec = data.ReadString(spec_size);
  std::vector<uint64_t> sizes(num_slots, numel);
  if (flags & kSlotSizes) {
    if (num_slots * sizeof(uint64_t) > left) {
      return Corrupt("sizes disagree with the record length");
    }
    left -= num_slots * sizeof(uint64_t);
    for (uint64_t& size : sizes) size = data.Read<uint64_t>();
  }
  bool fits = !(flags & kHasWeights) || take(numel);
  for (uint64_t size : sizes) fits = fits && take(size);
  if (!fits || left != 0) {
    return Corrupt("sizes disagree with the record length");
  }
  if (flags & kHasWeights) data.ReadFloats(r.weights, numel);
  r.slots.resize(num_slots);
  for (uint32_t i = 0; i < num_slots; ++i)
    data.ReadFloats(r.slots[i], sizes[i]);
  return r;
}

}  // namespace strata

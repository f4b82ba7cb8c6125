#include "storage/chunk_record.h"

#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "storage/crc32c.h"

namespace strata {
namespace {

ChunkRecord SampleRecord() {
  ChunkRecord r;
  r.id = 0x0123456789abcdefull;
  r.version = 42;
  r.spec = std::string("spec\0bytes", 10);
  r.weights = {1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(), 3e-40f};
  r.slots = {{0.1f, 0.2f, 0.3f, 0.4f}, {1e-8f, 2e-8f, 3e-8f, 4e-8f}};
  return r;
}

// Bit-for-bit equality (NaN payloads and signed zeros included).
void ExpectSameBits(const ChunkRecord& a, const ChunkRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.spec, b.spec);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_EQ(std::memcmp(a.weights.data(), b.weights.data(),
                        a.weights.size() * sizeof(float)),
            0);
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (size_t i = 0; i < a.slots.size(); ++i) {
    ASSERT_EQ(a.slots[i].size(), b.slots[i].size());
    EXPECT_EQ(std::memcmp(a.slots[i].data(), b.slots[i].data(),
                          a.slots[i].size() * sizeof(float)),
              0);
  }
}

TEST(Crc32c, MatchesKnownValuesAndPortableVersion) {
  EXPECT_EQ(crc32c::Value("123456789"), 0xe3069283u);
  EXPECT_EQ(crc32c::Value(""), 0u);
  std::string data;
  for (int i = 0; i < 100000; ++i) {
    data.push_back(static_cast<char>((i * 7) ^ (i >> 9)));
  }
  // Short ones, and around the three-stream blocks (3 x 4096 bytes).
  for (size_t n :
       {0, 1, 7, 8, 9, 63, 1000, 12287, 12288, 12289, 24576, 36881, 100000}) {
    const absl::string_view s(data.data(), n);
    EXPECT_EQ(crc32c::Value(s), crc32c::ExtendPortable(0, s)) << n;
    // Extended from a nonzero CRC, split anywhere.
    const size_t cut = n / 3;
    EXPECT_EQ(crc32c::Extend(crc32c::Value(s.substr(0, cut)), s.substr(cut)),
              crc32c::ExtendPortable(0, s))
        << n;
  }
  // A known value for the longest (computed with the table version), so the
  // test means something on a CPU where both are the table version.
  EXPECT_EQ(crc32c::Value(data), 0x10ee0ed8u);
  EXPECT_EQ(crc32c::Extend(crc32c::Value("1234"), "56789"), 0xe3069283u);
}

TEST(ChunkRecord, RoundTripsBitIdentically) {
  const ChunkRecord r = SampleRecord();
  absl::StatusOr<std::string> bytes = EncodeChunkRecord(r);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<ChunkRecord> back = DecodeChunkRecord(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameBits(r, *back);
}

// The documented layout, byte for byte (snapshots written by earlier
// builds must keep reading), built here field by field; the pieces a
// database writes one after another are the same bytes.
TEST(ChunkRecord, EncodesTheDocumentedLayoutInPieces) {
  const ChunkRecord r = SampleRecord();
  std::string want;
  auto put = [&want](const auto& v) {
    want.append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  put(uint32_t{0x4b484353});  // "SCHK"
  put(uint32_t{1});
  put(r.id);
  put(r.version);
  put(uint64_t{4});
  put(uint32_t{2});
  put(static_cast<uint32_t>(r.spec.size()));
  put(uint32_t{1});  // weights present
  want += r.spec;
  for (float x : r.weights) put(x);
  for (const auto& slot : r.slots)
    for (float x : slot) put(x);
  put(crc32c::Value(want));
  absl::StatusOr<std::string> bytes = EncodeChunkRecord(r);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, want);
  std::string scratch;
  std::vector<absl::string_view> pieces;
  ASSERT_TRUE(EncodeChunkRecordPieces(r, &scratch, &pieces).ok());
  std::string joined;
  for (absl::string_view p : pieces) joined.append(p.data(), p.size());
  EXPECT_EQ(joined, want);
  // The arrays are viewed in place, not copied.
  bool viewed = false;
  for (absl::string_view p : pieces)
    viewed |= p.data() == reinterpret_cast<const char*>(r.weights.data());
  EXPECT_TRUE(viewed);
}

// A state-only record (flags 0: no weights) and a record without state
// (SGD) keep the layout too.
TEST(ChunkRecord, EncodesStateOnlyAndStatelessRecordsInTheLayout) {
  auto expected = [](const ChunkRecord& r, uint64_t numel, uint32_t flags) {
    std::string want;
    auto put = [&want](const auto& v) {
      want.append(reinterpret_cast<const char*>(&v), sizeof(v));
    };
    put(uint32_t{0x4b484353});
    put(uint32_t{1});
    put(r.id);
    put(r.version);
    put(numel);
    put(static_cast<uint32_t>(r.slots.size()));
    put(static_cast<uint32_t>(r.spec.size()));
    put(flags);
    want += r.spec;
    for (float x : r.weights) put(x);
    for (const auto& slot : r.slots)
      for (float x : slot) put(x);
    put(crc32c::Value(want));
    return want;
  };
  ChunkRecord state;
  state.id = 9;
  state.version = 3;
  state.slots = {{1, 2}, {3, 4}};
  ChunkRecord sgd;
  sgd.id = 10;
  sgd.version = 4;
  sgd.weights = {5, 6, 7};
  for (const auto& [r, numel, flags] :
       {std::tuple{state, uint64_t{2}, uint32_t{0}},
        std::tuple{sgd, uint64_t{3}, uint32_t{1}}}) {
    absl::StatusOr<std::string> bytes = EncodeChunkRecord(r);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, expected(r, numel, flags)) << "chunk " << r.id;
    absl::StatusOr<ChunkRecord> back = DecodeChunkRecord(*bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, r);
  }
}

TEST(ChunkRecord, EmptyRecordRoundTrips) {
  absl::StatusOr<std::string> bytes = EncodeChunkRecord(ChunkRecord{});
  ASSERT_TRUE(bytes.ok());
  absl::StatusOr<ChunkRecord> back = DecodeChunkRecord(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, ChunkRecord{});
}

TEST(ChunkRecord, EveryFlippedByteIsDataLoss) {
  const std::string bytes = *EncodeChunkRecord(SampleRecord());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x20;
    EXPECT_EQ(DecodeChunkRecord(bad).status().code(),
              absl::StatusCode::kDataLoss)
        << "byte " << i;
  }
}

TEST(ChunkRecord, TruncatedOrExtendedIsDataLoss) {
  const std::string bytes = *EncodeChunkRecord(SampleRecord());
  for (size_t n : {size_t{0}, size_t{3}, size_t{20}, bytes.size() - 1}) {
    EXPECT_EQ(DecodeChunkRecord(bytes.substr(0, n)).status().code(),
              absl::StatusCode::kDataLoss)
        << n;
  }
  EXPECT_EQ(DecodeChunkRecord(bytes + "x").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ChunkRecord, StateOnlyRecordRoundTrips) {
  ChunkRecord r = SampleRecord();
  r.weights.clear();
  absl::StatusOr<ChunkRecord> back = DecodeChunkRecord(*EncodeChunkRecord(r));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameBits(r, *back);
  EXPECT_TRUE(back->weights.empty());
}

// Adafactor's row and column moments are shorter than the weights: their
// sizes are written after the spec (flags bit 1), with and without weights.
TEST(ChunkRecord, SlotsOfOtherLengthsRoundTripWithTheirSizes) {
  ChunkRecord r = SampleRecord();
  r.slots[1].resize(3);
  r.slots.push_back({});
  const std::string uniform = *EncodeChunkRecord(SampleRecord());
  absl::StatusOr<std::string> bytes = EncodeChunkRecord(r);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint32_t flags;
  std::memcpy(&flags, bytes->data() + 40, 4);
  EXPECT_EQ(flags, 3u);
  std::memcpy(&flags, uniform.data() + 40, 4);
  EXPECT_EQ(flags, 1u);  // equal lengths: no table, as before
  absl::StatusOr<ChunkRecord> back = DecodeChunkRecord(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameBits(r, *back);
  r.weights.clear();
  back = DecodeChunkRecord(*EncodeChunkRecord(r));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameBits(r, *back);
  // A size table that claims more than the record holds is data loss, its
  // checksum made right again.
  std::string bad = *EncodeChunkRecord(r);
  bad[44 + r.spec.size()] = 100;  // the first slot's size
  const uint32_t crc =
      crc32c::Value(absl::string_view(bad).substr(0, bad.size() - 4));
  std::memcpy(bad.data() + bad.size() - 4, &crc, 4);
  EXPECT_EQ(DecodeChunkRecord(bad).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ChunkRecord, TooManySlotsAreRejected) {
  ChunkRecord r = SampleRecord();
  r.slots.resize(kMaxStateSlots + 1);
  EXPECT_EQ(EncodeChunkRecord(r).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata

#include "formats/safetensors.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace strata {
namespace {

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A file made by hand: header text `header`, then `data`.
std::string Raw(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

TEST(Safetensors, WritesWhatItReadsBack) {
  const std::string dir = testing::FreshDir("st-roundtrip");
  const std::vector<float> a = {1, -2, 3.5f, 4, 5, 6};
  const std::vector<float> b = {0.25f};
  ASSERT_TRUE(WriteSafetensors(
                  dir + "/m.safetensors", {{"format", "pt"}},
                  {{"z.weight", {2, 3}, a.data()}, {"a.bias", {1}, b.data()}})
                  .ok());
  auto file = SafetensorsFile::Open(dir + "/m.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  ASSERT_EQ((*file)->tensors().size(), 2u);
  // Bytes in name order.
  EXPECT_EQ((*file)->tensors()[0].name, "a.bias");
  const SafetensorsTensor* z = (*file)->Find("z.weight");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(z->dtype, "F32");
  std::vector<float> got(4);
  ASSERT_TRUE((*file)->ReadF32(*z, 2, 4, got.data()).ok());
  EXPECT_EQ(got, (std::vector<float>{3.5f, 4, 5, 6}));
  EXPECT_EQ((*file)->Find("missing"), nullptr);
  // The header is padded to 8 bytes, and the same tensors give the same
  // bytes.
  uint64_t n;
  const std::string bytes = ReadBytes(dir + "/m.safetensors");
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_TRUE(WriteSafetensors(
                  dir + "/n.safetensors", {{"format", "pt"}},
                  {{"a.bias", {1}, b.data()}, {"z.weight", {2, 3}, a.data()}})
                  .ok());
  EXPECT_EQ(ReadBytes(dir + "/n.safetensors"), bytes);
}

TEST(Safetensors, ReadsHalfAndBfloat16AsFloat) {
  const std::string dir = testing::FreshDir("st-half");
  // F16: 1.0 (0x3c00), -2.0 (0xc000), 2^-24 (0x0001, subnormal); BF16: 1.5.
  const uint16_t half[3] = {0x3c00, 0xc000, 0x0001};
  const uint16_t bf = FloatToBf16(1.5f);
  std::string data(reinterpret_cast<const char*>(half), 6);
  data.append(reinterpret_cast<const char*>(&bf), 2);
  WriteBytes(dir + "/h.safetensors",
             Raw(R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
                 R"("b":{"dtype":"BF16","shape":[],"data_offsets":[6,8]}})",
                 data));
  auto file = SafetensorsFile::Open(dir + "/h.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  float h[3], b;
  ASSERT_TRUE((*file)->ReadF32(*(*file)->Find("h"), 0, 3, h).ok());
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  ASSERT_TRUE((*file)->ReadF32(*(*file)->Find("b"), 0, 1, &b).ok());
  EXPECT_EQ(b, 1.5f);
}

TEST(Safetensors, RefusesMalformedFilesNamingTheField) {
  const std::string dir = testing::FreshDir("st-bad");
  const std::string f = dir + "/bad.safetensors";
  const std::string ok_entry =
      R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\0');
  struct Case {
    std::string bytes;
    std::string message;
  };
  std::string oversized(8, '\0');
  const uint64_t huge = kMaxSafetensorsHeader + 1;
  std::memcpy(oversized.data(), &huge, 8);
  const std::vector<Case> cases = {
      {"abc", "shorter than"},
      {oversized, "over the limit"},
      {Raw("{" + ok_entry + "}", eight).substr(0, 20), "runs past the end"},
      {Raw("{not json", ""), "not JSON"},
      {Raw("[1,2]", ""), "not an object"},
      {Raw(R"({"t":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight),
       "unknown dtype"},
      {Raw(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "do not hold its 3 F32"},
      {Raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           eight + "1234"),
       "leave a gap"},
      {Raw("{" + ok_entry + "}", eight + "x"), "the data is 9 bytes"},
      {Raw(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "non-negative"},
      {Raw(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", eight),
       "needs dtype"},
      {Raw(R"({"__metadata__":{"a":1}})", ""), "not a string"},
  };
  for (const Case& c : cases) {
    WriteBytes(f, c.bytes);
    auto file = SafetensorsFile::Open(f);
    ASSERT_FALSE(file.ok()) << c.message;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << c.message;
    EXPECT_NE(file.status().message().find(c.message), std::string::npos)
        << file.status();
    EXPECT_NE(file.status().message().find(f), std::string::npos);
  }
  EXPECT_EQ(SafetensorsFile::Open(dir + "/none").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Safetensors, RefusesReadsOutsideATensorOrOfIntegers) {
  const std::string dir = testing::FreshDir("st-read");
  WriteBytes(dir + "/i.safetensors",
             Raw(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                 std::string(8, '\0')));
  auto file = SafetensorsFile::Open(dir + "/i.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  float out[2];
  const SafetensorsTensor& t = *(*file)->Find("i");
  EXPECT_EQ((*file)->ReadF32(t, 0, 1, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*file)->ReadF32(t, 1, 1, out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Safetensors, FitsATensorTransposedPaddedOrCropped) {
  const std::string dir = testing::FreshDir("st-fit");
  const std::vector<float> m = {1, 2, 3, 4, 5, 6};  // (2,3)
  ASSERT_TRUE(WriteSafetensors(dir + "/f", {}, {{"m", {2, 3}, m.data()}}).ok());
  auto file = SafetensorsFile::Open(dir + "/f");
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsTensor& t = *(*file)->Find("m");
  std::vector<float> out(6);
  // Transposed: (3,2), dest[r][c] = m[c][r]; from element 1 on.
  ASSERT_TRUE(ReadFitted(**file, t, true, {3, 2}, 1, 5, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{4, 2, 5, 3, 6, 0}));
  // Padded to 3 rows: the third is zeros.
  out.assign(9, -1);
  ASSERT_TRUE(ReadFitted(**file, t, false, {3, 3}, 0, 9, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0, 0}));
  // Cropped to its first row.
  out.assign(3, -1);
  ASSERT_TRUE(ReadFitted(**file, t, false, {1, 3}, 0, 3, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));
  // Columns must agree; a transpose must be exact.
  absl::Status s = ReadFitted(**file, t, false, {2, 2}, 0, 4, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'m' has shape (2, 3)"), std::string::npos) << s;
  EXPECT_EQ(CheckFits(**file, t, true, {2, 3}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadFitted(**file, t, false, {2, 3}, 4, 3, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Safetensors, RefusesToWriteBadNames) {
  const std::string dir = testing::FreshDir("st-names");
  const float x = 1;
  EXPECT_EQ(WriteSafetensors(dir + "/a", {}, {{"", {1}, &x}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      WriteSafetensors(dir + "/a", {}, {{"t", {1}, &x}, {"t", {1}, &x}}).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      WriteSafetensors(dir + "/a", {}, {{"__metadata__", {1}, &x}}).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir + "/a"));
}

}  // namespace
}  // namespace strata

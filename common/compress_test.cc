#include "common/compress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace strata {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

TEST(Compress, OneBitKeepsSignsAndEachBlocksMeanMagnitude) {
  const size_t n = 600;  // nine whole blocks and a part
  std::vector<float> x = Random(n, 1);
  std::string bytes(OneBitBytes(n), '\0');
  EXPECT_EQ(bytes.size(), 10 * 2 + 75u);
  std::vector<float> sent(n), got(n);
  EncodeOneBit(x.data(), n, bytes.data(), sent.data());
  ASSERT_TRUE(DecodeOneBit(bytes, n, got.data()).ok());
  EXPECT_EQ(got, sent);
  for (size_t b = 0; b < 10; ++b) {
    const size_t begin = b * kOneBitBlock, end = std::min(n, begin + 64);
    double mean = 0;
    for (size_t i = begin; i < end; ++i) mean += std::fabs(x[i]);
    mean /= end - begin;
    for (size_t i = begin; i < end; ++i) {
      // The mean rounded to bf16: within half its last place (2^-9).
      EXPECT_NEAR(std::fabs(got[i]), mean, mean * std::ldexp(1.0, -9));
      EXPECT_EQ(std::fabs(got[i]), std::fabs(got[begin]));
      EXPECT_EQ(std::signbit(got[i]), std::signbit(x[i])) << i;
    }
  }
}

TEST(Compress, TopKKeepsTheLargestMagnitudes) {
  const std::vector<float> x = {0.1f, -5, 2, 0, -3, 0.5f, 4, -1};
  EXPECT_EQ(TopKCount(8, 0.3), 3u);
  EXPECT_EQ(TopKCount(8, 1e-9), 1u);
  EXPECT_EQ(TopKCount(8, 1.0), 8u);
  std::string bytes;
  std::vector<float> sent(8), got(8);
  EncodeTopK(x.data(), 8, 3, &bytes, sent.data());
  ASSERT_EQ(bytes.size(), 24u);
  ASSERT_TRUE(DecodeTopK(bytes, 8, got.data()).ok());
  EXPECT_EQ(got, sent);
  EXPECT_EQ(got, (std::vector<float>{0, -5, 0, 0, -3, 0, 4, 0}));
}

// Large chunks find the k-th magnitude from a sample first: the same
// elements as a full sort, for random values, for ties, and for large
// values the sample misses (every one off its stride).
TEST(Compress, TopKOfLargeChunksIsExact) {
  const size_t n = size_t{1} << 17;
  std::vector<std::vector<float>> cases = {Random(n, 4), Random(n, 5)};
  std::vector<float> ties(n);
  for (size_t i = 0; i < n; ++i) ties[i] = static_cast<float>(i % 7);
  cases.push_back(ties);
  std::vector<float> hidden(n, 0.001f);
  for (size_t i = 1; i < n; i += 32) hidden[i] = 5.0f + i;  // stride is 32
  cases.push_back(hidden);
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t k : {size_t{1}, n / 1000, n / 100, n / 20, n / 2}) {
      SCOPED_TRACE(testing::Message() << "case " << c << " k " << k);
      const std::vector<float>& x = cases[c];
      std::vector<size_t> order(n);
      for (size_t i = 0; i < n; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return std::fabs(x[a]) > std::fabs(x[b]);
      });
      std::vector<float> want(n, 0.0f), sent(n);
      for (size_t j = 0; j < k; ++j) want[order[j]] = x[order[j]];
      std::string bytes;
      EncodeTopK(x.data(), n, k, &bytes, sent.data());
      ASSERT_EQ(bytes.size(), 8 * k);
      ASSERT_EQ(sent, want);
    }
  }
}

TEST(Compress, NonFiniteValuesDecodeAsNonFinite) {
  // The server's finiteness check then refuses the push.
  std::vector<float> x(300, 1.0f);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  std::string bytes(OneBitBytes(300), '\0');
  std::vector<float> sent(300), got(300);
  EncodeOneBit(x.data(), 300, bytes.data(), sent.data());
  ASSERT_TRUE(DecodeOneBit(bytes, 300, got.data()).ok());
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[299], 1.0f);  // the other blocks are whole
  x[7] = 1.0f;
  x[200] = -std::numeric_limits<float>::infinity();
  EncodeTopK(x.data(), 300, 1, &bytes, sent.data());
  ASSERT_TRUE(DecodeTopK(bytes, 300, got.data()).ok());
  EXPECT_TRUE(std::isinf(got[200]));
}

TEST(Compress, MalformedPayloadsAreRefused) {
  std::vector<float> out(300);
  std::string onebit(OneBitBytes(300), '\0');
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeOneBit(onebit.substr(1), 300, out.data())));
  std::string bad_scale = onebit;
  const uint16_t negative = 0xbf80;  // bf16 -1
  std::memcpy(bad_scale.data(), &negative, 2);
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeOneBit(bad_scale, 300, out.data())));
  std::string past_end = onebit;
  past_end.back() = static_cast<char>(0x80);  // element 303 of 300
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeOneBit(past_end, 300, out.data())));
  auto pair = [](uint32_t i, float v) {
    std::string s(8, '\0');
    std::memcpy(s.data(), &i, 4);
    std::memcpy(s.data() + 4, &v, 4);
    return s;
  };
  EXPECT_TRUE(DecodeTopK(pair(3, 1) + pair(9, 2), 300, out.data()).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeTopK(pair(9, 1) + pair(3, 2), 300, out.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeTopK(pair(3, 1) + pair(3, 2), 300, out.data())));
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeTopK(pair(300, 1), 300, out.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeTopK("1234567", 300, out.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeTopK(pair(0, 1) + pair(1, 1), 1, out.data())));
}

}  // namespace
}  // namespace strata

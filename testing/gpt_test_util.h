// A tiny CPU GPT for the model's tests. Header-only.
#ifndef STRATA_TESTING_GPT_TEST_UTIL_H_
#define STRATA_TESTING_GPT_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/gpt.h"

namespace strata::testing {

// 2 layers of width 16, 2 heads, context 16, vocabulary 32.
inline GptConfig TinyConfig() {
  GptConfig c;
  c.vocab = 32;
  c.context = 16;
  c.layers = 2;
  c.heads = 2;
  c.width = 16;
  return c;
}

// A Gpt of `config` with InitParams(seed) (a failed Create fails the test).
inline std::unique_ptr<Gpt> MakeGpt(const GptConfig& config,
                                    uint64_t seed = 1) {
  auto gpt = Gpt::Create(config);
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  (*gpt)->InitParams(seed);
  return std::move(*gpt);
}

// n tokens in [0, vocab), drawn from `seed`.
inline std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

}  // namespace strata::testing

#endif  // STRATA_TESTING_GPT_TEST_UTIL_H_

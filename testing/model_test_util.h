// The check every Model implementation's test runs on its param-wait hook
// (Model::SetParamWaitCallback). Header-only, for tests.
#ifndef STRATA_TESTING_MODEL_TEST_UTIL_H_
#define STRATA_TESTING_MODEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace strata::testing {

// `model` holds its weights in param_data. Checks that ForwardBackward and
// Loss call the hook once per parameter, in forward order, before the
// first grad-ready call, and read no parameter before its wait returned:
// the weights are set to NaN and each wait puts its parameter's back, so
// any earlier read would show in the loss and the gradients, which must
// equal a plain pass's bit for bit. Then a wait that fails (at the middle
// parameter) must stop the pass with its status, with no later waits and
// no gradient reported. Leaves the weights as they were and no hooks set.
inline void ExpectWaitsBeforeEachParameterIsRead(Model& model,
                                                 const int32_t* tokens,
                                                 const int32_t* targets, int B,
                                                 int T) {
  const int n = static_cast<int>(model.params().size());
  auto numel = [&](int i) {
    return static_cast<int64_t>(model.params()[i].spec.numel());
  };
  std::vector<std::vector<float>> weights(n), want_grads(n);
  for (int i = 0; i < n; ++i) {
    weights[i].assign(model.param_data(i), model.param_data(i) + numel(i));
  }
  absl::StatusOr<float> want = model.ForwardBackward(tokens, targets, B, T);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(std::isfinite(*want));
  for (int i = 0; i < n; ++i) {
    want_grads[i].assign(model.grad_data(i), model.grad_data(i) + numel(i));
  }
  absl::StatusOr<float> want_eval = model.Loss(tokens, targets, B, T);
  ASSERT_TRUE(want_eval.ok()) << want_eval.status();

  auto poison = [&] {
    for (int i = 0; i < n; ++i) {
      std::fill(model.param_data(i), model.param_data(i) + numel(i),
                std::numeric_limits<float>::quiet_NaN());
    }
  };
  // Waits are logged as i, grad-ready calls as -1 - i.
  std::vector<int> log;
  int fail_at = -1;
  model.SetParamWaitCallback([&](int i) {
    log.push_back(i);
    if (i == fail_at) return absl::CancelledError("the pull failed");
    std::copy(weights[i].begin(), weights[i].end(), model.param_data(i));
    return absl::OkStatus();
  });
  model.SetGradReadyCallback([&](int i) { log.push_back(-1 - i); });
  auto expect_waits_in_order = [&](int count) {
    ASSERT_GE(static_cast<int>(log.size()), count);
    for (int i = 0; i < count; ++i) EXPECT_EQ(log[i], i) << "call " << i;
  };

  poison();
  absl::StatusOr<float> got = model.ForwardBackward(tokens, targets, B, T);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *want);
  expect_waits_in_order(n);
  ASSERT_EQ(static_cast<int>(log.size()), 2 * n);  // then n grad-ready calls
  for (int k = n; k < 2 * n; ++k) EXPECT_LT(log[k], 0) << "call " << k;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(
        std::vector<float>(model.grad_data(i), model.grad_data(i) + numel(i)),
        want_grads[i])
        << model.params()[i].spec.name;
  }

  log.clear();
  poison();
  absl::StatusOr<float> got_eval = model.Loss(tokens, targets, B, T);
  ASSERT_TRUE(got_eval.ok()) << got_eval.status();
  EXPECT_EQ(*got_eval, *want_eval);
  expect_waits_in_order(n);
  EXPECT_EQ(static_cast<int>(log.size()), n);

  log.clear();
  fail_at = n / 2;
  absl::StatusOr<float> failed = model.ForwardBackward(tokens, targets, B, T);
  EXPECT_EQ(failed.status(), absl::CancelledError("the pull failed"));
  expect_waits_in_order(fail_at + 1);
  EXPECT_EQ(static_cast<int>(log.size()), fail_at + 1);

  model.SetParamWaitCallback(nullptr);
  model.SetGradReadyCallback(nullptr);
  for (int i = 0; i < n; ++i) {
    std::copy(weights[i].begin(), weights[i].end(), model.param_data(i));
  }
}

// `model` has one MoE block, block 1 (model/gpt_layout.h), and a pass
// over (tokens, targets) leaves some expert of it without tokens. Checks
// that the pass names (Model::SetParamsWantedCallback) and waits for only
// the experts its router chose, each right after they are named and the
// router before that, and every other parameter once; that ParamUnused
// says which experts it did not read, and that their gradients are zero
// and the others' not. Leaves no hooks set.
inline void ExpectWaitsOnlyForTheRoutedExperts(Model& model,
                                               const int32_t* tokens,
                                               const int32_t* targets, int B,
                                               int T) {
  const int n = static_cast<int>(model.params().size());
  std::vector<int> waited, wanted;
  std::vector<int> wanted_at;  // waits before each wanted call
  model.SetParamWaitCallback([&](int i) {
    waited.push_back(i);
    return absl::OkStatus();
  });
  model.SetParamsWantedCallback([&](absl::Span<const int> params) {
    wanted_at.push_back(static_cast<int>(waited.size()));
    wanted.insert(wanted.end(), params.begin(), params.end());
  });
  absl::StatusOr<float> loss = model.ForwardBackward(tokens, targets, B, T);
  model.SetParamWaitCallback(nullptr);
  model.SetParamsWantedCallback(nullptr);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const MoeStats s = model.moe_stats();
  ASSERT_EQ(s.load.size(), 1u);
  auto all_zero = [&](int i) {
    const float* g = model.grad_data(i);
    return std::all_of(g, g + model.params()[i].spec.numel(),
                       [](float v) { return v == 0.0f; });
  };
  std::vector<int> routed_used, others;
  int router = -1;
  for (int i = 0; i < n; ++i) {
    const std::string& name = model.params()[i].spec.name;
    if (name == "h.1.moe.router.weight") router = i;
    const bool expert = name.find(".moe.experts.") != std::string::npos;
    EXPECT_EQ(model.RoutedParam(i), expert) << name;
    if (!expert) {
      others.push_back(i);
      EXPECT_FALSE(model.ParamUnused(i)) << name;
      continue;
    }
    const int e = std::stoi(name.substr(name.find("experts.") + 8));
    EXPECT_EQ(model.ParamUnused(i), s.load[0][e] == 0) << name;
    EXPECT_EQ(all_zero(i), s.load[0][e] == 0) << name;
    if (s.load[0][e] > 0) routed_used.push_back(i);
  }
  ASSERT_GE(router, 0) << "no h.1.moe.router.weight";
  ASSERT_EQ(wanted_at.size(), 1u);  // one MoE layer routed, once
  EXPECT_EQ(wanted, routed_used);
  EXPECT_LT(static_cast<int>(routed_used.size()),
            n - static_cast<int>(others.size()))
      << "every expert had tokens: the check needs an idle one";
  // Waited once each: every other parameter, and the wanted experts right
  // after they were named (the router before that).
  std::vector<int> sorted = waited;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> expect = others;
  expect.insert(expect.end(), routed_used.begin(), routed_used.end());
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(sorted, expect);
  ASSERT_GT(wanted_at[0], 0);
  EXPECT_EQ(waited[wanted_at[0] - 1], router);
  ASSERT_LE(wanted_at[0] + routed_used.size(), waited.size());
  EXPECT_EQ(std::vector<int>(waited.begin() + wanted_at[0],
                             waited.begin() + wanted_at[0] +
                                 static_cast<int>(routed_used.size())),
            routed_used);
}

// `model` moves its buffers (Model::UseStorage). Checks that storage not
// aligned to 64 bytes is refused with nothing moved, and that after a move
// into aligned storage (returned, kept alive by the model) param_data and
// grad_data lie in it, the weights and gradients are kept, and a pass gives
// the loss and gradients of a pass before the move, bit for bit.
inline std::shared_ptr<float[]> ExpectUseStorageMovesTheBuffers(
    Model& model, const int32_t* tokens, const int32_t* targets, int B, int T) {
  const int n = static_cast<int>(model.params().size());
  auto numel = [&](int i) {
    return static_cast<int64_t>(model.params()[i].spec.numel());
  };
  absl::StatusOr<float> want = model.ForwardBackward(tokens, targets, B, T);
  EXPECT_TRUE(want.ok()) << want.status();
  if (!want.ok()) return nullptr;
  std::vector<std::vector<float>> weights(n), grads(n);
  for (int i = 0; i < n; ++i) {
    weights[i].assign(model.param_data(i), model.param_data(i) + numel(i));
    grads[i].assign(model.grad_data(i), model.grad_data(i) + numel(i));
  }
  const int64_t floats = model.storage_floats();
  EXPECT_GT(floats, 0);
  // Whole pages, as a shared-memory region's (a GPU model pins them, and a
  // driver refuses a page pinned twice), and a float more, so that an
  // offset of one stays inside.
  const int64_t allocated = (floats + 1 + 1023) / 1024 * 1024;
  std::shared_ptr<float[]> storage(
      new (std::align_val_t{4096}) float[allocated],
      [](float* p) { ::operator delete[](p, std::align_val_t{4096}); });
  const float* before = model.param_data(0);
  EXPECT_EQ(model.UseStorage(storage.get() + 1, storage).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.param_data(0), before);
  const absl::Status moved = model.UseStorage(storage.get(), storage);
  EXPECT_TRUE(moved.ok()) << moved;
  if (!moved.ok()) return nullptr;
  for (int i = 0; i < n; ++i) {
    for (const float* p : {model.param_data(i), model.grad_data(i)}) {
      EXPECT_TRUE(p >= storage.get() && p + numel(i) <= storage.get() + floats)
          << model.params()[i].spec.name;
    }
    EXPECT_EQ(
        std::vector<float>(model.param_data(i), model.param_data(i) + numel(i)),
        weights[i])
        << model.params()[i].spec.name;
    EXPECT_EQ(
        std::vector<float>(model.grad_data(i), model.grad_data(i) + numel(i)),
        grads[i])
        << model.params()[i].spec.name << " (gradient)";
  }
  absl::StatusOr<float> got = model.ForwardBackward(tokens, targets, B, T);
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok()) return nullptr;
  EXPECT_EQ(*got, *want);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(
        std::vector<float>(model.grad_data(i), model.grad_data(i) + numel(i)),
        grads[i])
        << model.params()[i].spec.name;
  }
  return storage;
}

}  // namespace strata::testing

#endif  // STRATA_TESTING_MODEL_TEST_UTIL_H_

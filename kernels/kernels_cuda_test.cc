// Each CUDA kernel against its CPU twin (kernels/*.h) on the same
// bf16-rounded inputs. Tolerance atol + rtol * |ref| with bf16's: outputs
// are rounded to 8 significant bits (relative 2^-8 = 0.4%), and inputs of
// later GEMMs carry that rounding too. Skips without a CUDA device.
#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/cuda_ops.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "optim/optimizer.h"
#include "testing/cuda/test_util.h"

namespace strata::kernels {
namespace {

using cuda::bf16;

constexpr double kAtol = 1e-2, kRtol = 2e-2;

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  return cuda::test_util::RandomBf16(n, seed, scale);
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 double atol = kAtol, double rtol = kRtol) {
  cuda::test_util::ExpectClose(got, want, atol, rtol);
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto ctx = cuda::Context::Create();
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
  }
  void TearDown() override {
    for (void* p : buffers_) cudaFree(p);
  }

  void* Alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    cudaMemset(p, 0, bytes);
    buffers_.push_back(p);
    return p;
  }
  bf16* Bf16(const std::vector<float>& host) {
    std::vector<bf16> h(host.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = __float2bfloat16(host[i]);
    auto* d = static_cast<bf16*>(Alloc(h.size() * sizeof(bf16)));
    cudaMemcpy(d, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice);
    return d;
  }
  template <typename T>
  T* Raw(const std::vector<T>& host) {
    auto* d = static_cast<T*>(Alloc(host.size() * sizeof(T)));
    cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
  }
  std::vector<float> Get(const bf16* d, size_t n) {
    EXPECT_TRUE(ctx_->Synchronize().ok());
    std::vector<bf16> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
    return out;
  }
  std::vector<float> Get(const float* d, size_t n) {
    EXPECT_TRUE(ctx_->Synchronize().ok());
    std::vector<float> out(n);
    cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    return out;
  }

  void CheckAttention(cuda::AttentionKind kind, int B, int T, int C, int NH);

  std::unique_ptr<cuda::Context> ctx_;
  std::vector<void*> buffers_;
};

TEST_F(CudaOps, EncoderMatchesCpu) {
  const int B = 2, T = 5, C = 16, V = 7;
  std::vector<int32_t> tokens = {0, 1, 6, 6, 2, 3, 3, 0, 5, 4};
  std::vector<float> wte = Random(V * C, 1), wpe = Random(T * C, 2);
  std::vector<float> out(B * T * C), dout = Random(B * T * C, 3);
  EncoderForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  bf16* d_out = static_cast<bf16*>(Alloc(out.size() * sizeof(bf16)));
  int32_t* d_tok = Raw(tokens);
  ASSERT_TRUE(
      cuda::EncoderForward(*ctx_, d_out, d_tok, Bf16(wte), Bf16(wpe), B, T, C)
          .ok());
  ExpectClose(Get(d_out, out.size()), out);
  // Accumulated: both sides start from the same random values.
  std::vector<float> dwte = Random(V * C, 4), dwpe = Random(T * C, 5);
  float* d_dwte = Raw(dwte);
  float* d_dwpe = Raw(dwpe);
  EncoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T,
                  C);
  ASSERT_TRUE(
      cuda::EncoderBackward(*ctx_, d_dwte, d_dwpe, Bf16(dout), d_tok, B, T, C)
          .ok());
  ExpectClose(Get(d_dwte, dwte.size()), dwte);
  ExpectClose(Get(d_dwpe, dwpe.size()), dwpe);
}

TEST_F(CudaOps, LayerNormMatchesCpu) {
  const int N = 33, C = 80;
  std::vector<float> inp = Random(N * C, 1), w = Random(C, 2), b = Random(C, 3);
  std::vector<float> dout = Random(N * C, 4), out(N * C), mean(N), rstd(N);
  LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                   b.data(), N, C);
  // Accumulated: both sides start from the same random values.
  std::vector<float> dinp = Random(N * C, 5), dw = Random(C, 6);
  std::vector<float> db = Random(C, 7);
  bf16* d_dinp = Bf16(dinp);
  float* d_dw = Raw(dw);
  float* d_db = Raw(db);
  LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                    w.data(), mean.data(), rstd.data(), N, C);
  bf16* d_out = static_cast<bf16*>(Alloc(N * C * sizeof(bf16)));
  float* d_mean = static_cast<float*>(Alloc(N * 4));
  float* d_rstd = static_cast<float*>(Alloc(N * 4));
  bf16 *d_inp = Bf16(inp), *d_w = Bf16(w);
  ASSERT_TRUE(cuda::LayerNormForward(*ctx_, d_out, d_mean, d_rstd, d_inp, d_w,
                                     Bf16(b), N, C)
                  .ok());
  ExpectClose(Get(d_out, out.size()), out);
  ASSERT_TRUE(cuda::LayerNormBackward(*ctx_, d_dinp, d_dw, d_db, Bf16(dout),
                                      d_inp, d_w, d_mean, d_rstd, N, C)
                  .ok());
  ExpectClose(Get(d_dinp, dinp.size()), dinp);
  ExpectClose(Get(d_dw, C), dw, 5e-2);
  ExpectClose(Get(d_db, C), db, 5e-2);
}

TEST_F(CudaOps, MatmulMatchesCpu) {
  const int N = 48, C = 64, OC = 96;
  std::vector<float> inp = Random(N * C, 1), w = Random(OC * C, 2, 0.2f);
  std::vector<float> b = Random(OC, 3), dout = Random(N * OC, 4);
  // dweight and dbias accumulate: both sides start from the same random
  // values. dinp is overwritten: the device's starts as garbage.
  std::vector<float> out(N * OC), dinp(N * C), dw = Random(OC * C, 5);
  std::vector<float> db = Random(OC, 6);
  float* d_dw = Raw(dw);
  float* d_db = Raw(db);
  MatmulForward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  MatmulBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                 w.data(), N, C, OC);
  bf16 *d_inp = Bf16(inp), *d_w = Bf16(w);
  bf16* d_out = static_cast<bf16*>(Alloc(N * OC * sizeof(bf16)));
  ASSERT_TRUE(
      cuda::MatmulForward(*ctx_, d_out, d_inp, d_w, Bf16(b), N, C, OC).ok());
  ExpectClose(Get(d_out, out.size()), out);
  bf16* d_dinp = static_cast<bf16*>(Alloc(N * C * sizeof(bf16)));
  cudaMemset(d_dinp, 0x7f, N * C * sizeof(bf16));
  ASSERT_TRUE(cuda::MatmulBackward(*ctx_, d_dinp, d_dw, d_db, Bf16(dout), d_inp,
                                   d_w, N, C, OC)
                  .ok());
  ExpectClose(Get(d_dinp, dinp.size()), dinp);
  ExpectClose(Get(d_dw, dw.size()), dw, 5e-2);
  ExpectClose(Get(d_db, db.size()), db, 5e-2);
}

// Forward and backward of one attention kind against the CPU kernels. T
// values that are not multiples of 64 exercise the fused kernels' partial
// tiles; T > 128 makes their walks span several tiles.
void CudaOps::CheckAttention(cuda::AttentionKind kind, int B, int T, int C,
                             int NH) {
  SCOPED_TRACE(testing::Message()
               << (kind == cuda::AttentionKind::kFused ? "fused" : "unfused")
               << " B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
  std::vector<float> qkv = Random(B * T * 3 * C, 1);
  std::vector<float> dout = Random(B * T * C, 2);
  std::vector<float> out(B * T * C), att(int64_t{B} * NH * T * T);
  std::vector<float> dqkv(qkv.size()), scratch(att.size());
  AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  AttentionBackward(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                    att.data(), B, T, C, NH);
  bf16* d_qkv = Bf16(qkv);
  bf16* d_out = static_cast<bf16*>(Alloc(out.size() * sizeof(bf16)));
  void* d_saved = Alloc(cuda::AttentionSavedBytes(kind, B, T, C, NH));
  void* d_scratch = Alloc(cuda::AttentionScratchBytes(kind, B, T, C, NH));
  ASSERT_TRUE(cuda::AttentionForward(*ctx_, kind, d_out, d_saved, d_scratch,
                                     d_qkv, B, T, C, NH)
                  .ok());
  ExpectClose(Get(d_out, out.size()), out);
  if (kind == cuda::AttentionKind::kUnfused) {
    ExpectClose(Get(static_cast<bf16*>(d_saved), att.size()), att);
  }
  bf16* d_dqkv = static_cast<bf16*>(Alloc(qkv.size() * sizeof(bf16)));
  // Garbage in dqkv must not leak through: it is overwritten.
  cudaMemset(d_dqkv, 0x7f, qkv.size() * sizeof(bf16));
  ASSERT_TRUE(cuda::AttentionBackward(*ctx_, kind, d_dqkv, d_scratch,
                                      Bf16(dout), d_qkv, d_out, d_saved, B, T,
                                      C, NH)
                  .ok());
  ExpectClose(Get(d_dqkv, dqkv.size()), dqkv, 2e-2, 4e-2);
}

TEST_F(CudaOps, AttentionMatchesCpu) {
  // Head size 8: only the unfused kernels take it.
  EXPECT_EQ(cuda::ChooseAttention(*ctx_, 2, 70, 32, 4),
            cuda::AttentionKind::kUnfused);
  CheckAttention(cuda::AttentionKind::kUnfused, 2, 70, 32, 4);
  // Head sizes 32, 64 and 128 both ways.
  for (const auto& [B, T, C, NH] :
       {std::array<int, 4>{2, 70, 64, 2}, std::array<int, 4>{2, 130, 128, 2},
        std::array<int, 4>{1, 200, 256, 2},
        std::array<int, 4>{3, 64, 128, 2}}) {
    // Every GPU this build targets (sm_90: 227 KiB per block) takes these.
    EXPECT_EQ(cuda::ChooseAttention(*ctx_, B, T, C, NH),
              cuda::AttentionKind::kFused);
    CheckAttention(cuda::AttentionKind::kFused, B, T, C, NH);
    CheckAttention(cuda::AttentionKind::kUnfused, B, T, C, NH);
  }
}

TEST_F(CudaOps, GeluAndResidualMatchCpu) {
  const int n = 5000;
  std::vector<float> x = Random(n, 1, 2.0f), d = Random(n, 2), y(n), dx(n);
  GeluForward(y.data(), x.data(), n);
  GeluBackward(dx.data(), x.data(), d.data(), n);
  bf16 *d_x = Bf16(x), *d_d = Bf16(d);
  bf16* d_y = static_cast<bf16*>(Alloc(n * sizeof(bf16)));
  ASSERT_TRUE(cuda::GeluForward(*ctx_, d_y, d_x, n).ok());
  ExpectClose(Get(d_y, n), y);
  ASSERT_TRUE(cuda::GeluBackward(*ctx_, d_y, d_x, d_d, n).ok());
  ExpectClose(Get(d_y, n), dx);

  // da and db accumulate: both sides start from the same random values.
  std::vector<float> sum(n), da = Random(n, 3), db = Random(n, 4);
  bf16* d_da = Bf16(da);
  bf16* d_db = Bf16(db);
  ResidualForward(sum.data(), x.data(), d.data(), n);
  ResidualBackward(da.data(), db.data(), d.data(), n);
  ASSERT_TRUE(cuda::ResidualForward(*ctx_, d_y, d_x, d_d, n).ok());
  ExpectClose(Get(d_y, n), sum);
  ASSERT_TRUE(cuda::ResidualBackward(*ctx_, d_da, d_db, d_d, n).ok());
  ExpectClose(Get(d_da, n), da);
  ExpectClose(Get(d_db, n), db);
}

// Rows of V = 1000 logits at a stride of ld = 1024, as the LM head's padded
// vocabulary: the padding holds huge logits that must not be read, and its
// gradients must come out 0.
TEST_F(CudaOps, SoftmaxCrossEntropyMatchesCpu) {
  const int N = 9, V = 1000, ld = 1024;
  std::vector<float> logits = Random(N * V, 1, 3.0f);
  std::vector<int32_t> targets = {0, 999, 5, 5, 17, 100, 250, 3, 998};
  std::vector<float> grad = logits, losses(N);
  SoftmaxCrossEntropyFused(grad.data(), targets.data(), 1.0f / N, losses.data(),
                           N, V);
  std::vector<float> padded(N * ld, 1e30f);
  for (int n = 0; n < N; ++n) {
    std::copy_n(logits.begin() + n * V, V, padded.begin() + n * ld);
  }
  bf16* d_grad = static_cast<bf16*>(Alloc(N * ld * sizeof(bf16)));
  float* d_losses = static_cast<float*>(Alloc(N * 4));
  ASSERT_TRUE(cuda::SoftmaxCrossEntropyFused(*ctx_, d_grad, d_losses,
                                             Raw(padded), Raw(targets),
                                             1.0f / N, N, V, ld)
                  .ok());
  ExpectClose(Get(d_losses, N), losses, 1e-4, 1e-4);
  const std::vector<float> got = Get(d_grad, N * ld);
  std::vector<float> got_v, pad;
  for (int n = 0; n < N; ++n) {
    got_v.insert(got_v.end(), got.begin() + n * ld, got.begin() + n * ld + V);
    pad.insert(pad.end(), got.begin() + n * ld + V, got.begin() + (n + 1) * ld);
  }
  ExpectClose(got_v, grad, 1e-4, 1e-2);
  EXPECT_EQ(pad, std::vector<float>(pad.size(), 0.0f));
  EXPECT_EQ(cuda::SoftmaxCrossEntropyFused(*ctx_, d_grad, d_losses, Raw(padded),
                                           Raw(targets), 1.0f / N, N, V, V - 1)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Three AdamW steps on the device against ApplyUpdate (the server's); the
// only difference allowed is FMA contraction, so the tolerance is fp32's.
TEST_F(CudaOps, AdamUpdateMatchesCpu) {
  const int n = 10007;  // not a multiple of the block size
  OptimizerParams p;
  p.kind = OptimizerParams::kAdamW;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  std::vector<float> w = Random(n, 1), m(n, 0.0f), v(n, 0.0f);
  float* d_w = Raw(w);
  float* d_m = Raw(m);
  float* d_v = Raw(v);
  bf16* d_wb = static_cast<bf16*>(Alloc(n * sizeof(bf16)));
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = Random(n, 10 + t);
    const float lr = ScheduledLr(p, t - 1);
    ApplyUpdate(p, lr, t, w.data(), m.data(), v.data(), g.data(), n);
    ASSERT_TRUE(cuda::AdamUpdate(*ctx_, d_w, d_wb, d_m, d_v, Raw(g), n,
                                 MakeAdamStep(p, lr, t))
                    .ok());
  }
  ExpectClose(Get(d_w, n), w, 1e-6, 1e-5);
  ExpectClose(Get(d_m, n), m, 1e-6, 1e-5);
  ExpectClose(Get(d_v, n), v, 1e-6, 1e-5);
  std::vector<float> rounded(n);
  for (int i = 0; i < n; ++i) {
    rounded[i] = __bfloat162float(__float2bfloat16(w[i]));
  }
  ExpectClose(Get(d_wb, n), rounded, 1e-6, 1e-2);
}

// One launch over spans of a buffer, as GptCuda's resident training: each
// span as AdamUpdate with its kind's step (0 or 1), a kAdamSpanUntouched
// span untouched; spans that cross the kernel's tiles, and an empty one.
TEST_F(CudaOps, AdamUpdateSpansMatchesPerSpanUpdates) {
  OptimizerParams with_decay;
  with_decay.kind = OptimizerParams::kAdamW;
  with_decay.lr = 1e-2f;
  with_decay.weight_decay = 0.1f;
  OptimizerParams without = with_decay;
  without.weight_decay = 0;
  const std::vector<int64_t> starts = {0, 700, 700, 5000, 5100, 9000, 10007};
  const std::vector<uint8_t> kinds = {1, 0, 1, cuda::kAdamSpanUntouched, 0, 1};
  const int spans = static_cast<int>(kinds.size());
  const int64_t n = starts.back();
  std::vector<float> w = Random(n, 1), m(n, 0.5f), v(n, 0.25f);
  const std::vector<float> w0 = w;
  float* d_w = Raw(w);
  float* d_m = Raw(m);
  float* d_v = Raw(v);
  std::vector<bf16> wb0(n, __float2bfloat16(7.0f));
  bf16* d_wb = Raw(wb0);
  for (int t = 1; t <= 2; ++t) {
    const std::vector<float> g = Random(n, 20 + t);
    for (int i = 0; i < spans; ++i) {
      if (kinds[i] == cuda::kAdamSpanUntouched) continue;
      const OptimizerParams& p = kinds[i] == 1 ? with_decay : without;
      const int64_t at = starts[i];
      ApplyUpdate(p, ScheduledLr(p, t - 1), t, w.data() + at, m.data() + at,
                  v.data() + at, g.data() + at, starts[i + 1] - at);
    }
    ASSERT_TRUE(cuda::AdamUpdateSpans(
                    *ctx_, d_w, d_wb, d_m, d_v, Raw(g), Raw(starts), Raw(kinds),
                    spans, n,
                    MakeAdamStep(without, ScheduledLr(without, t - 1), t),
                    MakeAdamStep(with_decay, ScheduledLr(with_decay, t - 1), t))
                    .ok());
  }
  ExpectClose(Get(d_w, n), w, 1e-6, 1e-5);
  ExpectClose(Get(d_m, n), m, 1e-6, 1e-5);
  ExpectClose(Get(d_v, n), v, 1e-6, 1e-5);
  const std::vector<float> wb = Get(d_wb, n);
  for (int64_t i = 5000; i < 5100; ++i) {  // the untouched span
    ASSERT_EQ(w[i], w0[i]);
    ASSERT_EQ(wb[i], 7.0f) << i;
  }
  EXPECT_NE(wb[0], 7.0f);
  EXPECT_NE(wb[n - 1], 7.0f);
}

TEST_F(CudaOps, LaunchersRejectBadShapes) {
  for (auto kind :
       {cuda::AttentionKind::kFused, cuda::AttentionKind::kUnfused}) {
    EXPECT_EQ(cuda::AttentionForward(*ctx_, kind, nullptr, nullptr, nullptr,
                                     nullptr, 1, 4, 10, 3)
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Head size 8 is not one the fused kernels take.
  EXPECT_EQ(cuda::AttentionForward(*ctx_, cuda::AttentionKind::kFused, nullptr,
                                   nullptr, nullptr, nullptr, 1, 4, 32, 4)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::MatmulForward(*ctx_, nullptr, nullptr, nullptr, nullptr, 0, 4, 4)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels

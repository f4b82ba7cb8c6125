// GptCuda's mixture-of-experts layer: the same math as the CPU layer
// (model/moe_layer.h), with the routing on the host and the rest on the
// device.
//
// Forward: the router's logits (fp32, cuBLAS) go to the host, where
// MoeRouter routes them exactly as the CPU layer does (softmax, top-k,
// capacity in token order, the aux loss); the routing comes back up as
// indices (model/gpt_cuda_device.h, MoeActs). The experts with tokens are
// named and waited for only then, as on the CPU, and go up on the upload
// stream. Their rows are gathered expert by expert, run through their
// MLPs (per expert: fc GEMM, bias + GELU, proj GEMM, bias) and combined
// into the residual stream in one kernel. Recomputed (--recompute), the
// layer reuses its routing and runs the experts again.
// Backward: the combine's backward gives each row's gradient and each
// gate's (fp32); the gates' go to the host for MoeRouter's softmax and aux
// gradient, and the logits' gradient comes back (bf16) for the router's
// GEMMs, which write dL/d(in); the experts' backward adds into it.
//
// Each host round trip (forward: the logits; backward: the gates'
// gradients) waits for the device: twice an MoE layer a training step,
// once an evaluation. A few microseconds against an MoE layer's GEMMs at
// GPT-2 sizes, but the device cannot run ahead of the host there.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda_ops.h"
#include "model/gpt_cuda.h"
#include "model/gpt_cuda_device.h"
#include "model/gpt_layout.h"

namespace strata {

namespace kc = ::strata::kernels::cuda;
using gpt_cuda::CudaStatus;
using namespace ::strata::gpt_layout;  // NOLINT: the shared parameter layout

namespace {

// The slot of expert e's first parameter (fc.weight) in its block;
// fc.bias, proj.weight and proj.bias follow it.
int ExpertSlot(int e) { return kMoeRouter + 1 + kParamsPerExpert * e; }

}  // namespace

void GptCuda::SetParamsWantedCallback(
    std::function<void(absl::Span<const int>)> cb) {
  params_wanted_ = std::move(cb);
}

bool GptCuda::ParamUnused(int i) const {
  int l = 0, e = 0;
  if (!host_->ExpertOf(i, &l, &e) ||
      static_cast<size_t>(l) >= dev_->moe.size() ||
      !dev_->moe[l].router.has_value()) {
    return false;
  }
  const std::vector<int>& load = dev_->moe[l].router->routing().load;
  return !load.empty() && load[e] == 0;
}

const MoeRouting* GptCuda::moe_routing(int layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= dev_->moe.size() ||
      !dev_->moe[layer].router.has_value()) {
    return nullptr;
  }
  return &dev_->moe[layer].router->routing();
}

MoeStats GptCuda::moe_stats() const {
  MoeStats s;
  for (const gpt_cuda::MoeActs& m : dev_->moe) {
    if (!m.router.has_value()) continue;
    const MoeRouting& r = m.router->routing();
    if (r.load.empty()) continue;  // not routed yet
    s.aux_loss += r.aux_loss;
    s.dropped += r.dropped;
    s.assignments += int64_t{dev_->B} * dev_->T * config().top_k;
    s.load.push_back(r.load);
  }
  return s;
}

absl::Status GptCuda::MoeRoute(int l, const bf16* in) {
  Device& d = *dev_;
  kc::Context& ctx = *d.ctx;
  const GptConfig& c = config();
  const int N = d.B * d.T, E = c.experts, K = c.top_k;
  gpt_cuda::MoeActs& m = d.moe[l];
  MoeRouter& router = *m.router;
  float* logits = d.moe_scratch.logits.as<float>();
  STRATA_RETURN_IF_ERROR(Op("fwd.moe_router", [&] {
    return kc::MoeRouterLogits(ctx, logits, in, d.W(d.Block(l, kMoeRouter)), N,
                               c.width, E);
  }));
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(router.logits(), logits, int64_t{N} * E * 4,
                                 cudaMemcpyDeviceToHost, ctx.stream()),
                 "copy router logits"));
  STRATA_RETURN_IF_ERROR(ctx.Synchronize());
  STRATA_RETURN_IF_ERROR(router.Route(nullptr));
  const MoeRouting& r = router.routing();
  m.first_row.assign(E + 1, 0);
  m.host_src.clear();
  for (int e = 0; e < E; ++e) {
    m.first_row[e + 1] = m.first_row[e] + r.load[e];
    m.host_src.insert(m.host_src.end(), r.tokens[e].begin(), r.tokens[e].end());
  }
  m.host_row.assign(size_t{1} * N * K, -1);
  for (size_t a = 0; a < m.host_row.size(); ++a) {
    if (r.slot[a] >= 0) m.host_row[a] = m.first_row[r.expert[a]] + r.slot[a];
  }
  // From pageable memory: these host buffers are written again only
  // after the next wait for the device (the next step's MoeRoute).
  const cudaStream_t s = ctx.stream();
  if (!m.host_src.empty()) {
    STRATA_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(m.src.as<int32_t>(), m.host_src.data(),
                        m.host_src.size() * 4, cudaMemcpyHostToDevice, s),
        "copy MoE rows"));
  }
  STRATA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(m.row.as<int32_t>(), m.host_row.data(),
                      m.host_row.size() * 4, cudaMemcpyHostToDevice, s),
      "copy MoE choices"));
  return CudaStatus(
      cudaMemcpyAsync(m.gate.as<float>(), r.gate.data(), r.gate.size() * 4,
                      cudaMemcpyHostToDevice, s),
      "copy MoE gates");
}

absl::Status GptCuda::FetchExperts(int l) {
  Device& d = *dev_;
  const MoeRouting& r = d.moe[l].router->routing();
  wanted_.clear();
  for (int e = 0; e < config().experts; ++e) {
    if (r.load[e] == 0) continue;
    const int first = d.Block(l, ExpertSlot(e));
    for (int s = 0; s < kParamsPerExpert; ++s) wanted_.push_back(first + s);
  }
  if (params_wanted_) params_wanted_(wanted_);
  for (size_t i = 0; i < wanted_.size(); i += kParamsPerExpert) {
    STRATA_RETURN_IF_ERROR(
        UploadParams(wanted_[i], wanted_[i] + kParamsPerExpert));
  }
  return d.Order(d.up, d.ctx->stream());
}

absl::Status GptCuda::RunExperts(int l) {
  Device& d = *dev_;
  kc::Context& ctx = *d.ctx;
  const GptConfig& c = config();
  const int C = c.width, H = c.ExpertHidden();
  const gpt_cuda::MoeActs& m = d.moe[l];
  gpt_cuda::MoeRows& rows = d.moe_rows[c.recompute ? 0 : l];
  for (int e = 0; e < c.experts; ++e) {
    const int n = m.first_row[e + 1] - m.first_row[e];
    if (n == 0) continue;
    const int64_t o = m.first_row[e];
    const int p = d.Block(l, ExpertSlot(e));
    bf16* pre = rows.pre.as<bf16>() + o * H;
    bf16* post = rows.post.as<bf16>() + o * H;
    STRATA_RETURN_IF_ERROR(Op("fwd.moe_experts", [&] {
      STRATA_RETURN_IF_ERROR(kc::MatmulForward(
          ctx, pre, rows.in.as<bf16>() + o * C, d.W(p), nullptr, n, C, H));
      STRATA_RETURN_IF_ERROR(
          kc::BiasGeluForward(ctx, post, pre, d.W(p + 1), n, H));
      return kc::MatmulForward(ctx, rows.y.as<bf16>() + o * C, post, d.W(p + 2),
                               d.W(p + 3), n, H, C);
    }));
  }
  return absl::OkStatus();
}

absl::Status GptCuda::MoeForward(int l, bf16* out, const bf16* residual,
                                 const bf16* in, bool recompute) {
  Device& d = *dev_;
  kc::Context& ctx = *d.ctx;
  const GptConfig& c = config();
  const int N = d.B * d.T;
  // Recomputed, the layer keeps its routing (per layer, unlike its rows)
  // and its experts' weights: it routes once a step.
  if (!recompute) {
    STRATA_RETURN_IF_ERROR(MoeRoute(l, in));
    // Resident, every expert is on the device already.
    if (!d.resident) STRATA_RETURN_IF_ERROR(FetchExperts(l));
  }
  const gpt_cuda::MoeActs& m = d.moe[l];
  gpt_cuda::MoeRows& rows = d.moe_rows[c.recompute ? 0 : l];
  STRATA_RETURN_IF_ERROR(Op("fwd.moe_dispatch", [&] {
    return kc::MoeGatherRows(ctx, rows.in.as<bf16>(), in, m.src.as<int32_t>(),
                             m.first_row[c.experts], c.width);
  }));
  STRATA_RETURN_IF_ERROR(RunExperts(l));
  return Op("fwd.moe_combine", [&] {
    return kc::MoeCombine(ctx, out, residual, rows.y.as<bf16>(),
                          m.row.as<int32_t>(), m.gate.as<float>(), N, c.top_k,
                          c.width);
  });
}

absl::Status GptCuda::ExpertsBackward(int l) {
  Device& d = *dev_;
  kc::Context& ctx = *d.ctx;
  const GptConfig& c = config();
  const int C = c.width, H = c.ExpertHidden();
  const gpt_cuda::MoeActs& m = d.moe[l];
  const gpt_cuda::MoeRows& rows = d.moe_rows[c.recompute ? 0 : l];
  gpt_cuda::MoeScratch& s = d.moe_scratch;
  for (int e = 0; e < c.experts; ++e) {
    const int n = m.first_row[e + 1] - m.first_row[e];
    if (n == 0) continue;
    const int64_t o = m.first_row[e];
    const int p = d.Block(l, ExpertSlot(e));
    bf16* dpost = s.dpost.as<bf16>() + o * H;
    STRATA_RETURN_IF_ERROR(Op("bwd.moe_experts", [&] {
      STRATA_RETURN_IF_ERROR(kc::MatmulBackward(
          ctx, dpost, d.G(p + 2), d.G(p + 3), s.dy.as<bf16>() + o * C,
          rows.post.as<bf16>() + o * H, d.W(p + 2), n, H, C));
      STRATA_RETURN_IF_ERROR(kc::GeluBackward(
          ctx, dpost, rows.pre.as<bf16>() + o * H, dpost, int64_t{n} * H));
      return kc::MatmulBackward(ctx, s.din.as<bf16>() + o * C, d.G(p),
                                d.G(p + 1), dpost, rows.in.as<bf16>() + o * C,
                                d.W(p), n, C, H);
    }));
  }
  return absl::OkStatus();
}

absl::Status GptCuda::MoeBackward(int l, bf16* din, const bf16* dout,
                                  const bf16* in) {
  Device& d = *dev_;
  kc::Context& ctx = *d.ctx;
  const GptConfig& c = config();
  const int N = d.B * d.T, E = c.experts, K = c.top_k;
  const gpt_cuda::MoeActs& m = d.moe[l];
  const gpt_cuda::MoeRows& rows = d.moe_rows[c.recompute ? 0 : l];
  gpt_cuda::MoeScratch& s = d.moe_scratch;
  STRATA_RETURN_IF_ERROR(Op("bwd.moe_combine", [&] {
    return kc::MoeCombineBackward(ctx, s.dy.as<bf16>(), s.dgate.as<float>(),
                                  dout, rows.y.as<bf16>(), m.row.as<int32_t>(),
                                  m.gate.as<float>(), N, K, c.width);
  }));
  // The router's backward on the host: the gates' gradients down, the
  // logits' up. dL/d(aux) is 1: the aux loss adds to the training loss.
  STRATA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(s.host_dgate.data(), s.dgate.as<float>(),
                      int64_t{N} * K * 4, cudaMemcpyDeviceToHost, ctx.stream()),
      "copy MoE gate gradients"));
  STRATA_RETURN_IF_ERROR(ctx.Synchronize());
  m.router->LogitGradient(s.host_dgate.data(), /*daux=*/1.0f,
                          s.host_dlogit.data());
  for (size_t i = 0; i < s.host_dlogit.size(); ++i) {
    s.host_dlogit_bf16[i] = __float2bfloat16(s.host_dlogit[i]);
  }
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(s.dlogit.as<bf16>(), s.host_dlogit_bf16.data(),
                                 int64_t{N} * E * sizeof(bf16),
                                 cudaMemcpyHostToDevice, ctx.stream()),
                 "copy router logit gradients"));
  const int router = d.Block(l, kMoeRouter);
  // The router writes din; the experts' rows add to it.
  STRATA_RETURN_IF_ERROR(Op("bwd.moe_router", [&] {
    return kc::MatmulBackward(ctx, din, d.G(router), nullptr,
                              s.dlogit.as<bf16>(), in, d.W(router), N, c.width,
                              E);
  }));
  STRATA_RETURN_IF_ERROR(ExpertsBackward(l));
  STRATA_RETURN_IF_ERROR(Op("bwd.moe_combine", [&] {
    return kc::MoeAddRows(ctx, din, s.din.as<bf16>(), m.row.as<int32_t>(), N, K,
                          c.width);
  }));
  for (int i = router; i < d.Block(l + 1, 0); ++i) {
    STRATA_RETURN_IF_ERROR(GradReady(i));
  }
  return absl::OkStatus();
}

}  // namespace strata

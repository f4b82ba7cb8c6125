#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/parallel.h"
#include "common/status.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "model/cpu_block_ops.h"
#include "model/gpt_layout.h"
#include "model/transformer_block.h"

namespace strata {
namespace {

namespace k = ::strata::kernels;

using namespace ::strata::gpt_layout;  // NOLINT: the shared parameter layout

// Parameters are padded to this many floats (64 bytes) in the flat buffers.
constexpr int64_t kAlignFloats = 16;

// Fills w[0, n) with N(0, scale^2) samples. Each block of kInitBlock values
// has its own generator seeded by (seed, tensor, block), so the values do not
// depend on the number of threads or on the sizes of other tensors.
constexpr int64_t kInitBlock = int64_t{1} << 16;

void FillNormal(float* w, int64_t n, float scale, uint64_t seed,
                size_t tensor) {
  const int64_t blocks = (n + kInitBlock - 1) / kInitBlock;
  ParallelFor(blocks, 1, [&](int, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::seed_seq seq{
          static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
          static_cast<uint32_t>(tensor), static_cast<uint32_t>(b)};
      std::mt19937 rng(seq);
      std::normal_distribution<float> dist(0.0f, scale);
      const int64_t end = std::min(n, (b + 1) * kInitBlock);
      for (int64_t j = b * kInitBlock; j < end; ++j) w[j] = dist(rng);
    }
  });
}

}  // namespace

// Activations of one block for a (B,T) batch; N = B*T.
struct BlockActs {
  std::vector<float> ln1, ln1_mean, ln1_rstd;  // (N,C), (N), (N)
  std::vector<float> qkv;                      // (N,3C)
  std::vector<float> att;                      // (B,NH,T,T) probabilities
  std::vector<float> atty;                     // (N,C) attention output
  std::vector<float> res2;                     // (N,C) x + attention branch
  std::vector<float> ln2, ln2_mean, ln2_rstd;  // (N,C), (N), (N)
  std::vector<float> fch, fch_gelu;            // (N,4C)
};

// Every buffer a forward/backward needs, sized for the last (B,T) seen.
// Vectors only grow, so steady-state steps allocate nothing.
struct Gpt::Workspace {
  int B = 0, T = 0;
  std::vector<float> x;  // (L+1,N,C): block inputs; x[L] is the last output
  std::vector<BlockActs> blocks;  // one per layer, or one with recompute
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // (N,C), (N), (N)
  std::vector<float> logits;                   // (rows,V), a chunk of rows
  std::vector<float> losses;                   // (N)
  std::vector<float> dres;                     // (N,C) residual gradient
  std::vector<float> dln;                      // (N,C)
  std::vector<float> dqkv;                     // (N,3C)
  std::vector<float> dfch;                     // (N,4C)
  std::vector<float> datt;                     // (B,NH,T,T) scratch
  // Per layer: its MoE layer (with what its backward needs, also under
  // recompute), or none for a dense block.
  std::vector<std::optional<MoeLayer>> moe;

  // MoE layers over `group` when it is set (Gpt::SetExpertGroup).
  void Resize(const GptConfig& cfg, int b, int t, Communicator* group) {
    if (b == B && t == T) return;
    B = b;
    T = t;
    moe.clear();
    for (int l = 0; l < cfg.layers; ++l) {
      moe.emplace_back();
      if (!cfg.IsMoeLayer(l)) continue;
      absl::StatusOr<MoeLayer> layer =
          MoeLayer::Create(MoeLayerDims(cfg, b * t), group);
      // GptConfig::Validate checked the settings, ExpertParallelGpt the
      // group.
      STRATA_CHECK(layer.ok());
      moe.back() = std::move(*layer);
    }
    const int64_t N = int64_t{b} * t, C = cfg.width;
    const int64_t att = int64_t{b} * cfg.heads * t * t;
    x.resize((cfg.layers + 1) * N * C);
    blocks.resize(cfg.recompute ? 1 : cfg.layers);
    for (BlockActs& a : blocks) {
      for (auto* v : {&a.ln1, &a.atty, &a.res2, &a.ln2}) v->resize(N * C);
      for (auto* v : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
        v->resize(N);
      }
      a.qkv.resize(N * 3 * C);
      a.att.resize(att);
      a.fch.resize(N * 4 * C);
      a.fch_gelu.resize(N * 4 * C);
    }
    lnf.resize(N * C);
    lnf_mean.resize(N);
    lnf_rstd.resize(N);
    logits.resize(HeadRows(cfg, N) * cfg.vocab);
    losses.resize(N);
    dres.resize(N * C);
    dln.resize(N * C);
    dqkv.resize(N * 3 * C);
    dfch.resize(N * 4 * C);
    datt.resize(att);
  }

  // Rows of logits the LM head computes at once.
  static int64_t HeadRows(const GptConfig& cfg, int64_t N) {
    return std::clamp<int64_t>(kHeadChunkFloats / cfg.vocab, 1, N);
  }
};

Gpt::Gpt(const GptConfig& config)
    : config_(config), ws_(std::make_unique<Workspace>()) {}

Gpt::~Gpt() = default;

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::Create(const GptConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  std::unique_ptr<Gpt> gpt(new Gpt(config));
  gpt->BuildParams();
  return gpt;
}

void Gpt::BuildParams() {
  params_ = GptParams(config_);
  int first = kFirstBlockParam;
  for (int l = 0; l <= config_.layers; ++l) {
    first_param_.push_back(first);
    if (l < config_.layers) {
      first += ParamsInLayer(config_.IsMoeLayer(l), config_.experts);
    }
  }
  STRATA_CHECK(first + 2 == static_cast<int>(params_.size()));
  int64_t offset = 0;
  for (const ParamInfo& p : params_) {
    offsets_.push_back(offset);
    const int64_t n = static_cast<int64_t>(p.spec.numel());
    num_params_ += n;
    offset += (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  }
  padded_floats_ = offset;
  owned_.assign(2 * offset, 0.0f);
  values_ = owned_.data();
  grads_ = values_ + offset;
}

absl::Status Gpt::UseStorage(float* storage,
                             std::shared_ptr<const void> owner) {
  if (reinterpret_cast<uintptr_t>(storage) % 64 != 0) {
    return absl::InvalidArgumentError(
        "the model's storage must be aligned to 64 bytes");
  }
  std::copy(values_, values_ + 2 * padded_floats_, storage);
  values_ = storage;
  grads_ = storage + padded_floats_;
  std::vector<float>().swap(owned_);
  storage_owner_ = std::move(owner);
  return absl::OkStatus();
}

void Gpt::SetExpertGroup(Communicator* group) {
  expert_group_ = group;
  // The layers hold the old group: gone now, made again over the new one
  // at the next pass.
  ws_->moe.clear();
  ws_->B = 0;
}

void Gpt::ReadWeightsOf(const Gpt& host) {
  STRATA_CHECK(host.padded_floats_ == padded_floats_);
  if (!owned_.empty() && values_ == owned_.data()) {
    // Keep the gradients alone.
    std::vector<float> grads(grads_, grads_ + padded_floats_);
    owned_.swap(grads);
    grads_ = owned_.data();
  }
  values_ = host.values_;
}

float* Gpt::param_data(int i) {
  STRATA_CHECK(i >= 0 && i < static_cast<int>(params_.size()));
  return values_ + offsets_[i];
}

float* Gpt::grad_data(int i) {
  STRATA_CHECK(i >= 0 && i < static_cast<int>(params_.size()));
  return grads_ + offsets_[i];
}

const float* Gpt::P(int layer, int slot) const {
  return values_ + offsets_[first_param_[layer] + slot];
}

float* Gpt::G(int layer, int slot) {
  return grad_data(first_param_[layer] + slot);
}

void Gpt::InitParams(uint64_t seed) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_[i];
    float* w = param_data(static_cast<int>(i));
    const int64_t n = static_cast<int64_t>(p.spec.numel());
    switch (p.init) {
      case ParamInfo::kZeros:
        std::fill(w, w + n, 0.0f);
        break;
      case ParamInfo::kOnes:
        std::fill(w, w + n, 1.0f);
        break;
      case ParamInfo::kNormal:
        FillNormal(w, n, p.init_scale, seed, i);
        break;
    }
  }
}

void Gpt::SetGradReadyCallback(std::function<void(int)> cb) {
  grad_ready_ = std::move(cb);
}

void Gpt::SetParamWaitCallback(std::function<absl::Status(int)> cb) {
  param_wait_ = std::move(cb);
}

MoeDims MoeLayerDims(const GptConfig& config, int tokens) {
  return {.N = tokens,
          .C = config.width,
          .hidden = config.ExpertHidden(),
          .experts = config.experts,
          .top_k = config.top_k,
          .capacity_factor = config.capacity,
          .aux_alpha = config.aux_loss};
}

bool Gpt::ExpertOf(int i, int* layer, int* expert) const {
  const int L = config_.layers;
  if (config_.experts == 0 || i < first_param_[0] || i >= first_param_[L]) {
    return false;
  }
  const int l =
      static_cast<int>(std::upper_bound(first_param_.begin(),
                                        first_param_.begin() + L + 1, i) -
                       first_param_.begin()) -
      1;
  const int s = i - first_param_[l] - (kMoeRouter + 1);
  if (!config_.IsMoeLayer(l) || s < 0) return false;
  *layer = l;
  *expert = s / kParamsPerExpert;
  return true;
}

bool Gpt::RoutedParam(int i) const {
  int l = 0, e = 0;
  return ExpertOf(i, &l, &e);
}

void Gpt::SetParamsWantedCallback(
    std::function<void(absl::Span<const int>)> cb) {
  params_wanted_ = std::move(cb);
}

bool Gpt::ParamUnused(int i) const {
  int l = 0, e = 0;
  if (!ExpertOf(i, &l, &e) || static_cast<size_t>(l) >= ws_->moe.size() ||
      !ws_->moe[l].has_value()) {
    return false;
  }
  const std::vector<int>& load = ws_->moe[l]->routing().load;
  return !load.empty() && load[e] == 0;
}

absl::Status Gpt::AwaitExperts(int l, const MoeRouting& routing) {
  wanted_.clear();
  for (int e = 0; e < config_.experts; ++e) {
    if (routing.load[e] == 0) continue;
    const int first = first_param_[l] + kMoeRouter + 1 + kParamsPerExpert * e;
    for (int s = 0; s < kParamsPerExpert; ++s) wanted_.push_back(first + s);
  }
  if (params_wanted_) params_wanted_(wanted_);
  if (!param_wait_) return absl::OkStatus();
  for (int i : wanted_) STRATA_RETURN_IF_ERROR(param_wait_(i));
  return absl::OkStatus();
}

absl::Status Gpt::AwaitParams(int first, int count) {
  if (!param_wait_) return absl::OkStatus();
  for (int i = first; i < first + count; ++i) {
    STRATA_RETURN_IF_ERROR(param_wait_(i));
  }
  return absl::OkStatus();
}

void Gpt::GradReady(int param_index) {
  if (grad_ready_) grad_ready_(param_index);
}

double Gpt::flops_per_token() const {
  // A token runs through top_k of an MoE layer's experts: the others'
  // parameters cost it nothing.
  const double expert = 2.0 * config_.ExpertHidden() * config_.width +
                        config_.ExpertHidden() + config_.width;
  double idle = 0;
  for (int l = 0; l < config_.layers; ++l) {
    if (config_.IsMoeLayer(l))
      idle += (config_.experts - config_.top_k) * expert;
  }
  const double n = static_cast<double>(num_params_) - idle -
                   static_cast<double>(config_.context) * config_.width;
  return 6.0 * n + 12.0 * config_.layers * config_.width *
                       static_cast<double>(config_.context);
}

absl::Status ValidateBatch(const GptConfig& config, const int32_t* tokens,
                           const int32_t* targets, int B, int T) {
  if (B < 1 || T < 1 || T > config.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch shape (", B, ", ", T, ") needs B >= 1 and 1 <= T <= context (",
        config.context, ")"));
  }
  const int64_t n = int64_t{B} * T;
  for (const int32_t* ids : {tokens, targets}) {
    if (ids == nullptr) continue;
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= config.vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            ids == tokens ? "token " : "target ", ids[i], " at position ", i,
            " is outside [0, ", config.vocab, ")"));
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Forward and backward passes. N = B*T positions, C = width, NH = heads.

absl::Status Gpt::ForwardTrunk(const int32_t* tokens, int B, int T) {
  Workspace& ws = *ws_;
  const int64_t N = int64_t{B} * T, C = config_.width;
  STRATA_RETURN_IF_ERROR(AwaitParams(kWte, kFirstBlockParam));
  k::EncoderForward(ws.x.data(), tokens, param_data(kWte), param_data(kWpe), B,
                    T, config_.width);
  for (int l = 0; l < config_.layers; ++l) {
    // An MoE block's experts: once routed (AwaitExperts).
    const int count = config_.IsMoeLayer(l)
                          ? kMoeRouter + 1
                          : first_param_[l + 1] - first_param_[l];
    STRATA_RETURN_IF_ERROR(AwaitParams(first_param_[l], count));
    STRATA_RETURN_IF_ERROR(BlockForward(l, B, T));
  }
  const int lnf = first_param_[config_.layers];
  STRATA_RETURN_IF_ERROR(AwaitParams(lnf, 2));
  k::LayerNormForward(ws.lnf.data(), ws.lnf_mean.data(), ws.lnf_rstd.data(),
                      ws.x.data() + config_.layers * N * C, param_data(lnf),
                      param_data(lnf + 1), N, config_.width);
  return absl::OkStatus();
}

CpuBlockOps Gpt::LayerOps(int l, int B, int T) {
  Workspace& ws = *ws_;
  BlockActs& a = ws.blocks[config_.recompute ? 0 : l];
  CpuBlockOps ops;
  ops.d = {
      B, T, config_.width, config_.heads, config_.width, 4 * config_.width};
  for (int slot = 0; slot < kSlotsPerLayer; ++slot) {
    ops.weights[slot] = P(l, slot);
    ops.grads[slot] = G(l, slot);
  }
  ops.saved = {a.ln1.data(),      a.ln1_mean.data(), a.ln1_rstd.data(),
               a.qkv.data(),      a.att.data(),      a.atty.data(),
               a.res2.data(),     a.ln2.data(),      a.ln2_mean.data(),
               a.ln2_rstd.data(), a.fch.data(),      a.fch_gelu.data()};
  ops.datt = ws.datt.data();
  if (grad_ready_) {
    ops.on_grads_ready = [this, l](int slot) {
      GradReady(first_param_[l] + slot);
      GradReady(first_param_[l] + slot + 1);
    };
  }
  if (ws.moe[l].has_value()) AddMoeOps(l, ops);
  return ops;
}

void Gpt::AddMoeOps(int l, CpuBlockOps& ops) {
  for (int slot = kMoeRouter; slot < kSlotsPerLayer; ++slot) {
    ops.weights[slot] = nullptr;
    ops.grads[slot] = nullptr;
  }
  ops.moe = &*ws_->moe[l];
  ops.moe_w.router = P(l, kMoeRouter);
  ops.moe_g.router = G(l, kMoeRouter);
  for (int e = 0; e < config_.experts; ++e) {
    const int s = kMoeRouter + 1 + kParamsPerExpert * e;
    ops.moe_w.fc_w.push_back(P(l, s));
    ops.moe_w.fc_b.push_back(P(l, s + 1));
    ops.moe_w.proj_w.push_back(P(l, s + 2));
    ops.moe_w.proj_b.push_back(P(l, s + 3));
    ops.moe_g.fc_w.push_back(G(l, s));
    ops.moe_g.fc_b.push_back(G(l, s + 1));
    ops.moe_g.proj_w.push_back(G(l, s + 2));
    ops.moe_g.proj_b.push_back(G(l, s + 3));
  }
  if (grad_ready_) {
    ops.on_moe_grads_ready = [this, l] {
      for (int i = first_param_[l] + kMoeRouter; i < first_param_[l + 1]; ++i) {
        GradReady(i);
      }
    };
  }
}

const MoeRouting* Gpt::moe_routing(int layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= ws_->moe.size() ||
      !ws_->moe[layer].has_value()) {
    return nullptr;
  }
  return &ws_->moe[layer]->routing();
}

MoeStats Gpt::moe_stats() const {
  MoeStats s;
  for (const std::optional<MoeLayer>& m : ws_->moe) {
    if (!m.has_value()) continue;
    const MoeRouting& r = m->routing();
    s.aux_loss += r.aux_loss;
    s.dropped += r.dropped;
    s.assignments += int64_t{m->dims().N} * m->dims().top_k;
    s.load.push_back(r.load);
  }
  return s;
}

// x[l+1] = block(x[l]), keeping what backward needs in the layer's
// BlockActs.
absl::Status Gpt::BlockForward(int l, int B, int T, bool recompute) {
  CpuBlockOps ops = LayerOps(l, B, T);
  const int64_t NC = int64_t{B} * T * config_.width;
  const float* x = ws_->x.data() + l * NC;
  float* y = ws_->x.data() + (l + 1) * NC;
  if (ops.moe == nullptr) return block::Forward(ops, x, y);
  if (!recompute && (param_wait_ || params_wanted_)) {
    ops.on_routed = [this, l](const MoeRouting& r) {
      return AwaitExperts(l, r);
    };
  }
  return block::MoeForward(ops, x, y);
}

// Adds the layer's gradients and turns ws.dres into dL/dx[l].
absl::Status Gpt::BlockBackward(int l, int B, int T) {
  CpuBlockOps ops = LayerOps(l, B, T);
  Workspace& ws = *ws_;
  const int64_t NC = int64_t{B} * T * config_.width;
  block::BlockGrads<float> g;
  g.dres = ws.dres.data();
  g.dln = ws.dln.data();
  g.dfch = ws.dfch.data();
  g.dqkv = ws.dqkv.data();
  g.datty = ws.dln.data();
  const float* x = ws.x.data() + l * NC;
  return ops.moe != nullptr ? block::MoeBackward(ops, x, g)
                            : block::Backward(ops, x, g);
}

float Gpt::HeadLoss(const int32_t* targets, int N, bool backward) {
  Workspace& ws = *ws_;
  const int C = config_.width, V = config_.vocab;
  const float* wte = param_data(kWte);
  const int64_t rows = Workspace::HeadRows(config_, N);
  const float dloss = 1.0f / (loss_tokens_ > 0 ? loss_tokens_ : N);
  double total = 0;
  for (int64_t n0 = 0; n0 < N; n0 += rows) {
    const int nc = static_cast<int>(std::min<int64_t>(rows, N - n0));
    const float* lnf = ws.lnf.data() + n0 * C;
    // logits (nc,V) = lnf (nc,C) @ wte^T: the tied LM head.
    k::MatmulForward(ws.logits.data(), lnf, wte, nullptr, nc, C, V);
    if (!backward) {
      k::CrossEntropyForward(ws.losses.data(), ws.logits.data(), targets + n0,
                             nc, V);
      for (int i = 0; i < nc; ++i) total += ws.losses[i];
      continue;
    }
    total += k::SoftmaxCrossEntropyFused(ws.logits.data(), targets + n0, dloss,
                                         nullptr, nc, V);
    k::MatmulBackward(ws.dln.data() + n0 * C, grad_data(kWte), nullptr,
                      ws.logits.data(), lnf, wte, nc, C, V);
  }
  return static_cast<float>(total / N);
}

absl::StatusOr<float> Gpt::ForwardBackward(const int32_t* tokens,
                                           const int32_t* targets, int B, int T,
                                           bool accumulate) {
  if (absl::Status s = ValidateBatch(config_, tokens, targets, B, T); !s.ok())
    return s;
  Workspace& ws = *ws_;
  ws.Resize(config_, B, T, expert_group_);
  if (!accumulate) {
    // On every thread: one thread's stores leave the memory bus half idle.
    float* g = grads_;
    ParallelFor(padded_floats_, int64_t{1} << 18,
                [g](int, int64_t begin, int64_t end) {
                  std::fill(g + begin, g + end, 0.0f);
                });
  }
  const int N = B * T, C = config_.width, L = config_.layers;
  STRATA_RETURN_IF_ERROR(ForwardTrunk(tokens, B, T));
  const float loss = HeadLoss(targets, N, /*backward=*/true);

  const int lnf = first_param_[L];
  std::fill(ws.dres.begin(), ws.dres.begin() + int64_t{N} * C, 0.0f);
  k::LayerNormBackward(ws.dres.data(), grad_data(lnf), grad_data(lnf + 1),
                       ws.dln.data(), ws.x.data() + int64_t{L} * N * C,
                       param_data(lnf), ws.lnf_mean.data(), ws.lnf_rstd.data(),
                       N, C);
  GradReady(lnf);
  GradReady(lnf + 1);
  for (int l = L - 1; l >= 0; --l) {
    if (config_.recompute) {
      STRATA_RETURN_IF_ERROR(BlockForward(l, B, T, /*recompute=*/true));
    }
    STRATA_RETURN_IF_ERROR(BlockBackward(l, B, T));
  }
  k::EncoderBackward(grad_data(kWte), grad_data(kWpe), ws.dres.data(), tokens,
                     B, T, C);
  GradReady(kWpe);
  GradReady(kWte);
  return loss;
}

absl::StatusOr<float> Gpt::Loss(const int32_t* tokens, const int32_t* targets,
                                int B, int T) {
  if (absl::Status s = ValidateBatch(config_, tokens, targets, B, T); !s.ok())
    return s;
  ws_->Resize(config_, B, T, expert_group_);
  STRATA_RETURN_IF_ERROR(ForwardTrunk(tokens, B, T));
  return HeadLoss(targets, B * T, /*backward=*/false);
}

absl::StatusOr<std::vector<float>> Gpt::Logits(const int32_t* tokens, int B,
                                               int T) {
  // The tokens are their own targets: only their range is checked.
  if (absl::Status s = ValidateBatch(config_, tokens, tokens, B, T); !s.ok())
    return s;
  ws_->Resize(config_, B, T, expert_group_);
  STRATA_RETURN_IF_ERROR(ForwardTrunk(tokens, B, T));
  const int C = config_.width, V = config_.vocab;
  std::vector<float> logits(static_cast<size_t>(B) * T * V);
  k::MatmulForward(logits.data(), ws_->lnf.data(), param_data(kWte), nullptr,
                   B * T, C, V);
  return logits;
}

absl::StatusOr<std::vector<int32_t>> Gpt::Generate(std::vector<int32_t> prompt,
                                                   int new_tokens,
                                                   float temperature,
                                                   uint64_t seed,
                                                   int sample_vocab) {
  if (prompt.empty() || new_tokens < 0) {
    return absl::InvalidArgumentError(
        "Generate needs a non-empty prompt and new_tokens >= 0");
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= config_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("bad prompt token ", t));
    }
  }
  std::mt19937_64 rng(seed);
  const int C = config_.width, V = config_.vocab;
  // Sampled among the first S ids (a padded vocabulary's rows past the
  // tokenizer's are no tokens).
  const int S = sample_vocab > 0 ? std::min(sample_vocab, V) : V;
  std::vector<double> probs(S);
  for (int i = 0; i < new_tokens; ++i) {
    const int T = std::min<int>(prompt.size(), config_.context);
    const int32_t* window = prompt.data() + prompt.size() - T;
    ws_->Resize(config_, 1, T, expert_group_);
    STRATA_RETURN_IF_ERROR(ForwardTrunk(window, 1, T));
    float* logits = ws_->logits.data();
    k::MatmulForward(logits, ws_->lnf.data() + int64_t{T - 1} * C,
                     param_data(kWte), nullptr, 1, C, V);
    if (temperature <= 0) {
      prompt.push_back(
          static_cast<int32_t>(std::max_element(logits, logits + S) - logits));
      continue;
    }
    const float m = *std::max_element(logits, logits + S);
    for (int v = 0; v < S; ++v) {
      probs[v] = std::exp((logits[v] - m) / temperature);
    }
    std::discrete_distribution<int32_t> dist(probs.begin(), probs.end());
    prompt.push_back(dist(rng));
  }
  return prompt;
}

}  // namespace strata

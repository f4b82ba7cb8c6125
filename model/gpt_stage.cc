#include "model/gpt_stage.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <optional>
#include <vector>

#include "common/check.h"
#include "common/status.h"
#include "kernels/layernorm.h"
#include "model/cpu_block_ops.h"
#include "model/gpt.h"
#include "model/transformer_block.h"

namespace strata {
namespace {

namespace k = ::strata::kernels;

using namespace ::strata::gpt_layout;  // NOLINT: the shared parameter layout

// Rows [s.begin, s.begin + s.size) of a (rows, cols) matrix, zero past its
// end, into *out. Shards are cut every step into the same vectors, so a
// large one (the vocabulary's) is not allocated and faulted in again.
void RowShardInto(const float* m, int cols, DimShard s,
                  std::vector<float>* out) {
  out->assign(size_t(s.size) * cols, 0.0f);
  std::copy_n(m + size_t(s.begin) * cols, size_t(s.valid) * cols, out->begin());
}

// The inverses, adding a shard's real entries back into the whole matrix.
void AddRows(float* m, const std::vector<float>& shard, int cols, DimShard s) {
  float* to = m + size_t(s.begin) * cols;
  for (size_t i = 0; i < size_t(s.valid) * cols; ++i) to[i] += shard[i];
}

void AddColumns(float* m, const std::vector<float>& shard, int rows, int cols,
                DimShard s) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < s.valid; ++c) {
      m[size_t(r) * cols + s.begin + c] += shard[size_t(r) * s.size + c];
    }
  }
}

// ShardQkvRows's inverse: `rows` are one part's rows (Q's, K's or V's).
void AddQkvRows(float* m, const std::vector<float>& shard, int C, int cols,
                DimShard rows) {
  for (int part = 0; part < 3; ++part) {
    float* to = m + (size_t(part) * C + rows.begin) * cols;
    const float* from = shard.data() + size_t(part) * rows.size * cols;
    for (size_t i = 0; i < size_t(rows.valid) * cols; ++i) to[i] += from[i];
  }
}

void Grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// The parameters every rank of a tensor group holds whole, and those it
// splits; an MoE block has the first five of each (its MLP is the router
// and the experts, whole on every rank).
constexpr int kWholeSlots[] = {kLn1W, kLn1B, kAttnProjB,
                               kLn2W, kLn2B, kFcProjB};
constexpr int kSplitSlots[] = {kQkvW, kQkvB, kAttnProjW, kFcW, kFcB, kFcProjW};
constexpr int kMoeWholeSlots = 5, kMoeSplitSlots = 3;
static_assert(kWholeSlots[kMoeWholeSlots - 1] == kLn2B &&
                  kSplitSlots[kMoeSplitSlots - 1] == kAttnProjW,
              "an MoE block's slots are the prefixes up to LN2 and the "
              "attention projection");

}  // namespace

StagePlace PlaceStage(int total_layers, int stages, int stage) {
  StagePlace p;
  p.stage = stage;
  p.stages = stages;
  const int base = total_layers / stages, extra = total_layers % stages;
  p.layers = base + (stage < extra ? 1 : 0);
  p.first_layer = stage * base + std::min(stage, extra);
  return p;
}

// One block's activations for a micro-batch; N = rows * T, Cl and Hl this
// rank's attention and hidden widths.
struct GptStage::Acts {
  std::vector<float> ln1, ln1_mean, ln1_rstd;  // (N,C), (N), (N)
  std::vector<float> qkv;                      // (N,3Cl)
  std::vector<float> att;                      // (rows,heads,T,T)
  std::vector<float> atty;                     // (N,Cl)
  std::vector<float> res2;                     // (N,C)
  std::vector<float> ln2, ln2_mean, ln2_rstd;  // (N,C), (N), (N)
  std::vector<float> fch, fch_gelu;            // (N,Hl)
};

// A micro-batch in flight.
struct GptStage::Slot {
  std::vector<float> x;    // (layers+1,N,C): block inputs, then the output
  std::vector<Acts> acts;  // one per block, or one with recompute
  std::vector<float> lnf, lnf_mean, lnf_rstd, dlnf;  // last stage
  // Per stage block, an MoE block's layer (its routing and activations).
  std::vector<std::optional<MoeLayer>> moe;
  // dL/d(aux) of this micro-batch's MoE layers: its share of the batch's
  // tokens, as the trainer weights micro-batches (--micro_batches).
  float daux = 1.0f;
};

GptStage::GptStage(const GptConfig& config, StagePlace place, Communicator* tp)
    : config_(config),
      place_(place),
      tp_(tp),
      hs_(config.width / config.heads),
      heads_(SplitDim(config.heads, place.tp_size, place.tp_rank)),
      head_cols_{heads_.begin * hs_, heads_.size * hs_, heads_.valid * hs_},
      hidden_(SplitDim(4 * config.width, place.tp_size, place.tp_rank)),
      vocab_(SplitDim(config.vocab, place.tp_size, place.tp_rank)),
      blocks_(place.layers),
      moe_(place.layers) {
  first_param_.push_back(kFirstBlockParam);
  for (int l = 0; l < config.layers; ++l) {
    first_param_.push_back(first_param_.back() +
                           ParamsInLayer(config.IsMoeLayer(l), config.experts));
  }
}

int GptStage::FirstParam(int j) const {
  return first_param_[place_.first_layer + j];
}

GptStage::~GptStage() = default;

void GptStage::Param::UseWhole(const float* weights, float* grad, size_t n,
                               bool direct) {
  w = weights;
  add_back = false;
  if (direct) {
    g = grad;
    return;
  }
  g_own.assign(n, 0.0f);
  g = g_own.data();
}

void GptStage::Param::UseShard() {
  w = w_cut.data();
  g_own.assign(w_cut.size(), 0.0f);
  g = g_own.data();
  add_back = true;
}

void GptStage::LoadWeights(Model& host) {
  const int C = config_.width, H = 4 * C;
  const bool split = place_.tp_size > 1, lead = place_.tp_rank == 0;
  auto use_whole = [&](Param& p, int i, bool direct) {
    p.UseWhole(host.param_data(i), host.grad_data(i),
               host.params()[i].spec.numel(), direct);
  };
  for (int j = 0; j < place_.layers; ++j) {
    const int base = FirstParam(j);
    Block& b = blocks_[j];
    const bool moe = IsMoe(j);
    const int whole = moe ? kMoeWholeSlots : std::size(kWholeSlots);
    const int splits = moe ? kMoeSplitSlots : std::size(kSplitSlots);
    for (int k = 0; k < whole; ++k) {
      use_whole(b[kWholeSlots[k]], base + kWholeSlots[k], lead);
    }
    if (moe) LoadMoe(host, j, lead);
    if (!split) {
      for (int k = 0; k < splits; ++k) {
        use_whole(b[kSplitSlots[k]], base + kSplitSlots[k], true);
      }
      continue;
    }
    auto p = [&](int slot) { return host.param_data(base + slot); };
    ShardQkvRowsInto(p(kQkvW), C, hs_, C, heads_, &b[kQkvW].w_cut);
    ShardQkvRowsInto(p(kQkvB), C, hs_, 1, heads_, &b[kQkvB].w_cut);
    ShardColumnsInto(p(kAttnProjW), C, C, head_cols_, &b[kAttnProjW].w_cut);
    if (!moe) {
      RowShardInto(p(kFcW), C, hidden_, &b[kFcW].w_cut);
      RowShardInto(p(kFcB), 1, hidden_, &b[kFcB].w_cut);
      ShardColumnsInto(p(kFcProjW), C, H, hidden_, &b[kFcProjW].w_cut);
    }
    for (int k = 0; k < splits; ++k) b[kSplitSlots[k]].UseShard();
  }
  // wte: the weights on the first and last stages; its gradient from the
  // head straight into the host's where this rank is its only writer
  // during the step (no tensor split), else into a shard added back. The
  // embedding's share is kept as rows and added after the step (it touches
  // only the batch's tokens).
  if (first() || last()) {
    wte_.add_back = false;
    wte_.g = nullptr;
    if (split) {
      RowShardInto(host.param_data(kWte), C, vocab_, &wte_.w_cut);
      wte_.w = wte_.w_cut.data();
    } else {
      wte_.w = host.param_data(kWte);
    }
    if (last() && split) {
      wte_.g_own.assign(wte_.w_cut.size(), 0.0f);
      wte_.g = wte_.g_own.data();
      wte_.add_back = true;
    } else if (last()) {
      wte_.g = host.grad_data(kWte);
    }
  }
  embed_tokens_.clear();
  embed_grads_.clear();
  if (first()) use_whole(wpe_, kWpe, lead);
  if (last()) {
    const int lnf = first_param_[config_.layers];
    use_whole(lnf_w_, lnf, lead);
    use_whole(lnf_b_, lnf + 1, lead);
  }
}

void GptStage::AddGrads(Model& host) const {
  const int C = config_.width, H = 4 * C;
  for (int j = 0; j < place_.layers; ++j) {
    const Block& b = blocks_[j];
    if (!b[kQkvW].add_back) continue;  // the split slots go together
    const int base = FirstParam(j);
    auto g = [&](int slot) { return host.grad_data(base + slot); };
    AddQkvRows(g(kQkvW), b[kQkvW].g_own, C, C, head_cols_);
    AddQkvRows(g(kQkvB), b[kQkvB].g_own, C, 1, head_cols_);
    AddColumns(g(kAttnProjW), b[kAttnProjW].g_own, C, C, head_cols_);
    if (IsMoe(j)) continue;  // the router and experts are whole
    AddRows(g(kFcW), b[kFcW].g_own, C, hidden_);
    AddRows(g(kFcB), b[kFcB].g_own, 1, hidden_);
    AddColumns(g(kFcProjW), b[kFcProjW].g_own, C, H, hidden_);
  }
  float* dwte = host.grad_data(kWte);
  if ((first() || last()) && wte_.add_back)
    AddRows(dwte, wte_.g_own, C, vocab_);
  for (size_t n = 0; n < embed_tokens_.size(); ++n) {
    float* to = dwte + size_t(embed_tokens_[n]) * C;
    const float* from = embed_grads_.data() + n * C;
    for (int c = 0; c < C; ++c) to[c] += from[c];
  }
}

void GptStage::Prepare(int rows, int T, int slots) {
  rows_ = rows;
  T_ = T;
  const size_t N = size_t(rows) * T, C = config_.width;
  const size_t Cl = head_cols_.size, Hl = hidden_.size;
  const size_t att = size_t(rows) * heads_.size * T * T;
  if (slots_.size() < size_t(slots)) slots_.resize(slots);
  for (Slot& s : slots_) {
    Grow(s.x, (place_.layers + 1) * N * C);
    s.acts.resize(config_.recompute ? 1 : place_.layers);
    for (Acts& a : s.acts) {
      for (auto* v : {&a.ln1, &a.res2, &a.ln2}) Grow(*v, N * C);
      for (auto* v : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
        Grow(*v, N);
      }
      Grow(a.qkv, N * 3 * Cl);
      Grow(a.att, att);
      Grow(a.atty, N * Cl);
      Grow(a.fch, N * Hl);
      Grow(a.fch_gelu, N * Hl);
    }
    if (last()) {
      Grow(s.lnf, N * C);
      Grow(s.dlnf, N * C);
      Grow(s.lnf_mean, N);
      Grow(s.lnf_rstd, N);
    }
  }
  for (auto* v : {&dres_, &dln_, &tmp_}) Grow(*v, N * C);
  Grow(dfch_, N * Hl);
  Grow(dqkv_, N * 3 * Cl);
  Grow(datt_, att);
  Grow(datty_, N * Cl);
  if (last()) {
    const size_t head_rows =
        std::clamp<size_t>(kHeadChunkFloats / vocab_.size, 1, N);
    Grow(logits_, head_rows * vocab_.size);
  }
}

size_t GptStage::boundary_elems() const {
  return size_t(rows_) * T_ * config_.width;
}

GptStage::Acts& GptStage::ActsOf(Slot& s, int j) {
  return s.acts[config_.recompute ? 0 : j];
}

MoeLayer& GptStage::MoeOf(Slot& s, int j, int B) {
  if (s.moe.size() < blocks_.size()) s.moe.resize(blocks_.size());
  std::optional<MoeLayer>& layer = s.moe[j];
  if (!layer.has_value() || layer->dims().N != B * T_) {
    absl::StatusOr<MoeLayer> made =
        MoeLayer::Create(MoeLayerDims(config_, B * T_));
    // GptConfig::Validate checked the settings.
    STRATA_CHECK(made.ok());
    layer = std::move(*made);
  }
  return *layer;
}

absl::StatusOr<std::vector<float>> GptStage::Forward(
    int slot, const int32_t* tokens, const int32_t* targets, int rows,
    float dloss, std::vector<float> input, double* loss_sum) {
  Slot& s = slots_[slot];
  const int N = rows * T_, C = config_.width;
  s.daux = dloss * N;
  if (first()) {
    STRATA_RETURN_IF_ERROR(Embed(s, tokens, N));
  } else {
    std::copy_n(input.begin(), size_t(N) * C, s.x.begin());
  }
  for (int j = 0; j < place_.layers; ++j) {
    STRATA_RETURN_IF_ERROR(BlockForward(s, j, rows));
  }
  const float* out = s.x.data() + size_t(place_.layers) * N * C;
  if (last()) {
    k::LayerNormForward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), out,
                        lnf_w_.w, lnf_b_.w, N, C);
    STRATA_RETURN_IF_ERROR(Head(s, targets, N, dloss, loss_sum));
    return std::vector<float>();
  }
  std::vector<float> output(boundary_elems(), 0.0f);
  std::copy_n(out, size_t(N) * C, output.begin());
  return output;
}

absl::StatusOr<std::vector<float>> GptStage::Backward(
    int slot, const int32_t* tokens, int rows, std::vector<float> grad_output) {
  Slot& s = slots_[slot];
  const int N = rows * T_, C = config_.width;
  float* dres = dres_.data();
  if (last()) {
    std::fill_n(dres, size_t(N) * C, 0.0f);
    k::LayerNormBackward(dres, lnf_w_.g, lnf_b_.g, s.dlnf.data(),
                         s.x.data() + size_t(place_.layers) * N * C, lnf_w_.w,
                         s.lnf_mean.data(), s.lnf_rstd.data(), N, C);
  } else {
    std::copy_n(grad_output.begin(), size_t(N) * C, dres);
  }
  for (int j = place_.layers - 1; j >= 0; --j) {
    if (config_.recompute) {
      STRATA_RETURN_IF_ERROR(BlockForward(s, j, rows, /*recompute=*/true));
    }
    STRATA_RETURN_IF_ERROR(BlockBackward(s, j, rows));
  }
  if (!first()) {
    std::vector<float> grad_input(boundary_elems(), 0.0f);
    std::copy_n(dres, size_t(N) * C, grad_input.begin());
    return grad_input;
  }
  // The embedding's backward: the rows of this rank's vocabulary's tokens
  // (added to wte's gradient after the step), and the position table (the
  // same on every rank).
  for (int n = 0; n < N; ++n) {
    const float* d = dres + size_t(n) * C;
    const int row = tokens[n] - vocab_.begin;
    if (row >= 0 && row < vocab_.valid) {
      embed_tokens_.push_back(tokens[n]);
      embed_grads_.insert(embed_grads_.end(), d, d + C);
    }
    float* pos = wpe_.g + size_t(n % T_) * C;
    for (int c = 0; c < C; ++c) pos[c] += d[c];
  }
  return std::vector<float>();
}

// x = wte[token] + wpe[position]: each rank looks up the tokens in its
// vocabulary rows (zero for the others), one all-reduce gathers them.
absl::Status GptStage::Embed(Slot& s, const int32_t* tokens, int N) {
  const int C = config_.width;
  float* x = s.x.data();
  std::fill_n(x, size_t(N) * C, 0.0f);
  for (int n = 0; n < N; ++n) {
    const int row = tokens[n] - vocab_.begin;
    if (row >= 0 && row < vocab_.valid) {
      std::copy_n(wte_.w + size_t(row) * C, C, x + size_t(n) * C);
    }
  }
  if (place_.tp_size > 1) {
    STRATA_RETURN_IF_ERROR(
        tp_->AllReduce(absl::MakeSpan(x, size_t(N) * C), ReduceOp::kSum));
  }
  for (int n = 0; n < N; ++n) {
    const float* pos = wpe_.w + size_t(n % T_) * C;
    for (int c = 0; c < C; ++c) x[size_t(n) * C + c] += pos[c];
  }
  return absl::OkStatus();
}

// The tied LM head over this rank's vocabulary rows and the parallel
// cross-entropy, over chunks of positions; leaves d(loss)/d(lnf output) in
// s.dlnf and adds the head's share of wte's gradient.
absl::Status GptStage::Head(Slot& s, const int32_t* targets, int N, float dloss,
                            double* loss_sum) {
  const int C = config_.width, Vs = vocab_.size;
  const int64_t rows = std::clamp<int64_t>(kHeadChunkFloats / Vs, 1, N);
  for (int64_t n0 = 0; n0 < N; n0 += rows) {
    const int nc = static_cast<int>(std::min<int64_t>(rows, N - n0));
    const float* in = s.lnf.data() + n0 * C;
    ColumnParallelForward(logits_.data(), in, wte_.w, nullptr, nc, C, Vs);
    STRATA_ASSIGN_OR_RETURN(
        float loss, ParallelCrossEntropy(*tp_, logits_.data(), targets + n0, nc,
                                         config_.vocab, vocab_, dloss));
    *loss_sum += loss;
    STRATA_RETURN_IF_ERROR(
        ColumnParallelBackward(*tp_, s.dlnf.data() + n0 * C, wte_.g, nullptr,
                               logits_.data(), in, wte_.w, nc, C, Vs));
  }
  return absl::OkStatus();
}

// x[j+1] = x[j] + attn(ln1(x[j])) + mlp(ln2(...)), this rank's heads and
// hidden features; two all-reduces (the row-parallel outputs). An MoE
// block's MLP is its whole layer on every rank: one all-reduce.
absl::Status GptStage::BlockForward(Slot& s, int j, int B, bool recompute) {
  CpuBlockOps ops = LayerOps(s, j, B);
  const size_t NC = size_t(B) * T_ * config_.width;
  float* x = s.x.data() + j * NC;
  if (ops.moe == nullptr) return block::Forward(ops, x, x + NC);
  STRATA_RETURN_IF_ERROR(block::MoeForward(ops, x, x + NC));
  if (recompute) return absl::OkStatus();  // counted the first time
  MoeParams& m = moe_[j];
  const MoeRouting& r = ops.moe->routing();
  for (int e = 0; e < config_.experts; ++e) m.load[e] += r.load[e];
  m.dropped += r.dropped;
  m.assignments += int64_t{B} * T_ * config_.top_k;
  m.aux_weighted += r.aux_loss * B * T_;
  return absl::OkStatus();
}

// On entry dres_ is d(loss)/d(x[j+1]); on exit d(loss)/d(x[j]). Two
// all-reduces (the column-parallel input gradients); one for an MoE block,
// whose layer's input gradient is whole on every rank.
absl::Status GptStage::BlockBackward(Slot& s, int j, int B) {
  CpuBlockOps ops = LayerOps(s, j, B);
  const size_t NC = size_t(B) * T_ * config_.width;
  block::BlockGrads<float> g;
  g.dres = dres_.data();
  g.dln = dln_.data();
  g.dfch = dfch_.data();
  g.dqkv = dqkv_.data();
  g.datty = datty_.data();
  const float* x = s.x.data() + j * NC;
  return ops.moe != nullptr ? block::MoeBackward(ops, x, g)
                            : block::Backward(ops, x, g);
}

CpuBlockOps GptStage::LayerOps(Slot& s, int j, int B) {
  Acts& a = ActsOf(s, j);
  CpuBlockOps ops;
  ops.d = {B, T_, config_.width, heads_.size, head_cols_.size, hidden_.size};
  for (int slot = 0; slot < kSlotsPerLayer; ++slot) {
    ops.weights[slot] = blocks_[j][slot].w;
    ops.grads[slot] = blocks_[j][slot].g;
  }
  ops.saved = {a.ln1.data(),      a.ln1_mean.data(), a.ln1_rstd.data(),
               a.qkv.data(),      a.att.data(),      a.atty.data(),
               a.res2.data(),     a.ln2.data(),      a.ln2_mean.data(),
               a.ln2_rstd.data(), a.fch.data(),      a.fch_gelu.data()};
  ops.datt = datt_.data();
  ops.tp = tp_;
  ops.partial = tmp_.data();
  if (IsMoe(j)) {
    for (int slot = kMoeRouter; slot < kSlotsPerLayer; ++slot) {
      ops.weights[slot] = nullptr;
      ops.grads[slot] = nullptr;
    }
    ops.moe = &MoeOf(s, j, B);
    ops.moe_w = moe_[j].w;
    ops.moe_g = moe_[j].g;
    ops.moe_daux = s.daux;
  }
  return ops;
}

}  // namespace strata

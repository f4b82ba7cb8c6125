// One rank of a ParallelGpt (model/gpt_parallel.h): the blocks of one
// pipeline stage, holding this rank's tensor-parallel share of each.
//
// Megatron 1D over the stage's tensor-parallel group (model_parallel/
// tensor_parallel.h): QKV column-parallel by attention heads, attention on
// the rank's heads, the attention output projection row-parallel; the MLP's
// first layer column-parallel by hidden features, its second row-parallel;
// the token embedding and the tied LM head split over the vocabulary, with
// the parallel cross-entropy. LayerNorms, the position embedding and the
// row-parallel biases are whole on every rank (each computes the same
// gradient for them; rank 0 of the group reports it), as are an MoE
// block's router and experts: each rank runs the whole MoE layer
// (model/moe_layer.h) on the same tokens. Every dimension
// splits by SplitDim's rule, so head counts, widths and vocabularies that
// the rank count does not divide are exact (zero padding).
//
// Stage 0 embeds the tokens; the last stage runs the final LayerNorm, the
// LM head and the loss, and starts backward from it (its forward computes
// the head's backward too, as Gpt's does, so the logits are never all
// held). Activations live in `slots`, one per micro-batch in flight.
#ifndef STRATA_MODEL_GPT_STAGE_H_
#define STRATA_MODEL_GPT_STAGE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/communicator.h"
#include "model/gpt_layout.h"
#include "model/model.h"
#include "model/moe_layer.h"
#include "model_parallel/tensor_parallel.h"

namespace strata {

struct CpuBlockOps;

// Where a rank sits: its pipeline stage and its place in that stage's
// tensor-parallel group.
struct StagePlace {
  int stage = 0, stages = 1;
  int tp_rank = 0, tp_size = 1;
  int first_layer = 0, layers = 0;  // the stage's blocks
};

// Blocks [first_layer, first_layer + layers) of `stages` stages: layers
// split as evenly as can be, earlier stages taking the extra ones.
// REQUIRES: 1 <= stages <= total_layers, 0 <= stage < stages.
StagePlace PlaceStage(int total_layers, int stages, int stage);

class GptStage {
 public:
  // `tp` is the stage's tensor-parallel group (rank place.tp_rank of
  // place.tp_size); it must outlive the stage's calls.
  GptStage(const GptConfig& config, StagePlace place, Communicator* tp);
  ~GptStage();
  GptStage(const GptStage&) = delete;
  GptStage& operator=(const GptStage&) = delete;

  // Takes this rank's weights from `host` (a model in Gpt's parameter
  // layout, model/gpt_layout.h) for the next step: whole tensors are used
  // in place, shards are cut into the rank's own buffers. Gradients go
  // straight into host.grad_data where this rank is their only writer (a
  // whole tensor: tensor rank 0 for those every rank holds, the LM head's
  // for wte), else into the rank's own zeroed buffers; the embedding's
  // share of wte's is kept as rows.
  void LoadWeights(Model& host);
  // After the step, with no rank running: adds the gradients this rank
  // kept in its own buffers into host.grad_data (a shard's real entries,
  // never padding; the embedding's rows of wte's). Those of whole tensors
  // that other ranks report are dropped.
  void AddGrads(Model& host) const;

  // Sizes the activations for `slots` micro-batches in flight of at most
  // `rows` sequences of T tokens. Buffers only grow.
  void Prepare(int rows, int T, int slots);

  // Floats a stage boundary carries per micro-batch: rows * T * width.
  size_t boundary_elems() const;

  // Forward of a micro-batch of `rows` (<= Prepare's) sequences into
  // `slot`. Stage 0 reads `tokens`; later stages `input` (the previous
  // stage's output). Returns this stage's output, boundary_elems() floats
  // (rows past `rows` are zero). The last stage also runs the head's
  // forward and backward with d(loss)/d(logit) scaled by `dloss`, adds the
  // micro-batch's summed loss to *loss_sum, and returns nothing.
  // Errors: the communicator's.
  absl::StatusOr<std::vector<float>> Forward(int slot, const int32_t* tokens,
                                             const int32_t* targets, int rows,
                                             float dloss,
                                             std::vector<float> input,
                                             double* loss_sum);
  // Backward of the micro-batch in `slot`: `grad_output` is d(loss)/d(this
  // stage's output) (empty on the last stage). Adds into this rank's
  // gradients and returns d(loss)/d(input) (nothing on stage 0).
  absl::StatusOr<std::vector<float>> Backward(int slot, const int32_t* tokens,
                                              int rows,
                                              std::vector<float> grad_output);

  // What this stage's MoE blocks routed since LoadWeights, over its
  // micro-batches: loads and drops summed, the aux loss the micro-batches'
  // mean weighted by their tokens; a block a layer, in order.
  MoeStats moe_stats() const;

 private:
  // One parameter as this rank uses it.
  struct Param {
    const float* w = nullptr;  // the host's tensor, or w_cut
    float* g = nullptr;        // the host's gradient, or g_own
    std::vector<float> w_cut;  // a shard cut from the host's tensor
    std::vector<float> g_own;  // a gradient this rank keeps
    bool add_back = false;     // g_own goes into the host's gradient
    // Uses the host's tensor w (n floats) whole; `direct`: writes its
    // gradient g, else a zeroed g_own.
    void UseWhole(const float* w, float* g, size_t n, bool direct);
    // Computes on the cut shard (in w_cut) into g_own, added back later.
    void UseShard();
  };
  using Block = std::array<Param, gpt_layout::kSlotsPerLayer>;
  // An MoE block's router and experts' tensors (whole on every rank:
  // each rank of a tensor group runs the layer on the same tokens), in
  // the layout's order, and its routing so far this step.
  struct MoeParams {
    std::vector<Param> params;  // router, then 4 per expert
    MoeWeights w;
    MoeGrads g;
    std::vector<int> load;
    int64_t dropped = 0, assignments = 0;
    double aux_weighted = 0;  // sum over micro-batches of aux * tokens
  };
  struct Acts;
  struct Slot;

  bool first() const { return place_.stage == 0; }
  bool last() const { return place_.stage == place_.stages - 1; }
  absl::Status Embed(Slot& s, const int32_t* tokens, int N);
  absl::Status Head(Slot& s, const int32_t* targets, int N, float dloss,
                    double* loss_sum);
  // The CPU block backend (model/cpu_block_ops.h) for stage block j of
  // the micro-batch in `s`, over the tensor-parallel group.
  CpuBlockOps LayerOps(Slot& s, int j, int B);
  absl::Status BlockForward(Slot& s, int j, int B, bool recompute = false);
  absl::Status BlockBackward(Slot& s, int j, int B);
  Acts& ActsOf(Slot& s, int j);
  // The micro-batch's MoE layer of stage block j (made for its tokens).
  MoeLayer& MoeOf(Slot& s, int j, int B);
  // Stage block j's router and experts from `host`, whole (gradients
  // straight into the host's on the tensor group's rank 0, `lead`); clears
  // its routing counts.
  void LoadMoe(Model& host, int j, bool lead);
  // Stage block j's first parameter in the host's layout.
  int FirstParam(int j) const;
  bool IsMoe(int j) const { return config_.IsMoeLayer(place_.first_layer + j); }

  const GptConfig config_;
  const StagePlace place_;
  Communicator* const tp_;
  const int hs_;              // head size
  const DimShard heads_;      // this rank's heads
  const DimShard head_cols_;  // their columns of the attention output
  const DimShard hidden_;     // this rank's MLP hidden features
  const DimShard vocab_;      // this rank's vocabulary rows
  int T_ = 0, rows_ = 0;

  std::vector<Block> blocks_;     // per stage block, by gpt_layout::Slot
  std::vector<MoeParams> moe_;    // per stage block (empty for a dense one)
  std::vector<int> first_param_;  // per block of the model, then lnf's
  Param wte_;                     // vocabulary rows (first and last stage)
  Param wpe_;                     // stage 0
  // Stage 0: the embedding's gradient rows and their tokens, this step.
  std::vector<int32_t> embed_tokens_;
  std::vector<float> embed_grads_;
  Param lnf_w_, lnf_b_;  // last stage
  std::vector<Slot> slots_;
  // Scratch shared by the micro-batches.
  std::vector<float> dres_, dln_, dfch_, dqkv_, datt_, datty_, tmp_, logits_;
};

}  // namespace strata

#endif  // STRATA_MODEL_GPT_STAGE_H_

// Megatron-LM's 1D tensor parallelism over a Communicator whose ranks split
// one layer's matrices: the column-parallel linear (output features split:
// QKV and the MLP's first layer), the row-parallel linear (input features
// split: attention's output projection and the MLP's second layer, one
// all-reduce of the output), and the cross-entropy over logits split along
// the vocabulary (three all-reduces of one value per row, never the logits).
//
// The split rule (SplitDim): a dimension of d over P ranks gives every rank
// ceil(d/P) entries; entries past d on the last ranks are padding, whose
// weights are zero (so they add nothing) and whose outputs callers ignore.
// So any vocabulary or width splits, divisible or not; a head count that
// does not divide is for the attention layer's own rule.
//
// Shapes in comments: N rows (B*T), C input features, OC output features;
// a "_local" array holds this rank's shard.
#ifndef STRATA_MODEL_PARALLEL_TENSOR_PARALLEL_H_
#define STRATA_MODEL_PARALLEL_TENSOR_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/communicator.h"

namespace strata {

// Rank `rank`'s shard of a dimension of `dim` split over `ranks`: entries
// [begin, begin + size) of the padded dimension, of which the first `valid`
// are real (valid < size only on the last shards when ranks does not divide
// dim). REQUIRES: dim >= 1, 0 <= rank < ranks.
struct DimShard {
  int begin = 0;
  int size = 0;
  int valid = 0;
};
DimShard SplitDim(int dim, int ranks, int rank);

// A rank's share of a fused QKV projection split by attention heads: of a
// (3C, cols) matrix (Q's C rows, then K's, then V's; head h in rows
// [h*hs, (h+1)*hs) of each), the rows of the heads in `heads` (a SplitDim
// of the head count), as (3 * heads.size * hs, cols): Q's rows, then K's,
// then V's, zero rows for padded heads. cols = 1 gives the bias. A padded
// head is exact: its q, k and v are zero, so its output is zero, and the
// output projection's columns for it are zero too (ShardColumns).
std::vector<float> ShardQkvRows(const float* qkv, int C, int hs, int cols,
                                DimShard heads);
// The same into *out, reusing its memory (for shards cut every step).
void ShardQkvRowsInto(const float* qkv, int C, int hs, int cols, DimShard heads,
                      std::vector<float>* out);

// Columns [shard.begin, shard.begin + shard.size) of a (rows, cols) matrix,
// zero past `cols`: a row-parallel layer's weight shard.
std::vector<float> ShardColumns(const float* m, int rows, int cols,
                                DimShard shard);
void ShardColumnsInto(const float* m, int rows, int cols, DimShard shard,
                      std::vector<float>* out);

// Column-parallel forward: out_local = inp @ w_local^T + b_local.
// out_local is (N,OCs), inp is (N,C) (the same on every rank), w_local is
// (OCs,C), b_local is (OCs) or null. No communication.
void ColumnParallelForward(float* out_local, const float* inp,
                           const float* w_local, const float* b_local, int N,
                           int C, int OCs);

// Its backward: dw_local += dout_local^T @ inp, db_local += column sums of
// dout_local (skipped when null), and dinp = the all-reduced sum over ranks
// of dout_local @ w_local (every rank's input gradient, whole).
// dinp is (N,C), dout_local is (N,OCs). Errors: the communicator's.
absl::Status ColumnParallelBackward(Communicator& comm, float* dinp,
                                    float* dw_local, float* db_local,
                                    const float* dout_local, const float* inp,
                                    const float* w_local, int N, int C,
                                    int OCs);

// Row-parallel forward: out = sum over ranks of inp_local @ w_local^T (one
// all-reduce), plus bias (whole, added once after the reduction).
// out is (N,OC), inp_local is (N,Cs), w_local is (OC,Cs), bias is (OC) or
// null. Errors: the communicator's.
absl::Status RowParallelForward(Communicator& comm, float* out,
                                const float* inp_local, const float* w_local,
                                const float* bias, int N, int Cs, int OC);

// Its backward: dinp_local = dout @ w_local, dw_local += dout^T @
// inp_local, dbias += column sums of dout (skipped when null; the same on
// every rank). No communication.
void RowParallelBackward(float* dinp_local, float* dw_local, float* dbias,
                         const float* dout, const float* inp_local,
                         const float* w_local, int N, int Cs, int OC);

// Cross-entropy over logits split along the vocabulary: rank r holds
// columns [vocab.begin, vocab.begin + vocab.size) of the (N,V) logits
// (columns past vocab.valid are padding and ignored). Returns the sum over
// rows of -log softmax(logits)[target] (every rank the same), and
// overwrites logits_local with dloss * (softmax - onehot(target)), zero on
// padding. targets is (N), in [0, V). Errors: INVALID_ARGUMENT for a target
// outside [0, V) (V = the shards' valid total), the communicator's.
absl::StatusOr<float> ParallelCrossEntropy(Communicator& comm,
                                           float* logits_local,
                                           const int32_t* targets, int N, int V,
                                           DimShard vocab, float dloss);

}  // namespace strata

#endif  // STRATA_MODEL_PARALLEL_TENSOR_PARALLEL_H_

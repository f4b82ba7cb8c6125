#include "model_parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/matmul.h"

namespace strata {

DimShard SplitDim(int dim, int ranks, int rank) {
  DimShard shard;
  shard.size = (dim + ranks - 1) / ranks;
  shard.begin = rank * shard.size;
  shard.valid = std::clamp(dim - shard.begin, 0, shard.size);
  return shard;
}

std::vector<float> ShardQkvRows(const float* qkv, int C, int hs, int cols,
                                DimShard heads) {
  std::vector<float> out;
  ShardQkvRowsInto(qkv, C, hs, cols, heads, &out);
  return out;
}

void ShardQkvRowsInto(const float* qkv, int C, int hs, int cols, DimShard heads,
                      std::vector<float>* out) {
  const size_t part_rows = size_t(heads.size) * hs;
  out->assign(3 * part_rows * cols, 0.0f);
  for (int part = 0; part < 3; ++part) {
    const float* from =
        qkv + (size_t(part) * C + size_t(heads.begin) * hs) * cols;
    std::copy_n(from, size_t(heads.valid) * hs * cols,
                out->begin() + part * part_rows * cols);
  }
}

std::vector<float> ShardColumns(const float* m, int rows, int cols,
                                DimShard shard) {
  std::vector<float> out;
  ShardColumnsInto(m, rows, cols, shard, &out);
  return out;
}

void ShardColumnsInto(const float* m, int rows, int cols, DimShard shard,
                      std::vector<float>* out) {
  out->assign(size_t(rows) * shard.size, 0.0f);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(m + size_t(r) * cols + shard.begin, shard.valid,
                out->begin() + size_t(r) * shard.size);
  }
}

void ColumnParallelForward(float* out_local, const float* inp,
                           const float* w_local, const float* b_local, int N,
                           int C, int OCs) {
  kernels::MatmulForward(out_local, inp, w_local, b_local, N, C, OCs);
}

absl::Status ColumnParallelBackward(Communicator& comm, float* dinp,
                                    float* dw_local, float* db_local,
                                    const float* dout_local, const float* inp,
                                    const float* w_local, int N, int C,
                                    int OCs) {
  // Each rank's output features saw the whole input: its input gradient
  // is a partial sum over features, completed across ranks.
  kernels::MatmulBackward(dinp, dw_local, db_local, dout_local, inp, w_local, N,
                          C, OCs);
  return comm.AllReduce(absl::MakeSpan(dinp, size_t(N) * C), ReduceOp::kSum);
}

absl::Status RowParallelForward(Communicator& comm, float* out,
                                const float* inp_local, const float* w_local,
                                const float* bias, int N, int Cs, int OC) {
  kernels::MatmulForward(out, inp_local, w_local, nullptr, N, Cs, OC);
  STRATA_RETURN_IF_ERROR(
      comm.AllReduce(absl::MakeSpan(out, size_t(N) * OC), ReduceOp::kSum));
  if (bias != nullptr) {
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < OC; ++o) out[size_t(n) * OC + o] += bias[o];
    }
  }
  return absl::OkStatus();
}

void RowParallelBackward(float* dinp_local, float* dw_local, float* dbias,
                         const float* dout, const float* inp_local,
                         const float* w_local, int N, int Cs, int OC) {
  kernels::MatmulBackward(dinp_local, dw_local, dbias, dout, inp_local, w_local,
                          N, Cs, OC);
}

absl::StatusOr<float> ParallelCrossEntropy(Communicator& comm,
                                           float* logits_local,
                                           const int32_t* targets, int N, int V,
                                           DimShard vocab, float dloss) {
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0 || targets[n] >= V) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target ", targets[n], " of row ", n, " is outside [0, ", V, ")"));
    }
  }
  // Step 1: each row's maximum over the whole vocabulary (for a stable
  // exp). Step 2: the sum of exp(logit - max) and the target's logit less
  // the max, from the rank that holds it. One value per row per all-reduce,
  // never the logits.
  std::vector<float> row_max(N, -std::numeric_limits<float>::infinity());
  for (int n = 0; n < N; ++n) {
    const float* row = logits_local + size_t(n) * vocab.size;
    for (int v = 0; v < vocab.valid; ++v)
      row_max[n] = std::max(row_max[n], row[v]);
  }
  STRATA_RETURN_IF_ERROR(
      comm.AllReduce(absl::MakeSpan(row_max), ReduceOp::kMax));
  std::vector<float> sum_exp(N, 0.0f), target_logit(N, 0.0f);
  for (int n = 0; n < N; ++n) {
    float* row = logits_local + size_t(n) * vocab.size;
    const int t = targets[n] - vocab.begin;
    if (t >= 0 && t < vocab.valid) target_logit[n] = row[t] - row_max[n];
    double sum = 0;
    for (int v = 0; v < vocab.valid; ++v) {
      row[v] = std::exp(row[v] - row_max[n]);  // kept for the gradient
      sum += row[v];
    }
    sum_exp[n] = float(sum);
  }
  STRATA_RETURN_IF_ERROR(
      comm.AllReduce(absl::MakeSpan(sum_exp), ReduceOp::kSum));
  STRATA_RETURN_IF_ERROR(
      comm.AllReduce(absl::MakeSpan(target_logit), ReduceOp::kSum));
  double total = 0;
  for (int n = 0; n < N; ++n) {
    total += std::log(double(sum_exp[n])) - target_logit[n];
    float* row = logits_local + size_t(n) * vocab.size;
    const float scale = dloss / sum_exp[n];
    for (int v = 0; v < vocab.valid; ++v) row[v] *= scale;
    for (int v = vocab.valid; v < vocab.size; ++v) row[v] = 0;
    const int t = targets[n] - vocab.begin;
    if (t >= 0 && t < vocab.valid) row[t] -= dloss;
  }
  return float(total);
}

}  // namespace strata

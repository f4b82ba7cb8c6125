#include "model/moe_exchange.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

absl::StatusOr<ExpertExchange> ExpertExchange::Create(Communicator* group,
                                                      int experts, int width) {
  if (group == nullptr || group->size() < 1 || experts < 1 || width < 1) {
    return absl::InvalidArgumentError(
        "expert parallelism needs a group, experts and a width");
  }
  if (experts % group->size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ep ", group->size(), " must divide the ", experts,
                     " experts: every rank holds as many"));
  }
  return ExpertExchange(group, experts, width);
}

ExpertExchange::ExpertExchange(Communicator* group, int experts, int width)
    : group_(group),
      experts_(experts),
      width_(width),
      per_rank_(experts / group->size()) {}

absl::Status ExpertExchange::ShareLoads(const std::vector<int>& local) {
  const int P = ranks(), E = experts_;
  if (static_cast<int>(local.size()) != E) {
    return absl::InvalidArgumentError(
        absl::StrCat(local.size(), " loads for ", E, " experts"));
  }
  // Loads are at most a rank's tokens: exact in fp32.
  load_floats_.assign(local.begin(), local.end());
  gathered_.resize(size_t{1} * P * E);
  STRATA_RETURN_IF_ERROR(group_->AllGather(
      load_floats_, std::vector<size_t>(P, E), absl::MakeSpan(gathered_)));
  loads_.resize(gathered_.size());
  for (size_t i = 0; i < gathered_.size(); ++i) {
    loads_[i] = static_cast<int>(std::lround(gathered_[i]));
  }
  owned_offset_.assign(per_rank_, 0);
  owned_total_ = 0;
  for (int k = 0; k < per_rank_; ++k) {
    owned_offset_[k] = owned_total_;
    owned_total_ += OwnedRows(first_owned() + k);
  }
  return absl::OkStatus();
}

int ExpertExchange::OwnedRows(int e) const {
  int rows = 0;
  for (int q = 0; q < ranks(); ++q) rows += Load(q, e);
  return rows;
}

size_t ExpertExchange::OwnedOffset(int e) const {
  return owned_offset_[e - first_owned()];
}

size_t ExpertExchange::Floats(int from, int to) const {
  size_t rows = 0;
  for (int e = Owner0(to); e < Owner0(to) + per_rank_; ++e) {
    rows += Load(from, e);
  }
  return rows * width_;
}

void ExpertExchange::Counts(std::vector<size_t>* to_owners,
                            std::vector<size_t>* from_ranks) const {
  const int P = ranks(), me = group_->rank();
  to_owners->resize(P);
  from_ranks->resize(P);
  for (int q = 0; q < P; ++q) {
    (*to_owners)[q] = Floats(me, q);
    (*from_ranks)[q] = Floats(q, me);
  }
}

absl::Status ExpertExchange::Dispatch(const float* local, int cap,
                                      std::vector<float>* owned) {
  const int P = ranks(), me = group_->rank(), C = width_;
  std::vector<size_t> send, recv;
  Counts(&send, &recv);
  // Step 1: this rank's rows in expert order, which is owner order.
  send_.clear();
  for (int e = 0; e < experts_; ++e) {
    const float* rows = local + size_t{1} * e * cap * C;
    send_.insert(send_.end(), rows, rows + size_t{1} * Load(me, e) * C);
  }
  // Step 2: each owner gets its experts' rows, grouped by sender.
  recv_.resize(owned_total_ * C);
  STRATA_RETURN_IF_ERROR(
      group_->AllToAll(send_, send, absl::MakeSpan(recv_), recv));
  // Step 3: regrouped by expert (sender order within one).
  owned->resize(owned_total_ * C);
  const float* from = recv_.data();
  std::vector<size_t> filled(owned_offset_);
  for (int q = 0; q < P; ++q) {
    for (int k = 0; k < per_rank_; ++k) {
      const size_t n = size_t{1} * Load(q, first_owned() + k) * C;
      std::copy(from, from + n, owned->data() + filled[k] * C);
      filled[k] += n / C;
      from += n;
    }
  }
  return absl::OkStatus();
}

absl::Status ExpertExchange::Return(const float* owned, int cap, float* local) {
  const int P = ranks(), me = group_->rank(), C = width_;
  std::vector<size_t> send, recv;  // Dispatch's, the other way round
  Counts(&recv, &send);
  // Step 1: the owned rows regrouped by the rank that routed them.
  send_.clear();
  std::vector<size_t> taken(owned_offset_);
  for (int q = 0; q < P; ++q) {
    for (int k = 0; k < per_rank_; ++k) {
      const size_t n = size_t{1} * Load(q, first_owned() + k) * C;
      const float* rows = owned + taken[k] * C;
      send_.insert(send_.end(), rows, rows + n);
      taken[k] += n / C;
    }
  }
  // Step 2: back to the ranks; step 3: into each expert's slots.
  size_t total = 0;
  for (size_t n : recv) total += n;
  recv_.resize(total);
  STRATA_RETURN_IF_ERROR(
      group_->AllToAll(send_, send, absl::MakeSpan(recv_), recv));
  const float* from = recv_.data();
  for (int e = 0; e < experts_; ++e) {
    const size_t n = size_t{1} * Load(me, e) * C;
    std::copy(from, from + n, local + size_t{1} * e * cap * C);
    from += n;
  }
  return absl::OkStatus();
}

}  // namespace strata

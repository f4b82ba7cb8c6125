// Moves an MoE layer's token rows between the ranks of an expert-parallel
// group (`--ep`, model/gpt_expert_parallel.h): GShard's dispatch and
// combine all-to-alls, over the group's Communicator.
//
// The experts are split in contiguous blocks: of E experts over P ranks,
// rank r owns experts [r·E/P, (r+1)·E/P). Every rank routes its own tokens
// (model/moe_layer.h) and holds, per expert e, the rows of its tokens in
// e's slots: a "local" buffer laid out (E, cap, width), expert e's rows at
// e·cap, its first load[e] rows valid. An owner runs each of its experts
// over the rows every rank routed to it, held "owned": (owned experts,
// rows, width), expert-major, and within an expert in rank order, then in
// each rank's slot order.
//
// Usage, once per layer pass, every rank in the same order:
//   ex.ShareLoads(routing.load);         // an all-gather
//   ex.Dispatch(local_in, cap, &owned);  // an all-to-all
//   ... run each owned expert e on rows [OwnedOffset(e), +OwnedRows(e)) ...
//   ex.Return(owned_out, cap, local_out);  // the reverse all-to-all
// Errors are the communicator's (it is then failed: the group is rebuilt).
// Not thread-safe: one rank's layer calls it from one thread at a time.
#ifndef STRATA_MODEL_MOE_EXCHANGE_H_
#define STRATA_MODEL_MOE_EXCHANGE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/communicator.h"

namespace strata {

class ExpertExchange {
 public:
  // INVALID_ARGUMENT unless the group has a rank and divides `experts`
  // (experts and width > 0). `group` must outlive the exchange.
  static absl::StatusOr<ExpertExchange> Create(Communicator* group, int experts,
                                               int width);

  int ranks() const { return group_->size(); }
  Communicator& group() const { return *group_; }
  // This rank's experts: [first_owned(), first_owned() + owned()).
  int first_owned() const { return Owner0(group_->rank()); }
  int owned() const { return per_rank_; }
  bool Owns(int expert) const { return expert / per_rank_ == group_->rank(); }

  // Tells every rank every rank's loads: local[e] is the rows this rank
  // routed to expert e (E entries, each >= 0).
  absl::Status ShareLoads(const std::vector<int>& local);
  // After ShareLoads: the rows owned expert e receives from every rank,
  // where they start in the owned layout (in rows), and the owned total.
  int OwnedRows(int e) const;
  size_t OwnedOffset(int e) const;
  size_t OwnedTotal() const { return owned_total_; }

  // Each rank's local rows to the experts' owners: `local` is (E, cap,
  // width); `owned` is resized to (OwnedTotal(), width) and filled.
  absl::Status Dispatch(const float* local, int cap, std::vector<float>* owned);
  // The reverse: owned rows (OwnedTotal(), width) back to the ranks that
  // routed them, into their slots of `local` (E, cap, width). Slots past
  // an expert's load are left as they were.
  absl::Status Return(const float* owned, int cap, float* local);

 private:
  ExpertExchange(Communicator* group, int experts, int width);
  int Owner0(int rank) const { return rank * per_rank_; }
  int Load(int rank, int e) const { return loads_[rank * experts_ + e]; }
  // Floats rank `from` routes to the experts of rank `to`.
  size_t Floats(int from, int to) const;
  // Per rank q: the floats this rank routes to q's experts, and those q
  // routes to this rank's.
  void Counts(std::vector<size_t>* to_owners,
              std::vector<size_t>* from_ranks) const;

  Communicator* group_;
  int experts_, width_, per_rank_;
  std::vector<int> loads_;            // (ranks, E), from ShareLoads
  std::vector<size_t> owned_offset_;  // per owned expert, in rows
  size_t owned_total_ = 0;
  // Scratch, kept between calls: loads as floats, and rows in rank order.
  std::vector<float> load_floats_, gathered_, send_, recv_;
};

}  // namespace strata

#endif  // STRATA_MODEL_MOE_EXCHANGE_H_

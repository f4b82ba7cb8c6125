// Leases a worker holds ahead of its step, so that a scheduler outage
// stops no step: every step's samples come from the scheduler's data
// ledger (scheduler/ledger.h), and a worker asking for each one as it
// comes would wait out the whole outage. A worker asks for enough steps
// ahead to cover `cover` of training at its measured step rate (at most
// kMaxAhead), keeps them here, and asks for more when fewer than half
// remain. Membership changes still wait for the
// scheduler, and a held lease is used only in the view it was made for:
// - BSP: the same workers epoch (the split's shares follow the live
//   workers) and rollback generation;
// - SSP/ASP: the same member id (a fenced worker's leases went back to the
//   queue) and generation.
// Anything else is asked for again (the ledger answers a lease it already
// made with the same units). Not thread-safe: one per worker's step loop.
#ifndef STRATA_CLUSTER_LEASE_AHEAD_H_
#define STRATA_CLUSTER_LEASE_AHEAD_H_

#include <cstdint>
#include <map>
#include <optional>

#include "absl/time/time.h"
#include "strata/v1/ledger.pb.h"
#include "strata/v1/scheduler.pb.h"

namespace strata {

class LeaseAhead {
 public:
  // Steps asked ahead before a step rate is measured.
  static constexpr int kFirstAhead = 8;
  // The most asked for at once: the ledger's cap (scheduler/ledger.h
  // kMaxLeaseAhead, which clamps the request anyway;
  // cluster/lease_ahead_test.cc checks they are equal).
  static constexpr int kMaxAhead = 2048;

  explicit LeaseAhead(absl::Duration cover = absl::Seconds(30));

  // The held lease for `step`, if it is valid in `view` for `member`;
  // forgets every lease before `step` (and an invalid one for `step`).
  // Notes the step's time for the rate (`now`).
  std::optional<v1::LeaseWorkResponse> Take(int64_t step, const v1::View& view,
                                            uint64_t member, absl::Time now);

  // How many steps after `step` to ask for now: 0 while more than half the
  // cover is held, or while a failed ask backs off; else the cover at the
  // measured rate (kFirstAhead before there is one), at most the ledger's
  // cap.
  int WantAhead(int64_t step, absl::Time now) const;

  // Keeps the leases `resp` brought ahead of its own step, made for
  // `member` in rollback generation `generation`.
  void Keep(const v1::LeaseWorkResponse& resp, uint64_t member,
            uint64_t generation);

  // An ask for leases ahead failed (the scheduler is away): no ask again for
  // a second, doubling with each failure up to 16 s (Keep resets it), so
  // that the steps the held leases cover seldom wait on it.
  void AskFailed(absl::Time now);

  // Leases held now (tests, metrics).
  size_t held() const { return held_.size(); }

 private:
  struct Held {
    v1::LeaseWorkResponse lease;
    uint64_t member = 0;
    uint64_t generation = 0;
  };
  bool Valid(const Held& h, const v1::View& view, uint64_t member) const;
  // Held leases for steps after `step`.
  int HeldAfter(int64_t step) const;

  absl::Duration cover_;
  std::map<int64_t, Held> held_;
  // Step rate: the last step taken and when, and the mean step time (an
  // exponential average; zero until two steps were seen).
  int64_t last_step_ = -1;
  absl::Time last_time_;
  absl::Duration step_time_;
  absl::Time retry_after_ = absl::InfinitePast();
  absl::Duration backoff_ = absl::Seconds(1);
};

}  // namespace strata

#endif  // STRATA_CLUSTER_LEASE_AHEAD_H_

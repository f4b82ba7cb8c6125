// The collective interface workers use among themselves: all-reduce,
// reduce-scatter, all-gather, all-to-all, broadcast, barrier and point-to-point
// send/recv over fp32 buffers, each asynchronous with a Work handle to wait
// on, each bounded by the communicator's timeout, and an Abort that ends
// whatever is running. Implementations: in-process over threads
// (inproc_communicator.h, for tests and CPU tensor/pipeline parallelism) and
// Gloo over TCP between processes and hosts (gloo_communicator.h).
//
// Usage (every rank issues the same collectives in the same order):
//   std::vector<float> grad = ...;
//   STRATA_RETURN_IF_ERROR(comm->AllReduce(absl::MakeSpan(grad),
//                                          ReduceOp::kSum));
//   auto work = comm->SendAsync(absl::MakeConstSpan(act), /*peer=*/1,
//                               /*tag=*/7);
//   ... compute ...
//   STRATA_RETURN_IF_ERROR(work->Wait());
//
// Failure model: an operation that fails (a timeout, a peer that closed its
// end or died, Abort) fails the communicator: every later operation fails at
// once with FAILED_PRECONDITION naming the first error, since the ranks may
// no longer agree on which operation is which. Recovery is a new group (a new
// communicator formed at a new epoch), never a retry on this one.
#ifndef STRATA_COLLECTIVE_COMMUNICATOR_H_
#define STRATA_COLLECTIVE_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/thread_pool.h"

namespace strata {

enum class ReduceOp { kSum, kMax };

struct CommunicatorOptions {
  // The longest one operation may run, from when it starts (collectives run
  // one at a time in issue order; a send or recv starts when issued). An
  // operation past it fails with DEADLINE_EXCEEDED and fails the
  // communicator.
  absl::Duration timeout = absl::Seconds(60);
};

// The outcome of one asynchronous operation. Thread-safe.
class Work {
 public:
  // A finished operation with `status`.
  static std::shared_ptr<Work> Finished(absl::Status status);
  // An operation that completes inside Wait: `fn` runs once, on the
  // first Wait's thread, and its status is the operation's.
  static std::shared_ptr<Work> CompletedBy(std::function<absl::Status()> fn);
  // An operation another thread completes with Finish.
  static std::shared_ptr<Work> Pending();

  // Blocks until the operation is done; its status. The operation's buffers
  // belong to it until Wait returns (whatever the status). REQUIRES: the
  // communicator that issued it is still alive (a recv completes inside
  // Wait, through it).
  absl::Status Wait();
  bool done() const;
  void Finish(absl::Status status);

 private:
  Work() = default;
  mutable absl::Mutex mu_;
  std::function<absl::Status()> complete_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// A group member's handle. Thread-safe: operations may be issued from any
// thread, but every rank must issue the same collectives in the same order
// (they are matched by position), with matching arguments. Sends and recvs
// between a pair of ranks match in order per tag.
class Communicator {
 public:
  // Fails whatever is still queued or running (ABORTED) and returns once
  // nothing runs; peers then see this rank as gone.
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Element-wise reduction of `data` over the ranks, in place, on every
  // rank. REQUIRES: the same data.size() on every rank.
  std::shared_ptr<Work> AllReduceAsync(absl::Span<float> data, ReduceOp op);
  // `in` is split into blocks of counts[0], counts[1], ... elements; rank r
  // receives in `out` the reduction over the ranks of block r.
  // REQUIRES: counts.size() == size(), sum(counts) == in.size() and
  // out.size() == counts[rank()], the same counts on every rank.
  std::shared_ptr<Work> ReduceScatterAsync(absl::Span<const float> in,
                                           std::vector<size_t> counts,
                                           absl::Span<float> out, ReduceOp op);
  // Every rank's `in` (counts[r] elements from rank r), concatenated in rank
  // order into every rank's `out`. REQUIRES: in.size() == counts[rank()],
  // out.size() == sum(counts).
  std::shared_ptr<Work> AllGatherAsync(absl::Span<const float> in,
                                       std::vector<size_t> counts,
                                       absl::Span<float> out);
  // Each rank sends block q of `in` (send_counts[q] elements, blocks in
  // rank order) to rank q, and receives rank q's block for it into block q
  // of `out` (recv_counts[q] elements): MPI's alltoallv. The counts may
  // differ on every rank and may be 0. REQUIRES: send_counts.size() ==
  // recv_counts.size() == size(), sum(send_counts) == in.size(),
  // sum(recv_counts) == out.size(), and recv_counts[q] on this rank equal
  // to send_counts[rank()] on rank q (a mismatch fails the communicator:
  // INVALID_ARGUMENT where the transport sees it, else a size error or a
  // timeout).
  std::shared_ptr<Work> AllToAllAsync(absl::Span<const float> in,
                                      std::vector<size_t> send_counts,
                                      absl::Span<float> out,
                                      std::vector<size_t> recv_counts);
  // Copies `root`'s data into every rank's data (same size everywhere).
  std::shared_ptr<Work> BroadcastAsync(absl::Span<float> data, int root);
  // Returns on each rank once every rank has entered it.
  std::shared_ptr<Work> BarrierAsync();
  // Sends `data` to `peer`, to be received by its RecvAsync with the same
  // tag and size. Starts at once (not queued behind collectives); a send may
  // complete only when the peer receives it.
  std::shared_ptr<Work> SendAsync(absl::Span<const float> data, int peer,
                                  uint32_t tag);
  std::shared_ptr<Work> RecvAsync(absl::Span<float> data, int peer,
                                  uint32_t tag);

  // Blocking forms: the Async call, then Wait.
  absl::Status AllReduce(absl::Span<float> data, ReduceOp op) {
    return AllReduceAsync(data, op)->Wait();
  }
  absl::Status ReduceScatter(absl::Span<const float> in,
                             std::vector<size_t> counts, absl::Span<float> out,
                             ReduceOp op) {
    return ReduceScatterAsync(in, std::move(counts), out, op)->Wait();
  }
  absl::Status AllGather(absl::Span<const float> in, std::vector<size_t> counts,
                         absl::Span<float> out) {
    return AllGatherAsync(in, std::move(counts), out)->Wait();
  }
  absl::Status AllToAll(absl::Span<const float> in,
                        std::vector<size_t> send_counts, absl::Span<float> out,
                        std::vector<size_t> recv_counts) {
    return AllToAllAsync(in, std::move(send_counts), out,
                         std::move(recv_counts))
        ->Wait();
  }
  absl::Status Broadcast(absl::Span<float> data, int root) {
    return BroadcastAsync(data, root)->Wait();
  }
  absl::Status Barrier() { return BarrierAsync()->Wait(); }
  absl::Status Send(absl::Span<const float> data, int peer, uint32_t tag) {
    return SendAsync(data, peer, tag)->Wait();
  }
  absl::Status Recv(absl::Span<float> data, int peer, uint32_t tag) {
    return RecvAsync(data, peer, tag)->Wait();
  }

  // Ends the operation running now and every queued one with ABORTED, and
  // fails the communicator. Peers see this rank as gone (their operations
  // fail, at the latest at their timeout). Idempotent; any thread.
  void Abort();
  // OK while no operation has failed; else the first failure.
  absl::Status health() const;

 protected:
  Communicator(int rank, int size, CommunicatorOptions options);

  // Transport hooks. The collective ones run one at a time, in issue order,
  // on the communicator's operation thread, with arguments already checked;
  // each returns by `deadline`. The point-to-point ones start the transfer
  // on the caller's thread and return its Work.
  virtual absl::Status RunAllReduce(absl::Span<float> data, ReduceOp op,
                                    absl::Time deadline) = 0;
  virtual absl::Status RunReduceScatter(absl::Span<const float> in,
                                        const std::vector<size_t>& counts,
                                        absl::Span<float> out, ReduceOp op,
                                        absl::Time deadline) = 0;
  virtual absl::Status RunAllGather(absl::Span<const float> in,
                                    const std::vector<size_t>& counts,
                                    absl::Span<float> out,
                                    absl::Time deadline) = 0;
  virtual absl::Status RunAllToAll(absl::Span<const float> in,
                                   const std::vector<size_t>& send_counts,
                                   absl::Span<float> out,
                                   const std::vector<size_t>& recv_counts,
                                   absl::Time deadline) = 0;
  virtual absl::Status RunBroadcast(absl::Span<float> data, int root,
                                    absl::Time deadline) = 0;
  virtual absl::Status RunBarrier(absl::Time deadline) = 0;
  virtual std::shared_ptr<Work> StartSend(absl::Span<const float> data,
                                          int peer, uint32_t tag,
                                          absl::Time deadline) = 0;
  virtual std::shared_ptr<Work> StartRecv(absl::Span<float> data, int peer,
                                          uint32_t tag,
                                          absl::Time deadline) = 0;
  // Makes the running hook (and any later one) return soon with an error,
  // and lets peers see this rank as gone (closes its connections). Called
  // on Abort and on the first failure; idempotent; any thread.
  virtual void AbortTransport() = 0;

  // Derived destructors call this first: aborts, then waits for the
  // operation thread, so no hook runs on a half-destroyed object.
  void ShutDown();
  // Records a failure (the first one sticks), aborts the transport, and
  // returns the status as given. OK passes through.
  absl::Status Fail(absl::Status status);
  const CommunicatorOptions& options() const { return options_; }

 private:
  std::shared_ptr<Work> Enqueue(absl::Status precheck,
                                std::function<absl::Status(absl::Time)> run);
  absl::Status CheckPeer(int peer) const;

  const int rank_;
  const int size_;
  const CommunicatorOptions options_;
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<ThreadPool> ops_;  // one thread: collectives in order
};

}  // namespace strata

#endif  // STRATA_COLLECTIVE_COMMUNICATOR_H_

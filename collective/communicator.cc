#include "collective/communicator.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {

std::shared_ptr<Work> Work::Finished(absl::Status status) {
  std::shared_ptr<Work> work(new Work());
  work->Finish(std::move(status));
  return work;
}

std::shared_ptr<Work> Work::CompletedBy(std::function<absl::Status()> fn) {
  std::shared_ptr<Work> work(new Work());
  absl::MutexLock lock(&work->mu_);
  work->complete_ = std::move(fn);
  return work;
}

std::shared_ptr<Work> Work::Pending() {
  return std::shared_ptr<Work>(new Work());
}

absl::Status Work::Wait() {
  absl::MutexLock lock(&mu_);
  if (complete_) {
    // The first waiter completes the operation; later ones (and done())
    // see its result. Held across the call so they wait for it.
    std::function<absl::Status()> fn = std::move(complete_);
    complete_ = nullptr;
    status_ = fn();
    done_ = true;
  }
  mu_.Await(absl::Condition(&done_));
  return status_;
}

bool Work::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void Work::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  status_ = std::move(status);
  done_ = true;
}

Communicator::Communicator(int rank, int size, CommunicatorOptions options)
    : rank_(rank),
      size_(size),
      options_(options),
      ops_(std::make_unique<ThreadPool>(1)) {}

Communicator::~Communicator() { ShutDown(); }

void Communicator::ShutDown() {
  Abort();
  ops_.reset();  // runs what is queued (each fails at once), then joins
}

void Communicator::Abort() {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    if (failure_.ok()) failure_ = absl::AbortedError("communicator aborted");
  }
  AbortTransport();
}

absl::Status Communicator::health() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

absl::Status Communicator::Fail(absl::Status status) {
  if (status.ok()) return status;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
  }
  // Peers blocked on this rank learn at once that it has given up, rather
  // than at their timeout.
  AbortTransport();
  return status;
}

std::shared_ptr<Work> Communicator::Enqueue(
    absl::Status precheck, std::function<absl::Status(absl::Time)> run) {
  // A bad argument fails only this call: no rank has started the operation,
  // so the group still agrees on the order of what follows.
  if (!precheck.ok()) return Work::Finished(std::move(precheck));
  std::shared_ptr<Work> work = Work::Pending();
  ops_->Schedule([this, work, run = std::move(run)] {
    absl::Status failed = health();
    if (!failed.ok()) {
      work->Finish(absl::FailedPreconditionError(
          absl::StrCat("communicator has failed: ", failed.ToString())));
      return;
    }
    absl::Status status = run(absl::Now() + options_.timeout);
    work->Finish(Fail(std::move(status)));
  });
  return work;
}

namespace {

absl::Status CheckCounts(const std::vector<size_t>& counts, int size,
                         size_t total) {
  if (counts.size() != static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "counts has ", counts.size(), " entries for ", size, " ranks"));
  }
  const size_t sum = std::accumulate(counts.begin(), counts.end(), size_t{0});
  if (sum != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "counts sum to ", sum, " elements, the buffer holds ", total));
  }
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<Work> Communicator::AllReduceAsync(absl::Span<float> data,
                                                   ReduceOp op) {
  return Enqueue(absl::OkStatus(), [this, data, op](absl::Time deadline) {
    return RunAllReduce(data, op, deadline);
  });
}

std::shared_ptr<Work> Communicator::ReduceScatterAsync(
    absl::Span<const float> in, std::vector<size_t> counts,
    absl::Span<float> out, ReduceOp op) {
  absl::Status check = CheckCounts(counts, size_, in.size());
  if (check.ok() && out.size() != counts[rank_]) {
    check = absl::InvalidArgumentError(
        absl::StrCat("reduce-scatter output holds ", out.size(),
                     " elements, this rank's block ", counts[rank_]));
  }
  return Enqueue(check, [this, in, counts = std::move(counts), out,
                         op](absl::Time deadline) {
    return RunReduceScatter(in, counts, out, op, deadline);
  });
}

std::shared_ptr<Work> Communicator::AllGatherAsync(absl::Span<const float> in,
                                                   std::vector<size_t> counts,
                                                   absl::Span<float> out) {
  absl::Status check = CheckCounts(counts, size_, out.size());
  if (check.ok() && in.size() != counts[rank_]) {
    check = absl::InvalidArgumentError(
        absl::StrCat("all-gather input holds ", in.size(),
                     " elements, this rank's block ", counts[rank_]));
  }
  return Enqueue(
      check, [this, in, counts = std::move(counts), out](absl::Time deadline) {
        return RunAllGather(in, counts, out, deadline);
      });
}

std::shared_ptr<Work> Communicator::AllToAllAsync(
    absl::Span<const float> in, std::vector<size_t> send_counts,
    absl::Span<float> out, std::vector<size_t> recv_counts) {
  absl::Status check = CheckCounts(send_counts, size_, in.size());
  if (check.ok()) check = CheckCounts(recv_counts, size_, out.size());
  if (check.ok() && send_counts[rank_] != recv_counts[rank_]) {
    check = absl::InvalidArgumentError(
        absl::StrCat("all-to-all: this rank sends itself ", send_counts[rank_],
                     " elements but receives ", recv_counts[rank_]));
  }
  return Enqueue(check, [this, in, send = std::move(send_counts), out,
                         recv = std::move(recv_counts)](absl::Time deadline) {
    return RunAllToAll(in, send, out, recv, deadline);
  });
}

std::shared_ptr<Work> Communicator::BroadcastAsync(absl::Span<float> data,
                                                   int root) {
  return Enqueue(CheckPeer(root), [this, data, root](absl::Time deadline) {
    return RunBroadcast(data, root, deadline);
  });
}

std::shared_ptr<Work> Communicator::BarrierAsync() {
  return Enqueue(absl::OkStatus(),
                 [this](absl::Time deadline) { return RunBarrier(deadline); });
}

absl::Status Communicator::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", peer, " is not in a group of ", size_));
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> Communicator::SendAsync(absl::Span<const float> data,
                                              int peer, uint32_t tag) {
  absl::Status check = CheckPeer(peer);
  if (check.ok() && peer == rank_) {
    check = absl::InvalidArgumentError("a rank cannot send to itself");
  }
  if (!check.ok()) return Work::Finished(check);
  absl::Status failed = health();
  if (!failed.ok()) {
    return Work::Finished(absl::FailedPreconditionError(
        absl::StrCat("communicator has failed: ", failed.ToString())));
  }
  return StartSend(data, peer, tag, absl::Now() + options_.timeout);
}

std::shared_ptr<Work> Communicator::RecvAsync(absl::Span<float> data, int peer,
                                              uint32_t tag) {
  absl::Status check = CheckPeer(peer);
  if (check.ok() && peer == rank_) {
    check = absl::InvalidArgumentError("a rank cannot receive from itself");
  }
  if (!check.ok()) return Work::Finished(check);
  absl::Status failed = health();
  if (!failed.ok()) {
    return Work::Finished(absl::FailedPreconditionError(
        absl::StrCat("communicator has failed: ", failed.ToString())));
  }
  return StartRecv(data, peer, tag, absl::Now() + options_.timeout);
}

}  // namespace strata

#include "collective/inproc_communicator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace strata {
namespace {

float Reduce(ReduceOp op, float a, float b) {
  return op == ReduceOp::kSum ? a + b : std::max(a, b);
}

// What one rank brings to a collective; compared across ranks so a
// mismatched call fails on every rank alike.
struct Posted {
  std::string kind;
  const float* in = nullptr;
  size_t in_size = 0;
  std::vector<size_t> counts;
  int root = 0;
  ReduceOp op = ReduceOp::kSum;
  std::vector<size_t> recv_counts;  // an all-to-all's
};

// The state the ranks of one group share.
class Group {
 public:
  explicit Group(int size) : size_(size), posted_(size), reduced_(size) {}

  int size() const { return size_; }

  // Rank `rank` posts its part of the next collective and waits for all.
  absl::Status Post(int rank, Posted posted, absl::Time deadline) {
    {
      absl::MutexLock lock(&mu_);
      posted_[rank] = std::move(posted);
    }
    return Arrive(deadline);
  }

  // Waits until every rank has arrived (a generation barrier). Fails when
  // the group is broken (a rank left) or at `deadline`, which breaks it.
  absl::Status Arrive(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      return absl::OkStatus();
    }
    auto passed_or_broken = [this, generation]() {
      mu_.AssertHeld();
      return generation_ != generation || !broken_.ok();
    };
    mu_.AwaitWithDeadline(absl::Condition(&passed_or_broken), deadline);
    if (generation_ != generation) return absl::OkStatus();
    if (!broken_.ok()) return broken_;
    broken_ = absl::DeadlineExceededError(
        absl::StrCat("in-process collective: not every rank of ", size_,
                     " arrived in time"));
    return broken_;
  }

  // Checks that every rank posted the same collective as rank 0 (an
  // all-to-all's counts and sizes are each rank's own).
  absl::Status CheckMatch() {
    absl::MutexLock lock(&mu_);
    const Posted& first = posted_[0];
    const bool own_sizes = first.kind == "alltoall";
    for (int r = 1; r < size_; ++r) {
      const Posted& p = posted_[r];
      if (p.kind != first.kind || (!own_sizes && p.counts != first.counts) ||
          p.root != first.root || p.op != first.op ||
          (first.kind != "allgather" && !own_sizes &&
           p.in_size != first.in_size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("ranks disagree: rank 0 called ", first.kind, " over ",
                         first.in_size, " elements, rank ", r, " ", p.kind,
                         " over ", p.in_size));
      }
    }
    return absl::OkStatus();
  }

  const Posted& posted(int rank) {
    absl::MutexLock lock(&mu_);
    return posted_[rank];
  }
  // Rank `rank`'s share of an all-reduce, read by every rank after the
  // barrier that follows the reduction.
  std::vector<float>& reduced(int rank) { return reduced_[rank]; }

  void Break(absl::Status why) {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = std::move(why);
  }

  void Send(int from, int to, uint32_t tag, absl::Span<const float> data) {
    absl::MutexLock lock(&mu_);
    mail_[{from, to, tag}].emplace_back(data.begin(), data.end());
  }

  // Messages already sent are delivered even after the group broke.
  absl::Status Recv(int from, int to, uint32_t tag, absl::Span<float> data,
                    absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto& box = mail_[{from, to, tag}];
    auto arrived_or_broken = [this, &box]() {
      mu_.AssertHeld();
      return !box.empty() || !broken_.ok();
    };
    mu_.AwaitWithDeadline(absl::Condition(&arrived_or_broken), deadline);
    if (box.empty()) {
      if (!broken_.ok()) return broken_;
      return absl::DeadlineExceededError(absl::StrCat(
          "in-process recv from rank ", from, " (tag ", tag, ") timed out"));
    }
    std::vector<float> message = std::move(box.front());
    box.pop_front();
    if (message.size() != data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", from, " sent ", message.size(),
                       " elements, the recv holds ", data.size()));
    }
    std::copy(message.begin(), message.end(), data.begin());
    return absl::OkStatus();
  }

 private:
  const int size_;
  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::vector<Posted> posted_ ABSL_GUARDED_BY(mu_);
  // Each written only by its own rank between two barriers.
  std::vector<std::vector<float>> reduced_;
  std::map<std::tuple<int, int, uint32_t>, std::deque<std::vector<float>>> mail_
      ABSL_GUARDED_BY(mu_);
};

// [begin, end) of rank r's share of n elements.
std::pair<size_t, size_t> Share(size_t n, int r, int size) {
  return {n * r / size, n * (r + 1) / size};
}

size_t Offset(const std::vector<size_t>& counts, int r) {
  size_t offset = 0;
  for (int q = 0; q < r; ++q) offset += counts[q];
  return offset;
}

class InProcCommunicator : public Communicator {
 public:
  InProcCommunicator(int rank, std::shared_ptr<Group> group,
                     CommunicatorOptions options)
      : Communicator(rank, group->size(), options), group_(std::move(group)) {}
  ~InProcCommunicator() override { ShutDown(); }

 protected:
  // Every collective: post, barrier, check the ranks agree, do this rank's
  // part reading the others' buffers, barrier (nobody reuses a buffer that
  // another rank may still read).
  absl::Status Collective(Posted posted, absl::Time deadline,
                          const std::function<void()>& part) {
    absl::Status status = group_->Post(rank(), std::move(posted), deadline);
    if (!status.ok()) return status;
    absl::Status match = group_->CheckMatch();
    if (match.ok()) part();
    status = group_->Arrive(deadline);
    return match.ok() ? status : match;
  }

  absl::Status RunAllReduce(absl::Span<float> data, ReduceOp op,
                            absl::Time deadline) override {
    // Step 1: this rank reduces its share of the elements over all ranks,
    // in rank order. Step 2: every rank copies every share.
    const size_t n = data.size();
    absl::Status status =
        Collective({"allreduce", data.data(), n, {}, 0, op}, deadline, [&] {
          auto [begin, end] = Share(n, rank(), size());
          std::vector<float>& mine = group_->reduced(rank());
          mine.assign(group_->posted(0).in + begin, group_->posted(0).in + end);
          for (int q = 1; q < size(); ++q) {
            const float* in = group_->posted(q).in;
            for (size_t i = begin; i < end; ++i) {
              mine[i - begin] = Reduce(op, mine[i - begin], in[i]);
            }
          }
        });
    if (!status.ok()) return status;
    for (int q = 0; q < size(); ++q) {
      const std::vector<float>& share = group_->reduced(q);
      std::copy(share.begin(), share.end(),
                data.begin() + Share(n, q, size()).first);
    }
    // Shares are rewritten only after the next collective's first barrier,
    // which this rank reaches only after copying.
    return absl::OkStatus();
  }

  absl::Status RunReduceScatter(absl::Span<const float> in,
                                const std::vector<size_t>& counts,
                                absl::Span<float> out, ReduceOp op,
                                absl::Time deadline) override {
    return Collective({"reducescatter", in.data(), in.size(), counts, 0, op},
                      deadline, [&] {
                        const size_t offset = Offset(counts, rank());
                        const float* first = group_->posted(0).in + offset;
                        std::copy(first, first + out.size(), out.begin());
                        for (int q = 1; q < size(); ++q) {
                          const float* block = group_->posted(q).in + offset;
                          for (size_t i = 0; i < out.size(); ++i) {
                            out[i] = Reduce(op, out[i], block[i]);
                          }
                        }
                      });
  }

  absl::Status RunAllGather(absl::Span<const float> in,
                            const std::vector<size_t>& counts,
                            absl::Span<float> out,
                            absl::Time deadline) override {
    return Collective({"allgather", in.data(), in.size(), counts}, deadline,
                      [&] {
                        for (int q = 0; q < size(); ++q) {
                          const float* block = group_->posted(q).in;
                          std::copy(block, block + counts[q],
                                    out.begin() + Offset(counts, q));
                        }
                      });
  }

  // Each rank copies its blocks out of every rank's input; a block whose
  // size the sender and this rank disagree on fails every rank alike (each
  // checks the whole matrix of counts).
  absl::Status RunAllToAll(absl::Span<const float> in,
                           const std::vector<size_t>& send_counts,
                           absl::Span<float> out,
                           const std::vector<size_t>& recv_counts,
                           absl::Time deadline) override {
    absl::Status sizes;
    absl::Status status = Collective(
        {"alltoall", in.data(), in.size(), send_counts, 0, ReduceOp::kSum,
         recv_counts},
        deadline, [&] {
          for (int to = 0; to < size() && sizes.ok(); ++to) {
            for (int from = 0; from < size() && sizes.ok(); ++from) {
              const size_t sent = group_->posted(from).counts[to];
              const size_t taken = group_->posted(to).recv_counts[from];
              if (sent != taken) {
                sizes = absl::InvalidArgumentError(absl::StrCat(
                    "all-to-all: rank ", from, " sends rank ", to, " ", sent,
                    " elements, rank ", to, " receives ", taken));
              }
            }
          }
          if (!sizes.ok()) return;
          for (int q = 0; q < size(); ++q) {
            const Posted& p = group_->posted(q);
            const float* block = p.in + Offset(p.counts, rank());
            std::copy(block, block + recv_counts[q],
                      out.begin() + Offset(recv_counts, q));
          }
        });
    return sizes.ok() ? status : sizes;
  }

  absl::Status RunBroadcast(absl::Span<float> data, int root,
                            absl::Time deadline) override {
    return Collective({"broadcast", data.data(), data.size(), {}, root},
                      deadline, [&] {
                        if (rank() == root) return;
                        const float* from = group_->posted(root).in;
                        std::copy(from, from + data.size(), data.begin());
                      });
  }

  absl::Status RunBarrier(absl::Time deadline) override {
    return Collective({"barrier"}, deadline, [] {});
  }

  std::shared_ptr<Work> StartSend(absl::Span<const float> data, int peer,
                                  uint32_t tag, absl::Time) override {
    group_->Send(rank(), peer, tag, data);
    return Work::Finished(absl::OkStatus());
  }

  std::shared_ptr<Work> StartRecv(absl::Span<float> data, int peer,
                                  uint32_t tag, absl::Time deadline) override {
    return Work::CompletedBy([this, data, peer, tag, deadline] {
      return Fail(group_->Recv(peer, rank(), tag, data, deadline));
    });
  }

  void AbortTransport() override {
    group_->Break(absl::UnavailableError(
        absl::StrCat("rank ", rank(), " aborted or left the group")));
  }

 private:
  std::shared_ptr<Group> group_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeInProcGroup(
    int size, CommunicatorOptions options) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a group needs at least one rank, got ", size));
  }
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) {
    comms.push_back(std::make_unique<InProcCommunicator>(r, group, options));
  }
  return comms;
}

}  // namespace strata

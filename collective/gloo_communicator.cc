#include "collective/gloo_communicator.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace strata {
namespace {

// Point-to-point slots live above the prefixes Gloo's collectives use.
constexpr uint64_t kPeerSlotBase = uint64_t{0x53} << 56;

std::chrono::milliseconds Remaining(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(left)));
}

// Gloo reports errors by throwing; this is where they become Status.
absl::Status FromException(const std::exception& e, absl::string_view what) {
  const std::string message = absl::StrCat("gloo ", what, ": ", e.what());
  if (absl::StrContains(e.what(), "Timed out") ||
      absl::StrContains(e.what(), "timed out")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

template <typename Fn>
absl::Status Guard(absl::string_view what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return FromException(e, what);
  }
}

// out[i] = a[i] (op) b[i].
void ReduceTo(ReduceOp op, float* out, const float* a, const float* b,
              size_t n) {
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = std::max(a[i], b[i]);
  }
}

// Element offsets of the blocks given by `counts`, with the total last.
std::vector<size_t> Offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t q = 0; q < counts.size(); ++q) {
    offsets[q + 1] = offsets[q] + counts[q];
  }
  return offsets;
}

// `n` elements split into `size` blocks as evenly as they go.
std::vector<size_t> EvenCounts(size_t n, int size) {
  std::vector<size_t> counts;
  for (int q = 0; q < size; ++q) {
    counts.push_back(n * (q + 1) / size - n * q / size);
  }
  return counts;
}

using gloo::transport::UnboundBuffer;

// The collectives are rings written over Gloo's point-to-point buffers
// rather than Gloo's own algorithms, so every wait is one Abort can end
// (Gloo's collectives wait where nothing outside can wake them).
class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context)
      : Communicator(options.rank, options.size, options.comm),
        device_(std::move(device)),
        context_(std::move(context)) {}
  ~GlooCommunicator() override { ShutDown(); }  // ShutDown closes

 protected:
  // Reduce-scatter ring, then all-gather ring, over even blocks of `data`.
  absl::Status RunAllReduce(absl::Span<float> data, ReduceOp op,
                            absl::Time deadline) override {
    if (size() == 1 || data.empty()) return absl::OkStatus();
    const std::vector<size_t> offsets =
        Offsets(EvenCounts(data.size(), size()));
    return Guard("all-reduce", [&]() -> absl::Status {
      // The reduction of block r lands in place; the all-gather then
      // fills the other blocks.
      STRATA_RETURN_IF_ERROR(ReduceScatterRing(
          data.data(), offsets, op, data.data() + offsets[rank()], deadline));
      auto buffer = Buffer(data.data(), data.size());
      return AllGatherRing(*buffer, offsets, deadline);
    });
  }

  absl::Status RunReduceScatter(absl::Span<const float> in,
                                const std::vector<size_t>& counts,
                                absl::Span<float> out, ReduceOp op,
                                absl::Time deadline) override {
    const std::vector<size_t> offsets = Offsets(counts);
    if (size() == 1) {
      std::copy(in.begin(), in.end(), out.begin());
      return absl::OkStatus();
    }
    return Guard("reduce-scatter", [&] {
      return ReduceScatterRing(in.data(), offsets, op, out.data(), deadline);
    });
  }

  absl::Status RunAllGather(absl::Span<const float> in,
                            const std::vector<size_t>& counts,
                            absl::Span<float> out,
                            absl::Time deadline) override {
    const std::vector<size_t> offsets = Offsets(counts);
    std::copy(in.begin(), in.end(), out.begin() + offsets[rank()]);
    if (size() == 1) return absl::OkStatus();
    return Guard("all-gather", [&] {
      auto buffer = Buffer(out.data(), out.size());
      return AllGatherRing(*buffer, offsets, deadline);
    });
  }

  // Every pair exchanges its two blocks directly: each rank posts a recv
  // from every peer that sends it anything, then a send to every peer it
  // sends anything, then waits for all of them; its own block is a copy.
  absl::Status RunAllToAll(absl::Span<const float> in,
                           const std::vector<size_t>& send_counts,
                           absl::Span<float> out,
                           const std::vector<size_t>& recv_counts,
                           absl::Time deadline) override {
    const std::vector<size_t> from = Offsets(send_counts),
                              into = Offsets(recv_counts);
    std::copy(in.begin() + from[rank()], in.begin() + from[rank() + 1],
              out.begin() + into[rank()]);
    if (size() == 1) return absl::OkStatus();
    return Guard("all-to-all", [&]() -> absl::Status {
      auto input = Buffer(const_cast<float*>(in.data()), in.size());
      auto output = Buffer(out.data(), out.size());
      const uint64_t slot = context_->nextSlot();
      int recvs = 0, sends = 0;
      for (int q = 0; q < size(); ++q) {
        if (q == rank() || recv_counts[q] == 0) continue;
        output->recv(q, slot, into[q] * sizeof(float),
                     recv_counts[q] * sizeof(float));
        ++recvs;
      }
      for (int q = 0; q < size(); ++q) {
        if (q == rank() || send_counts[q] == 0) continue;
        input->send(q, slot, from[q] * sizeof(float),
                    send_counts[q] * sizeof(float));
        ++sends;
      }
      for (int i = 0; i < recvs; ++i) {
        STRATA_RETURN_IF_ERROR(WaitFor(*output, /*send=*/false, deadline));
      }
      for (int i = 0; i < sends; ++i) {
        STRATA_RETURN_IF_ERROR(WaitFor(*input, /*send=*/true, deadline));
      }
      return absl::OkStatus();
    });
  }

  // The root sends the whole buffer to every other rank.
  absl::Status RunBroadcast(absl::Span<float> data, int root,
                            absl::Time deadline) override {
    if (size() == 1 || data.empty()) return absl::OkStatus();
    return Guard("broadcast", [&]() -> absl::Status {
      auto buffer = Buffer(data.data(), data.size());
      const uint64_t slot = context_->nextSlot();
      if (rank() != root) {
        buffer->recv(root, slot);
        return WaitFor(*buffer, /*send=*/false, deadline);
      }
      for (int q = 0; q < size(); ++q) {
        if (q != root) buffer->send(q, slot);
      }
      for (int q = 0; q < size(); ++q) {
        if (q != root) STRATA_RETURN_IF_ERROR(WaitFor(*buffer, true, deadline));
      }
      return absl::OkStatus();
    });
  }

  // A one-element all-reduce: no rank finishes it before all have begun.
  absl::Status RunBarrier(absl::Time deadline) override {
    float token = 0;
    return RunAllReduce(absl::MakeSpan(&token, 1), ReduceOp::kSum, deadline);
  }

  std::shared_ptr<Work> StartSend(absl::Span<const float> data, int peer,
                                  uint32_t tag, absl::Time deadline) override {
    return StartPeer(const_cast<float*>(data.data()), data.size(), peer, tag,
                     deadline, /*send=*/true);
  }

  std::shared_ptr<Work> StartRecv(absl::Span<float> data, int peer,
                                  uint32_t tag, absl::Time deadline) override {
    return StartPeer(data.data(), data.size(), peer, tag, deadline,
                     /*send=*/false);
  }

  void AbortTransport() override {
    {
      absl::MutexLock lock(&mu_);
      if (aborted_) return;
      aborted_ = true;
      for (UnboundBuffer* buffer : waiting_) {
        buffer->abortWaitSend();
        buffer->abortWaitRecv();
      }
    }
    // Peers waiting on this rank see its connections close.
    Guard("abort", [this] {
      context_->closeConnections();
      return absl::OkStatus();
    }).IgnoreError();
  }

 private:
  std::unique_ptr<UnboundBuffer> Buffer(float* data, size_t count) {
    // Gloo wants a real pointer even for an empty buffer.
    static float none = 0;
    return context_->createUnboundBuffer(count > 0 ? data : &none,
                                         count * sizeof(float));
  }

  // Waits for one send or recv on `buffer` to complete; Abort ends the
  // wait. Gloo throws on a timeout or a closed peer (Guard catches it).
  absl::Status WaitFor(UnboundBuffer& buffer, bool send, absl::Time deadline) {
    {
      absl::MutexLock lock(&mu_);
      if (aborted_) return absl::AbortedError("communicator aborted");
      waiting_.insert(&buffer);
    }
    struct Unregister {
      GlooCommunicator* self;
      UnboundBuffer* buffer;
      ~Unregister() {
        absl::MutexLock lock(&self->mu_);
        self->waiting_.erase(buffer);
      }
    } unregister{this, &buffer};
    const bool done = send ? buffer.waitSend(Remaining(deadline))
                           : buffer.waitRecv(Remaining(deadline));
    if (!done) return absl::AbortedError("communicator aborted");
    return absl::OkStatus();
  }

  // Sends `out_count` elements of `from` from element `from_offset` to the
  // next rank while receiving `in_count` from the previous one into `into`
  // from element `into_offset`, and waits for both. Both go in segments of
  // kSegment elements, all posted at once, so the wire stays busy while
  // `arrived(first, count)` handles each segment received (a reduction
  // overlaps the transfer of the segments after it).
  absl::Status RingStep(
      UnboundBuffer& from, size_t from_offset, size_t out_count,
      UnboundBuffer& into, size_t into_offset, size_t in_count, uint64_t slot,
      absl::Time deadline,
      const std::function<void(size_t, size_t)>& arrived = nullptr) {
    constexpr size_t kSegment = 256 * 1024;  // 1 MiB: Gloo's own segment
    const int next = (rank() + 1) % size(),
              prev = (rank() + size() - 1) % size();
    for (size_t at = 0; at < in_count; at += kSegment) {
      into.recv(prev, slot, (into_offset + at) * sizeof(float),
                std::min(kSegment, in_count - at) * sizeof(float));
    }
    size_t sends = 0;
    for (size_t at = 0; at < out_count; at += kSegment, ++sends) {
      from.send(next, slot, (from_offset + at) * sizeof(float),
                std::min(kSegment, out_count - at) * sizeof(float));
    }
    // Segments on one pair and slot complete in the order posted.
    for (size_t at = 0; at < in_count; at += kSegment) {
      STRATA_RETURN_IF_ERROR(WaitFor(into, false, deadline));
      if (arrived) arrived(at, std::min(kSegment, in_count - at));
    }
    for (size_t i = 0; i < sends; ++i) {
      STRATA_RETURN_IF_ERROR(WaitFor(from, true, deadline));
    }
    return absl::OkStatus();
  }

  int Block(int b) const { return ((b % size()) + size()) % size(); }

  // Step s (of size-1): send the running reduction of block r-1-s to rank
  // r+1 (at step 0, this rank's own values), receive block r-2-s from rank
  // r-1 and reduce it with this rank's values of that block into the next
  // running reduction. After the last step, `out` holds every rank's
  // reduction of block r. Running reductions alternate between two
  // block-sized halves of a scratch buffer, so `in` is never copied whole.
  absl::Status ReduceScatterRing(const float* in,
                                 const std::vector<size_t>& offsets,
                                 ReduceOp op, float* out, absl::Time deadline) {
    size_t largest = 1;
    for (int q = 0; q < size(); ++q) {
      largest = std::max(largest, offsets[q + 1] - offsets[q]);
    }
    if (incoming_.size() < largest) incoming_.resize(largest);
    if (sums_.size() < 2 * largest) sums_.resize(2 * largest);
    auto input = Buffer(const_cast<float*>(in), offsets[size()]);  // sent only
    auto into = Buffer(incoming_.data(), largest);
    auto sums = Buffer(sums_.data(), 2 * largest);
    const uint64_t slot = context_->nextSlot();
    for (int s = 0; s < size() - 1; ++s) {
      const int out_block = Block(rank() - 1 - s),
                in_block = Block(rank() - 2 - s);
      const size_t out_count = offsets[out_block + 1] - offsets[out_block];
      const size_t in_count = offsets[in_block + 1] - offsets[in_block];
      UnboundBuffer& from = s == 0 ? *input : *sums;
      const size_t from_offset =
          s == 0 ? offsets[out_block] : ((s - 1) % 2) * largest;
      float* acc = s == size() - 2 ? out : sums_.data() + (s % 2) * largest;
      const float* mine = in + offsets[in_block];
      STRATA_RETURN_IF_ERROR(
          RingStep(from, from_offset, out_count, *into, 0, in_count, slot,
                   deadline, [&](size_t first, size_t count) {
                     ReduceTo(op, acc + first, mine + first,
                              incoming_.data() + first, count);
                   }));
    }
    return absl::OkStatus();
  }

  // Step s: send block r-s (ours, or the one that just arrived) to rank
  // r+1 and receive block r-1-s from rank r-1 in place.
  absl::Status AllGatherRing(UnboundBuffer& buffer,
                             const std::vector<size_t>& offsets,
                             absl::Time deadline) {
    const uint64_t slot = context_->nextSlot();
    for (int s = 0; s < size() - 1; ++s) {
      const int out = Block(rank() - s), in = Block(rank() - 1 - s);
      STRATA_RETURN_IF_ERROR(RingStep(
          buffer, offsets[out], offsets[out + 1] - offsets[out], buffer,
          offsets[in], offsets[in + 1] - offsets[in], slot, deadline));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<Work> StartPeer(float* data, size_t count, int peer,
                                  uint32_t tag, absl::Time deadline,
                                  bool send) {
    const char* what = send ? "send" : "recv";
    std::shared_ptr<UnboundBuffer> buffer;
    absl::Status started = Guard(what, [&] {
      buffer = Buffer(data, count);
      if (send) {
        buffer->send(peer, kPeerSlotBase | tag);
      } else {
        buffer->recv(peer, kPeerSlotBase | tag);
      }
      return absl::OkStatus();
    });
    if (!started.ok()) return Work::Finished(Fail(started));
    return Work::CompletedBy([this, buffer, deadline, send, what] {
      return Fail(
          Guard(what, [&] { return WaitFor(*buffer, send, deadline); }));
    });
  }

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  // Scratch of the collectives (running reductions, segments received),
  // reused between calls: the operation thread's only.
  std::vector<float> sums_, incoming_;
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  // Buffers some thread waits on now: what Abort wakes.
  absl::flat_hash_set<UnboundBuffer*> waiting_ ABSL_GUARDED_BY(mu_);
};

// The numeric address `hostname` resolves to that this host can listen on.
// Checked here because Gloo's device crashes on a name that does not
// resolve to a bindable address.
absl::StatusOr<std::string> LocalAddress(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int err = getaddrinfo(hostname.c_str(), nullptr, &hints, &found);
  if (err != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", hostname, ": ", gai_strerror(err)));
  }
  std::string bindable;
  for (addrinfo* a = found; a != nullptr && bindable.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw =
          a->ai_family == AF_INET
              ? static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
              : static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      if (inet_ntop(a->ai_family, raw, text, sizeof(text)) != nullptr) {
        bindable = text;
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (bindable.empty()) {
    return absl::UnavailableError(absl::StrCat(
        hostname, " is not an address of this host (cannot listen on it)"));
  }
  return bindable;
}

// Gloo's TCP transport writes with writev, which raises SIGPIPE on a
// connection the peer has closed; its default action ends the process. A
// peer that dies must fail the collective (EPIPE, then UNAVAILABLE), not
// kill the ranks that survive it: the process ignores SIGPIPE from the
// first group on, unless something already installed a handler.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(
    const GlooOptions& options, gloo::rendezvous::Store& store) {
  IgnoreSigpipe();
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is not in a group of ", options.size));
  }
  absl::StatusOr<std::string> address = LocalAddress(options.hostname);
  if (!address.ok()) return address.status();
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = Guard("connect", [&]() -> absl::Status {
    gloo::transport::tcp::attr attr;
    attr.hostname = *address;
    device = gloo::transport::tcp::CreateDevice(attr);
    context =
        std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(std::chrono::milliseconds(
        absl::ToInt64Milliseconds(options.connect_timeout)));
    context->connectFullMesh(store, device);
    context->setTimeout(std::chrono::milliseconds(
        absl::ToInt64Milliseconds(options.comm.timeout)));
    return absl::OkStatus();
  });
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("forming a group of ", options.size,
                                     " as rank ", options.rank, " at ",
                                     options.hostname, ": ", status.message()));
  }
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(options, std::move(device), std::move(context)));
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeLocalGlooGroup(
    int ranks) {
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<Communicator>> comms(ranks);
  std::vector<absl::Status> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = ranks;
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          ConnectGloo(options, store);
      if (comm.ok()) {
        comms[r] = *std::move(comm);
      } else {
        errors[r] = comm.status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& e : errors) STRATA_RETURN_IF_ERROR(e);
  return comms;
}

}  // namespace strata

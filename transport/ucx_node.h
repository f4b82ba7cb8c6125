// The bulk data plane's transport: one UCX worker per process (Debian's
// libucx: TCP, and RDMA verbs where the NIC has them), with a thread that
// progresses it, endpoints to other processes' workers, and tagged sends
// and receives of whole payloads into and out of the caller's buffers.
//
// gRPC carries everything else: a process learns a peer's worker address
// in a gRPC call (AttachBulk in ps.proto), and each push or pull that moves
// its payload here names the payload's tag in its gRPC request. A tag's
// high 32 bits name the session that sent it, its low 32 bits the payload.
#ifndef STRATA_TRANSPORT_UCX_NODE_H_
#define STRATA_TRANSPORT_UCX_NODE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace strata {

class UcxEndpoint;
class UcxTransfer;

// Thread-safe. Held by shared_ptr: its endpoints and transfers keep it
// alive, so its worker outlives everything posted on it.
class UcxNode : public std::enable_shared_from_this<UcxNode> {
 public:
  struct Options {
    // UCX's transports (its UCX_TLS setting, e.g. "tcp"); empty: UCX's
    // choice, which the UCX_TLS environment variable sets. Benchmarks and
    // tests hold UCX to TCP on one host, where it would otherwise pick
    // shared memory.
    std::string transports;
  };
  // UNAVAILABLE when UCX cannot start here (no usable transport).
  static absl::StatusOr<std::shared_ptr<UcxNode>> Create(
      const Options& options);
  ~UcxNode();
  UcxNode(const UcxNode&) = delete;
  UcxNode& operator=(const UcxNode&) = delete;

  // This worker's address, as a peer's Connect takes it.
  const std::string& address() const { return address_; }

  // An endpoint to the worker at `address` (a peer's address()). Its
  // operations fail, rather than hang, once the peer is gone.
  absl::StatusOr<std::shared_ptr<UcxEndpoint>> Connect(
      absl::string_view address);

  // Receives the message tagged `tag` into `buffer`, which must hold
  // exactly `bytes` (a longer or shorter message fails the transfer). The
  // buffer must stay valid until the transfer is done or aborted.
  std::unique_ptr<UcxTransfer> Receive(void* buffer, size_t bytes,
                                       uint64_t tag);

  // Receives and drops the messages that arrived with no receive posted
  // for them and whose tag's high 32 bits are `session`, giving each up
  // to `limit` (one still arriving then is left to finish on its own,
  // Bury); returns how many. For a session that ended: its peer's sends
  // of payloads whose requests never came.
  int DropUnmatched(uint32_t session, absl::Duration limit);

  // Aborts `transfer` (UcxTransfer::Abort with `limit`) and, if UCX has
  // not let go of it by then (a receive already matched to a payload
  // that is still arriving), keeps it and `keep` (what owns its buffer)
  // until it ends, so that neither is freed under UCX.
  void Bury(std::unique_ptr<UcxTransfer> transfer, std::shared_ptr<void> keep,
            absl::Duration limit);

 private:
  friend class UcxEndpoint;
  friend class UcxTransfer;
  UcxNode() = default;
  void ProgressLoop();
  // Runs `command` on the progress thread, after the commands posted
  // before it: Post returns at once, Call once it ran. Only that thread
  // touches the UCX worker, so it needs no lock (UCX's multi-threaded
  // mode spun on its worker lock: a thread posting a send burnt a core
  // while the progress thread moved bytes).
  void Post(std::function<void()> command);
  void Call(std::function<void()> command);
  bool OnProgressThread() const;

  void* context_ = nullptr;  // ucp_context_h
  void* worker_ = nullptr;   // ucp_worker_h
  int event_fd_ = -1;
  std::string address_;
  std::thread progress_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void()>> commands_ ABSL_GUARDED_BY(mu_);
  // One per endpoint ever connected, for UCX's error callbacks (which can
  // outlive the endpoint object); on the progress thread only, kept as
  // long as the worker.
  std::deque<std::atomic<bool>> error_flags_;
  // Bury's: on the progress thread only, freed as they end.
  std::vector<std::pair<std::unique_ptr<UcxTransfer>, std::shared_ptr<void>>>
      buried_;
};

// An endpoint to one peer's worker. Thread-safe.
class UcxEndpoint : public std::enable_shared_from_this<UcxEndpoint> {
 public:
  ~UcxEndpoint();  // Close()

  // Sends `bytes` of `buffer` tagged `tag`. The buffer must stay valid
  // and unchanged until the transfer is done, or until Close(). On an
  // endpoint that has failed() the transfer is done at once, UNAVAILABLE.
  std::unique_ptr<UcxTransfer> Send(const void* buffer, size_t bytes,
                                    uint64_t tag);
  // Ends every send under way on this endpoint (they fail with CANCELLED)
  // and fails later ones; returns once UCX has closed it (a second call
  // returns at once). Each send ends as UCX purges it: wait for it.
  void Close();
  // The peer went away or the connection broke: sends fail.
  bool failed() const;

 private:
  friend class UcxNode;
  UcxEndpoint(std::shared_ptr<UcxNode> node, void* ep)
      : node_(std::move(node)), ep_(ep) {}
  friend struct UcxCallbacks;

  std::shared_ptr<UcxNode> node_;
  void* ep_;  // ucp_ep_h; null once closed. On the progress thread only.
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Set by UCX's error callback, which may come after this endpoint is
  // gone: the flag lives in the node (UcxNode::error_flags_).
  std::atomic<bool>* failed_ = nullptr;
};

// One send or receive under way. Not thread-safe, but for Wait and done
// alongside the UCX thread that completes it.
class UcxTransfer {
 public:
  // An unfinished transfer is aborted (Abort) first, waiting for as long
  // as UCX takes: use UcxNode::Bury where that may be long.
  ~UcxTransfer();
  UcxTransfer(const UcxTransfer&) = delete;
  UcxTransfer& operator=(const UcxTransfer&) = delete;

  // Waits until the transfer ended or `deadline`: its status, or
  // DEADLINE_EXCEEDED while it still runs.
  absl::Status Wait(absl::Time deadline);
  bool done() const;
  // Ends the transfer and returns whether UCX no longer touches its
  // buffer, waiting up to `limit` for that: a receive is cancelled (one
  // already matched to a payload that is arriving cannot be, and ends
  // when the payload has come or its peer is found gone); a send closes
  // its endpoint (UCX cannot take back one send alone), which ends that
  // endpoint's other sends too.
  bool Abort(absl::Duration limit = absl::InfiniteDuration());
  // A receive's cancel alone, without waiting: one still waiting for its
  // message ends CANCELLED. The caller keeps the transfer alive until
  // this returns.
  void CancelReceive();

 private:
  friend class UcxNode;
  friend class UcxEndpoint;
  UcxTransfer(std::shared_ptr<UcxNode> node,
              std::shared_ptr<UcxEndpoint> endpoint, size_t bytes)
      : node_(std::move(node)), endpoint_(std::move(endpoint)), bytes_(bytes) {}
  // Takes what the post returned (a request, an error or null: done).
  void Posted(void* status_ptr);
  void Finish(absl::Status status);
  friend struct UcxCallbacks;

  std::shared_ptr<UcxNode> node_;
  std::shared_ptr<UcxEndpoint> endpoint_;  // sends only
  const size_t bytes_;
  mutable absl::Mutex mu_;
  void* request_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_TRANSPORT_UCX_NODE_H_

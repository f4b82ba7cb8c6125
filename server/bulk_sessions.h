// The bulk data plane's sessions on a server (AttachBulk in ps.proto): one
// per member, each an endpoint of the server's UCX worker to the member's
// (transport/ucx_node.h). A push names the tag its gradient was sent with
// and the server receives it; a pull names the tag of the receive its
// caller posted and the server sends the weights there before answering.
//
// A payload that does not arrive in time, or a send the member does not
// take, ends the session: its endpoint closes (so the member's own sends
// on it end), and the request fails UNAVAILABLE with the no-session
// message, so the member attaches again and retries.
#ifndef STRATA_SERVER_BULK_SESSIONS_H_
#define STRATA_SERVER_BULK_SESSIONS_H_

#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/v1/ps.pb.h"
#include "transport/bulk_cipher.h"
#include "transport/ucx_node.h"

namespace strata {

// Thread-safe.
class BulkSessions {
 public:
  // Starts UCX at the first Attach, with `options`; a failure to start
  // answers that Attach and every later one. With `encrypt`, each
  // session gets a key and its payloads are sealed
  // (transport/bulk_cipher.h).
  BulkSessions(UcxNode::Options options, bool encrypt,
               size_t max_sessions = 128)
      : options_(std::move(options)),
        encrypt_(encrypt),
        max_sessions_(max_sessions) {}
  // Offers no bulk plane: every Attach fails FAILED_PRECONDITION with
  // `why_not`.
  static std::unique_ptr<BulkSessions> Refusing(std::string why_not);
  ~BulkSessions();

  // Opens a session for req.member_id() (the caller checked it is a live
  // worker; one RetainOnly has dropped since is refused, UNAVAILABLE). A
  // member's new session replaces its old one.
  absl::StatusOr<v1::AttachBulkResponse> Attach(
      const v1::AttachBulkRequest& req);
  // Ends session `id`; false if it was not held.
  bool Detach(uint32_t id);
  // Ends the sessions of members not in `members` (sorted): they left.
  void RetainOnly(const std::vector<uint64_t>& members);

  // A push's payload that `ref` names, received into a new slice, waiting
  // until `deadline` for it. UNAVAILABLE ("no bulk session") for a
  // session this server does not hold for `member`; INVALID_ARGUMENT for a tag
  // outside the session or a size other than `expected`;
  // PERMISSION_DENIED for a sealed payload that does not open under the
  // session's key. `expected` counts the bytes on the plane; the slice
  // holds the payload.
  absl::StatusOr<grpc::Slice> Receive(const v1::BulkRef& ref, uint64_t member,
                                      size_t expected, absl::Time deadline);
  // Sends a pull's `weights` to the receive `ref` names, and returns once
  // the send is done (UCX no longer reads them; for a payload sent by
  // rendezvous, the member has it) or failed.
  absl::Status Send(const v1::BulkRef& ref, uint64_t member,
                    const grpc::Slice& weights, absl::Time deadline);
  size_t size() const;
  uint64_t attached() const;  // sessions attached since the start

 private:
  // A session's receives waiting for their payloads, which its end
  // cancels: a payload that will not come (its sender closed the link, or
  // the reaper dropped it) must not hold a handler for kBulkWait.
  struct Waiting {
    absl::Mutex mu;
    bool ended ABSL_GUARDED_BY(mu) = false;
    absl::flat_hash_set<UcxTransfer*> receives ABSL_GUARDED_BY(mu);
  };
  struct Session {
    uint64_t member = 0;
    std::shared_ptr<UcxEndpoint> endpoint;
    std::optional<BulkCipher> cipher;
    std::shared_ptr<Waiting> waiting = std::make_shared<Waiting>();
  };
  struct Ending {
    uint32_t id = 0;
    std::shared_ptr<UcxEndpoint> endpoint;  // null: only payloads to drop
    std::shared_ptr<Waiting> waiting;
  };
  absl::StatusOr<Session> Find(const v1::BulkRef& ref, uint64_t member) const;
  // Ends session `id` after a transfer in it failed with `why`: returns
  // the error the request gets.
  absl::Status Lose(uint32_t id, const absl::Status& why);
  // Hands a session to the reaper thread, which closes its endpoint and
  // drops its unclaimed payloads: that waits on UCX, so never on a
  // handler's or the view's time.
  void End(uint32_t id, Session session);
  void ReapLoop();

  // The node, started by the first Attach; an error if it could not start
  // or this server offers no bulk plane.
  absl::StatusOr<std::shared_ptr<UcxNode>> Node();

  const UcxNode::Options options_;
  const bool encrypt_;
  const size_t max_sessions_;
  absl::Mutex start_mu_;
  std::optional<absl::Status> start_error_ ABSL_GUARDED_BY(start_mu_);
  // Set once (under start_mu_), read by the transfers of sessions it made.
  std::shared_ptr<UcxNode> node_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint32_t> by_member_ ABSL_GUARDED_BY(mu_);
  std::optional<std::vector<uint64_t>> members_ ABSL_GUARDED_BY(mu_);
  uint64_t attached_ ABSL_GUARDED_BY(mu_) = 0;
  // Sessions ended, for the reaper (endpoint null: only unclaimed
  // payloads of a session not held to drop).
  std::vector<Ending> ending_ ABSL_GUARDED_BY(mu_);
  absl::CondVar ending_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;  // started with the node
};

}  // namespace strata

#endif  // STRATA_SERVER_BULK_SESSIONS_H_

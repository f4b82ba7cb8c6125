// The primary's side of a replicated shard slot (View.replicas > 1).
//
// Every request that changes a shard (RegisterChunks, Push, Commit, a
// Reduce's totals) is
// sent to each of the slot's backups before the primary applies it, and
// the primary answers only after every backup accepted it. So an update
// the primary acknowledged is on every live replica, and one it had not
// acknowledged when it died is retried by its worker at the promoted
// backup, where it applies once (pushes are idempotent per member and
// step: BspGate, AspGate). Forwarding first, not after the local apply,
// keeps the backups at least as far as anything the primary served or
// reported: a pull answered with an update, or a ledger report of it,
// never outlives the update on a primary's death.
//
// Which server is the primary follows the view alone: the slot's live
// server with the lowest member id (scheduler/membership.h). Forwarded
// requests carry the primary's member id (`forwarded_by`), and each server
// admits a change only from whom its own view allows (Admit): a primary
// takes workers' requests, a backup only its primary's. So a backup that
// has not yet seen the view promoting it sends a worker away (UNAVAILABLE:
// the client retries) instead of applying a push it would not forward, and
// a primary that lost its lease while still running cannot have its
// requests applied by the promoted backup. A backup that
// cannot be reached fails the request with UNAVAILABLE (the worker's
// client retries) until the scheduler drops it from the view at the end of
// its lease; then the primary goes on with the backups left (forwards to
// it still under way are cancelled). A server joining the slot
// (ShardSlot.joining) gets the forwards too once it installed the
// primary's state (AddJoiner, server/replica_catch_up.h), taken while no
// change was under way (WhilePaused). Private to server/.
#ifndef STRATA_SERVER_REPLICA_FORWARDER_H_
#define STRATA_SERVER_REPLICA_FORWARDER_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "security/tls.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ps.grpc.pb.h"

namespace strata {

class ReplicaForwarder {
 public:
  // `slot` is the server's shard slot; `security` dials the backups.
  ReplicaForwarder(int slot, std::shared_ptr<const Security> security,
                   absl::Duration timeout = absl::Seconds(30));

  // Follows `view`, in which this server is member `self`.
  void UpdateView(const v1::View& view, uint64_t self);

  // Whether this server applies a change `forwarded_by` sent (0: from a
  // worker): a worker's at a primary or in an unreplicated job (or before
  // any view), a forward from the primary of this server's view at a
  // backup. Else UNAVAILABLE, which the worker's client retries at the
  // primary of its view: a worker's request at a backup (the worker's view
  // is newer than ours, or older), a forward from a server that is not our
  // primary (it was replaced; its answer goes back to the worker).
  absl::Status Admit(uint64_t forwarded_by) const;

  // This server is its slot's primary in a job that wants more replicas
  // than the slot has: it must not create chunks the missing backups would
  // never get (RegisterChunks waits, UNAVAILABLE, until they join).
  bool missing_backups() const;

  // This server's member id in the current view, and whether it is its
  // slot's primary there.
  uint64_t self() const { return Self(); }
  bool primary() const;
  // The slot's primary in the current view (0 and "": none).
  uint64_t primary_id() const;
  std::string primary_address() const;
  // Whether the view lists this server among the slot's joining servers
  // (ShardSlot.joining): not yet caught up.
  bool self_joining() const;
  // A joiner that installed this primary's state (server/replica_catch_up.h)
  // gets every later change, as a backup does, while the view lists it as
  // joining or as a backup. UNAVAILABLE if this server is not the slot's
  // primary or the view no longer lists `member` as joining.
  absl::Status AddJoiner(uint64_t member);
  // The address the view gives joining `member` ("" if it lists none).
  std::string JoiningAddress(uint64_t member) const;
  // The rollback generation of the current view.
  uint64_t view_generation() const;

  // A call to `member` that ends (cancelled) when the view no longer lists
  // it as a backup or joining, or at CancelAll: a catch-up's state stream.
  void Track(uint64_t member, grpc::ClientContext* ctx);
  void Untrack(uint64_t member, grpc::ClientContext* ctx);
  // Cancels every call under way (the server is stopping).
  void CancelAll();

  // Changes (RegisterChunks, Push, Commit, Reduce) are forwarded and applied
  // inside a Change; WhilePaused runs `fn` while none is under way and none
  // begins (a catch-up's copy of the state, and its new target).
  class Change {
   public:
    explicit Change(ReplicaForwarder& f) : lock_(&f.hold_) {}

   private:
    absl::ReaderMutexLock lock_;
  };
  absl::Status WhilePaused(absl::FunctionRef<absl::Status()> fn);

  // Whether requests go to backups now (this server is a primary that has
  // some, or joiners it caught up).
  bool forwarding() const;

  // Each sends the request to every backup of the current view (none: OK
  // at once). UNAVAILABLE when a backup cannot be reached or does not
  // answer in time; otherwise a backup's error as it answered it.
  absl::Status Push(const grpc::ByteBuffer& original);
  absl::Status Commit(const v1::CommitRequest& original);
  // A Reduce that gives totals (phase > 0): the backups computed the same
  // partials from the same pushes, and apply the same update.
  absl::Status Reduce(const v1::ReduceRequest& original);
  absl::Status Register(const v1::RegisterChunksRequest& original);
  absl::Status Snapshot(const v1::SnapshotRequest& req);

  // Requests forwarded to backups since the start.
  uint64_t forwarded() const;

 private:
  struct Stubs {
    std::unique_ptr<v1::ParameterServer::Stub> typed;
    std::unique_ptr<grpc::GenericStub> generic;
  };
  struct Backup {
    uint64_t member_id = 0;
    std::string address;
    std::shared_ptr<Stubs> stubs;
  };

  // The backups of the view, then the joiners added since.
  std::vector<Backup> Backups() const;
  static bool Contains(const std::vector<Backup>& list, uint64_t member);
  uint64_t Self() const;
  std::shared_ptr<Stubs> StubsFor(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A backup's answer as the primary's: a transport failure is UNAVAILABLE
  // (the client retries), naming the backup.
  static absl::Status FromBackup(const Backup& b, const grpc::Status& s);
  // Sends `call` to every backup in turn (stopping at the first error
  // unless `every`), each with `timeout` (zero: the forwarder's); the
  // first error.
  template <typename Call>
  absl::Status Each(Call call, bool every = false,
                    absl::Duration timeout = absl::ZeroDuration());

  const int slot_;
  const std::shared_ptr<const Security> security_;
  const absl::Duration timeout_;
  absl::Mutex hold_;  // Change holds it shared, WhilePaused exclusive
  mutable absl::Mutex mu_;
  std::vector<Backup> backups_ ABSL_GUARDED_BY(mu_);
  // The view's joining servers, and those of them caught up from here.
  std::vector<Backup> joining_ ABSL_GUARDED_BY(mu_);
  std::vector<Backup> joined_ ABSL_GUARDED_BY(mu_);
  bool known_ ABSL_GUARDED_BY(mu_) = false;  // a replicated view was seen
  uint64_t self_ ABSL_GUARDED_BY(mu_) = 0;
  bool self_joining_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t primary_id_ ABSL_GUARDED_BY(mu_) = 0;  // the slot's, in the view
  std::string primary_address_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // CancelAll was called
  bool primary_ ABSL_GUARDED_BY(mu_) = false;
  bool missing_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<Stubs>> stubs_
      ABSL_GUARDED_BY(mu_);
  uint64_t forwarded_ ABSL_GUARDED_BY(mu_) = 0;
  // The forwards under way, by backup member id (cancelled when the view
  // drops it).
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<grpc::ClientContext*>>
      in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICA_FORWARDER_H_

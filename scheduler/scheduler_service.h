// The gRPC face of the scheduler: strata.v1.Scheduler handlers over a
// Membership and a KvStore. The only place in scheduler/ that sees
// grpc::Status. Private to scheduler/.
#ifndef STRATA_SCHEDULER_SCHEDULER_SERVICE_H_
#define STRATA_SCHEDULER_SCHEDULER_SERVICE_H_

#include "scheduler/kv_store.h"
#include "scheduler/membership.h"
#include "strata/v1/scheduler.grpc.pb.h"

namespace strata::scheduler_internal {

// Sync-API service. Blocking calls (WatchView, KvGet with a wait) poll their
// wait in short slices so that a cancelled call or a closed Membership /
// KvStore ends them promptly. Thread-safe; does not own its parts.
class SchedulerService final : public v1::Scheduler::Service {
 public:
  SchedulerService(Membership* membership, KvStore* kv)
      : membership_(membership), kv_(kv) {}

  grpc::Status Register(grpc::ServerContext* ctx,
                        const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx,
                         const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req,
                     v1::LeaveResponse* resp) override;
  grpc::Status GetView(grpc::ServerContext* ctx, const v1::GetViewRequest* req,
                       v1::View* resp) override;
  grpc::Status WatchView(grpc::ServerContext* ctx,
                         const v1::WatchViewRequest* req,
                         grpc::ServerWriter<v1::View>* writer) override;
  grpc::Status KvPut(grpc::ServerContext* ctx, const v1::KvPutRequest* req,
                     v1::KvPutResponse* resp) override;
  grpc::Status KvGet(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                     v1::KvGetResponse* resp) override;

 private:
  Membership* const membership_;
  KvStore* const kv_;
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_SCHEDULER_SERVICE_H_

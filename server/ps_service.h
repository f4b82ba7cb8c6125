// The parameter server's gRPC edge (strata.v1.ParameterServer): requests
// parsed and checked, handed to the shard, answered; pushes and pulls on
// the given pools, their payloads through shared memory, the bulk plane
// (`bulk`) or gRPC byte buffers without protobuf's copies; each answer counted
// in the server's metrics. Private to server/.
#ifndef STRATA_SERVER_PS_SERVICE_H_
#define STRATA_SERVER_PS_SERVICE_H_

#include <memory>

#include "common/metrics.h"
#include "common/thread_pool.h"
#include "security/tls.h"
#include "server/bulk_sessions.h"
#include "server/shard.h"
#include "server/shm_sessions.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace strata {

class ParameterServer;
class ReplicaCatchUp;
class ReplicaForwarder;

// None of the pointers is owned; each must outlive the service. `owner`
// takes snapshots (the Snapshot RPC); `replicas` sends what changes the
// shard to the slot's backups first; `catch_up` serves and installs a
// joining replica's state; the series go to `metrics`;
// `security` says who may call what:
//   Push, RegisterChunks, Commit                    workers, servers (a
//                                                   primary forwarding)
//   Pull, AttachShm, DetachShm, AttachBulk,         workers
//   DetachBulk
//   Snapshot                                        workers, clients,
//                                                   servers (a primary)
//   CatchUp, InstallState                           servers
//   Stats                                           any role
std::unique_ptr<grpc::Service> NewParameterServerService(
    Shard* shard, ShmSessions* shm, BulkSessions* bulk, ParameterServer* owner,
    ReplicaForwarder* replicas, ReplicaCatchUp* catch_up, ThreadPool* push_pool,
    ThreadPool* pull_pool, Metrics* metrics, const Security* security);

}  // namespace strata

#endif  // STRATA_SERVER_PS_SERVICE_H_

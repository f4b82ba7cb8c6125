// A client's shared-memory payload path to one server on its host: a sealed
// region (common/shm_region.h) attached at the server, cut into slots of one
// chunk's payload each. A push's gradient is written into a slot and the
// request names it (PushRequest.shm); a pull names a slot the server writes
// the weights into. gRPC still carries every request and response.
#ifndef STRATA_CLIENT_SHM_LINK_H_
#define STRATA_CLIENT_SHM_LINK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shm_region.h"
#include "strata/v1/ps.grpc.pb.h"

namespace strata {

// Whether an attach that failed with `status` may work if tried again:
// the server was unreachable (UNAVAILABLE, also its answer while it waits
// to learn the caller's view) or did not answer within the attach's
// deadline (DEADLINE_EXCEEDED: a server catching up on a view, as after a
// restart and a rollback, may wait longer than the client's 2 s). Other
// errors (another host, another PID namespace, no memfd, no room for a
// session) hold for the run, and the client sends that server's payloads
// in messages.
bool ShmAttachMayWorkLater(const absl::Status& status);

// Attaches `region` at the server behind `stub` (AttachShm, as member
// `member_id` of view `epoch`; `tensors`: as the caller's tensor region)
// and returns the session that names it. AttachShm's errors (ps.proto)
// when the server is on another host or cannot open it.
absl::StatusOr<uint64_t> AttachRegion(v1::ParameterServer::Stub* stub,
                                      uint64_t member_id, uint64_t epoch,
                                      const ShmRegion& region, bool tensors);

// Asks the server behind `stub` to end session `session` (DetachShm): once
// this returns OK, the server no longer touches that session's region.
// Errors as AttachRegion's, and UNIMPLEMENTED from a server without it.
absl::Status DetachRegion(v1::ParameterServer::Stub* stub, uint64_t member_id,
                          uint64_t session);

// Thread-safe.
class ShmLink {
 public:
  // Makes a region of `slots` slots of `slot_bytes` and attaches it at the
  // server behind `stub` (AttachShm, as member `member_id` of view `epoch`):
  // AttachShm's errors (ps.proto) when the server is on another host or
  // cannot open it.
  static absl::StatusOr<std::shared_ptr<ShmLink>> Attach(
      v1::ParameterServer::Stub* stub, uint64_t member_id, uint64_t epoch,
      size_t slot_bytes, int slots);

  struct Slot {
    int index = -1;
    char* data = nullptr;
    v1::ShmRef ref;  // the slot's bytes, as requests name them
  };
  // A free slot, or nullopt when every slot is busy or retired.
  std::optional<Slot> Acquire();
  // The server has finished with the slot: it may be reused.
  void Release(int index);
  // The slot's call ended without an answer from the server, which may
  // still touch it: it is never reused, so a late access cannot meet
  // another payload. Returns true once the link should be replaced: as many
  // slots are retired as there are spares, or all of them where the link
  // has no more than that. (A call that ends hands its slot back after the
  // next call has taken one, so a full pipeline uses a spare: with fewer,
  // some calls would go in messages for the rest of the run.)
  bool Retire();
  // Slots beyond one per call on the wire.
  static constexpr int kSpareSlots = 2;
  // A slot's size for payloads of up to `bytes`: whole pages, so that each
  // payload starts aligned.
  static size_t SlotBytes(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  ShmLink(std::unique_ptr<ShmRegion> region, uint64_t session,
          size_t slot_bytes, int slots);
  std::unique_ptr<ShmRegion> region_;
  const uint64_t session_;
  const size_t slot_bytes_;
  absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
  int retired_ ABSL_GUARDED_BY(mu_) = 0;
  const int slots_;
};

}  // namespace strata

#endif  // STRATA_CLIENT_SHM_LINK_H_

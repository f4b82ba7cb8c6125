#include "client/shm_link.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

absl::StatusOr<std::shared_ptr<ShmLink>> ShmLink::Attach(
    v1::ParameterServer::Stub* stub, uint64_t member_id, uint64_t epoch,
    size_t slot_bytes, int slots) {
  if (slots < 1 || slot_bytes == 0)
    return absl::InvalidArgumentError("a shared-memory link needs slots");
  slot_bytes = SlotBytes(slot_bytes);
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<ShmRegion> region,
      ShmRegion::Create(ShmRegion::kHeaderBytes + slot_bytes * slots));
  STRATA_ASSIGN_OR_RETURN(
      uint64_t session,
      AttachRegion(stub, member_id, epoch, *region, /*tensors=*/false));
  return std::shared_ptr<ShmLink>(
      new ShmLink(std::move(region), session, slot_bytes, slots));
}

bool ShmAttachMayWorkLater(const absl::Status& status) {
  return IsRetryable(status) || absl::IsDeadlineExceeded(status);
}

absl::StatusOr<uint64_t> AttachRegion(v1::ParameterServer::Stub* stub,
                                      uint64_t member_id, uint64_t epoch,
                                      const ShmRegion& region, bool tensors) {
  v1::AttachShmRequest req;
  req.set_member_id(member_id);
  req.set_pid(getpid());
  req.set_fd(region.fd());
  req.set_size(region.size());
  req.set_nonce(region.nonce());
  req.set_epoch(epoch);
  req.set_tensors(tensors);
  grpc::ClientContext ctx;
  // Short: the client's timer thread waits for it.
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  v1::AttachShmResponse resp;
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub->AttachShm(&ctx, req, &resp)));
  return resp.session();
}

absl::Status DetachRegion(v1::ParameterServer::Stub* stub, uint64_t member_id,
                          uint64_t session) {
  v1::DetachShmRequest req;
  req.set_member_id(member_id);
  req.set_session(session);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  v1::DetachShmResponse resp;
  return FromGrpcStatus(stub->DetachShm(&ctx, req, &resp));
}

ShmLink::ShmLink(std::unique_ptr<ShmRegion> region, uint64_t session,
                 size_t slot_bytes, int slots)
    : region_(std::move(region)),
      session_(session),
      slot_bytes_(slot_bytes),
      slots_(slots) {
  for (int i = slots - 1; i >= 0; --i) free_.push_back(i);
}

std::optional<ShmLink::Slot> ShmLink::Acquire() {
  int index;
  {
    absl::MutexLock lock(&mu_);
    if (free_.empty()) return std::nullopt;
    index = free_.back();
    free_.pop_back();
  }
  Slot s;
  s.index = index;
  const uint64_t offset = ShmRegion::kHeaderBytes + index * slot_bytes_;
  s.data = region_->data() + offset;
  s.ref.set_session(session_);
  s.ref.set_offset(offset);
  s.ref.set_size(slot_bytes_);
  return s;
}

void ShmLink::Release(int index) {
  absl::MutexLock lock(&mu_);
  free_.push_back(index);
}

bool ShmLink::Retire() {
  absl::MutexLock lock(&mu_);
  return ++retired_ >= std::min(kSpareSlots, slots_);
}

}  // namespace strata

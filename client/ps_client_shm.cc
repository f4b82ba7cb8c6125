// The client's shared-memory path for payloads (PsClientOptions::
// shared_memory): a region of slots per co-located server
// (client/shm_link.h), a slot taken per call that fits, given back or
// retired when the call ends; and the caller's tensor region
// (PsClient::ShareTensors) attached at each of those servers, which pulls
// write in place; a session of it that a call without an answer named is
// detached (DetachShm) before the call completes or the region is used
// with that server again. The rest of PsClient::Impl is in
// ps_client_impl.cc.
#include <algorithm>
#include <memory>
#include <optional>

#include "client/ps_client_impl.h"
#include "cluster/scheduler_client.h"
#include "common/status.h"
#include "common/wire.h"
#include "spdlog/spdlog.h"

namespace strata {

using ps_client_internal::OpPtr;
using ps_client_internal::TensorSession;

void PsClient::Impl::AttachShm() {
  if (plan_.chunks.empty()) return;
  absl::MutexLock attach_lock(&attach_mu_);  // one attach at a time
  if (!options_.shared_memory) {
    AttachBulk();
    return;
  }
  if (tensors_ != nullptr) {
    const bool left = DetachUnanswered();
    ReleaseParked();
    if (left) {
      absl::MutexLock lock(&mu_);
      detach_retry_ = absl::Now() + absl::Milliseconds(250);
    }
  }
  uint64_t largest = 0;  // fp32 bytes of the largest chunk
  for (const ChunkInfo& c : plan_.chunks)
    largest = std::max<uint64_t>(largest, c.numel * 4);
  // A slot per call on the wire, and spares for slots lost calls retired;
  // slots are whole pages, and the region with its header stays within
  // both the budget and what a server maps.
  const uint64_t slot_bytes = ShmLink::SlotBytes(largest);
  const uint64_t budget =
      std::min<uint64_t>(options_.shm_bytes_per_server,
                         ShmRegion::kMaxBytes - ShmRegion::kHeaderBytes);
  const int slots = static_cast<int>(std::min<uint64_t>(
      options_.max_in_flight_per_server + ShmLink::kSpareSlots,
      budget / slot_bytes));
  for (int slot = 0; slot < num_slots_; ++slot) {
    absl::StatusOr<Stubs*> stubs = StubsForSlot(slot);
    if (!stubs.ok()) continue;
    {
      absl::MutexLock lock(&stub_mu_);
      if ((*stubs)->shm || (*stubs)->shm_refused) continue;
    }
    absl::StatusOr<std::shared_ptr<ShmLink>> link =
        slots < 1
            ? absl::ResourceExhaustedError("chunks over the budget")
            : ShmLink::Attach((*stubs)->typed.get(), scheduler_->member_id(),
                              scheduler_->view().epoch(), largest, slots);
    absl::MutexLock lock(&stub_mu_);
    if (link.ok()) {
      (*stubs)->shm = *std::move(link);
    } else if (!ShmAttachMayWorkLater(link.status())) {
      // Another host, another PID namespace, or no memfd: plain messages.
      (*stubs)->shm_refused = true;
    }
  }
  AttachBulk();
  if (tensors_ == nullptr) return;
  for (int slot = 0; slot < num_slots_; ++slot) {
    absl::StatusOr<Stubs*> stubs = StubsForSlot(slot);
    if (!stubs.ok()) continue;
    std::shared_ptr<TensorSession> session;
    {
      absl::MutexLock lock(&stub_mu_);
      session = (*stubs)->tensors;
      if (session->id != 0 || session->refused ||
          !session->undetached.empty()) {
        continue;
      }
    }
    absl::StatusOr<uint64_t> id =
        AttachRegion((*stubs)->typed.get(), scheduler_->member_id(),
                     scheduler_->view().epoch(), *tensors_, /*tensors=*/true);
    absl::MutexLock lock(&stub_mu_);
    if (id.ok()) {
      session->id = *id;
    } else if (!ShmAttachMayWorkLater(id.status())) {
      session->refused = true;
    }
  }
}

void PsClient::Impl::ShareTensors(std::shared_ptr<ShmRegion> region) {
  {
    absl::MutexLock lock(&attach_mu_);
    tensors_ = std::move(region);
  }
  if (options_.shared_memory && !plan_.chunks.empty()) AttachShm();
}

v1::DType PsClient::Impl::DtypeInShm(const OpState& op, v1::DType dtype,
                                     bool fp32_in_shm) {
  // The caller's choice of dtype holds everywhere.
  if (op.stamp.dtype) return *op.stamp.dtype;
  return fp32_in_shm && dtype == v1::DTYPE_BF16 ? v1::DTYPE_F32 : dtype;
}

bool PsClient::Impl::InRegion(const void* place, size_t bytes) const {
  if (tensors_ == nullptr || place == nullptr) return false;
  const char* base = tensors_->data();
  const char* at = static_cast<const char*>(place);
  return at >= base + ShmRegion::kHeaderBytes &&
         at <= base + tensors_->size() &&
         bytes <= static_cast<size_t>(base + tensors_->size() - at);
}

bool PsClient::Impl::InTensors(const OpPtr& op, Stubs* stubs, const void* place,
                               size_t bytes, v1::ShmRef* ref) {
  if (!InRegion(place, bytes)) return false;
  const char* at = static_cast<const char*>(place);
  {
    absl::MutexLock lock(&stub_mu_);
    const std::shared_ptr<TensorSession>& session = stubs->tensors;
    if (session->id != 0 && !session->refused) {
      op->tensors = session;
      op->tensors_id = session->id;
      ref->set_session(session->id);
      ref->set_offset(static_cast<uint64_t>(at - tensors_->data()));
      ref->set_size(bytes);
      return true;
    }
    if (session->refused) return false;
  }
  WantAttach();  // not attached yet
  return false;
}

void PsClient::Impl::WantAttach() {
  absl::MutexLock lock(&mu_);
  if (absl::Now() >= next_attach_) {
    attach_wanted_ = true;
    next_attach_ = absl::Now() + absl::Seconds(1);
  }
}

bool PsClient::Impl::TakePayloadPlace(const OpPtr& op, Stubs* stubs,
                                      bool fp32_in_shm, const void* place,
                                      v1::DType* dtype, v1::ShmRef* ref) {
  if (op->stamp.dtype) *dtype = *op->stamp.dtype;
  const v1::DType in_shm = DtypeInShm(*op, *dtype, fp32_in_shm);
  const size_t numel = plan_.chunks[op->chunk].numel;
  const size_t bytes = numel * ElementBytes(in_shm);
  if (in_shm != v1::DTYPE_BF16 && options_.shared_memory &&
      InTensors(op, stubs, place, bytes, ref)) {
    *dtype = in_shm;
    return true;
  }
  if (op->batched) {
    // No slot for a batched op: its payload goes in the message, in the
    // dtype a slot would carry, so a chunk's rounding does not depend on
    // whether it went alone.
    absl::MutexLock lock(&stub_mu_);
    if (options_.shared_memory && stubs->shm != nullptr) *dtype = in_shm;
    return false;
  }
  if (!TakeShmSlot(op, stubs, bytes)) return false;
  *dtype = in_shm;
  *ref = op->shm_slot.ref;
  ref->set_size(bytes);
  return true;
}

bool PsClient::Impl::TakeShmSlot(const OpPtr& op, Stubs* stubs, size_t bytes) {
  if (!options_.shared_memory || op->batched) return false;
  std::shared_ptr<ShmLink> link;
  bool refused;
  {
    absl::MutexLock lock(&stub_mu_);
    link = stubs->shm;
    refused = stubs->shm_refused;
  }
  if (!link && !refused) WantAttach();
  if (!link || bytes > link->slot_bytes()) return false;
  std::optional<ShmLink::Slot> slot = link->Acquire();
  if (!slot) return false;  // all busy: this call goes in the message
  op->shm = std::move(link);
  op->shm_slot = *slot;
  return true;
}

void PsClient::Impl::EndTensorAttempt(const OpPtr& op) {
  if (!op->tensors) return;
  {
    absl::MutexLock lock(&stub_mu_);
    TensorSession& session = *op->tensors;
    if (!op->answered) {
      // The server may still read or write these bytes: the session is
      // detached before anything uses the region with that server again,
      // and before this op completes.
      if (session.id == op->tensors_id) session.id = 0;
      const uint64_t id = op->tensors_id;
      if (std::none_of(session.undetached.begin(), session.undetached.end(),
                       [id](const auto& u) { return u.id == id; })) {
        session.undetached.push_back({id});
      }
      op->fence = op->tensors;
    } else if (op->shm_lost && session.id == op->tensors_id) {
      session.id = 0;  // the server lost it: attach again
    } else {
      op->tensors.reset();
      return;
    }
  }
  op->tensors.reset();
  absl::MutexLock lock(&mu_);
  attach_wanted_ = true;
}

bool PsClient::Impl::AwaitsDetach(const OpPtr& op) {
  if (!op->fence) return false;
  absl::MutexLock lock(&stub_mu_);
  return !op->fence->undetached.empty();
}

// How long a server that refuses connections is given to come back before
// its sessions count as detached: nobody listens at its address, so the
// process that held them (and every handler it ran) is gone. A server
// restarted meanwhile answers the detach itself.
constexpr absl::Duration kUnreachableGrace = absl::Seconds(5);

bool PsClient::Impl::DetachUnanswered() {
  std::vector<std::pair<Stubs*, std::vector<uint64_t>>> pending;
  {
    absl::MutexLock lock(&stub_mu_);
    for (auto& [address, stubs] : stubs_) {
      std::vector<uint64_t> ids;
      for (const auto& u : stubs->tensors->undetached) ids.push_back(u.id);
      if (!ids.empty()) pending.emplace_back(stubs.get(), std::move(ids));
    }
  }
  bool left = false;
  for (auto& [stubs, ids] : pending) {
    for (const uint64_t id : ids) {
      const absl::Status s =
          DetachRegion(stubs->typed.get(), scheduler_->member_id(), id);
      const absl::Time now = absl::Now();
      absl::MutexLock lock(&stub_mu_);
      TensorSession& session = *stubs->tensors;
      auto u =
          std::find_if(session.undetached.begin(), session.undetached.end(),
                       [id](const auto& u) { return u.id == id; });
      if (u == session.undetached.end()) continue;
      if (!s.ok()) {
        u->failing_since = std::min(u->failing_since, now);
        u->unreachable_since = absl::IsUnavailable(s)
                                   ? std::min(u->unreachable_since, now)
                                   : absl::InfiniteFuture();
      }
      bool done = s.ok() || now - u->unreachable_since >= kUnreachableGrace;
      if (!done && (!ShmAttachMayWorkLater(s) ||
                    now - u->failing_since >= options_.shm_detach_timeout)) {
        // An older server without DetachShm, or one whose detaches failed
        // for shm_detach_timeout: its late accesses cannot be ruled out,
        // and its payloads go through slots or messages for the rest of
        // the run. The ops waiting for it complete.
        spdlog::warn(
            "strata client: a server could not detach the tensor region's "
            "session {} ({}); not using the region with it again",
            id, s.ToString());
        session.refused = true;
        done = true;
      }
      if (done) {
        session.undetached.erase(u);
      } else {
        left = true;
      }
    }
  }
  return left;
}

void PsClient::Impl::ReleaseParked() {
  std::vector<Parked> parked;
  {
    absl::MutexLock lock(&mu_);
    parked.swap(parked_);
  }
  // Those still waiting park again.
  for (Parked& p : parked) Complete(p.op, std::move(p.status), &p.response);
}

void PsClient::Impl::EndShmAttempt(const OpPtr& op,
                                   const absl::Status& status) {
  EndTensorAttempt(op);
  if (!op->shm) return;
  bool replace = op->shm_lost;
  if (op->answered) {
    op->shm->Release(op->shm_slot.index);
  } else {
    // A late access may still come: the slot is retired. A lost connection
    // may mean a restarted server, which will not know the region.
    replace |= op->shm->Retire() || absl::IsUnavailable(status);
  }
  if (replace) {
    // A new region, once the server answers again.
    {
      absl::MutexLock lock(&stub_mu_);
      for (auto& [address, stubs] : stubs_) {
        if (stubs->shm == op->shm) stubs->shm.reset();
      }
    }
    absl::MutexLock lock(&mu_);
    attach_wanted_ = true;
  }
  op->shm.reset();
  op->shm_slot = ShmLink::Slot();
}

}  // namespace strata

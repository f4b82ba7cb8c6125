// The client's bulk data plane (PsClientOptions::wire): a link per server
// that shared memory does not reach (client/bulk_link.h), a payload put on
// it per push or pull that is large enough, and the end of its transfer
// when the call ends; and the path each slot's payloads take (WirePaths). The
// rest of PsClient::Impl is in ps_client_impl.cc and ps_client_shm.cc.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/ps_client_impl.h"
#include "cluster/scheduler_client.h"
#include "common/status.h"
#include "common/wire.h"
#include "spdlog/spdlog.h"

namespace strata {

using ps_client_internal::OpPtr;
using ps_client_internal::OpState;

namespace {

// How long a call answered OK waits for its transfer to end (the server
// took the push's payload or sent the pull's weights before it answered:
// only the last acknowledgement may still be under way), and a call
// answered with an error (the server took the payload first, unless the
// request never reached the handler).
constexpr absl::Duration kAnsweredGrace = absl::Seconds(10);
constexpr absl::Duration kRefusedGrace = absl::Seconds(1);
// How long an aborted transfer is waited for.
constexpr absl::Duration kAbortLimit = absl::Seconds(5);

}  // namespace

void PsClient::Impl::AttachBulk() {
  if (options_.wire == WireKind::kGrpc || plan_.chunks.empty()) return;
  // Sealed payloads wherever the channels are TLS (the server's key comes
  // over them), unless the fabric is trusted.
  const bool sealed = options_.security->tls() && !options_.bulk_insecure;
  if (ucx_ == nullptr) {
    if (!ucx_error_.ok()) return;
    UcxNode::Options ucx;
    ucx.transports = options_.ucx_transports;
    absl::StatusOr<std::shared_ptr<UcxNode>> node = UcxNode::Create(ucx);
    if (!node.ok()) {
      ucx_error_ = node.status();
      spdlog::warn(
          "strata client: the bulk plane could not start ({}); "
          "payloads go in messages",
          ucx_error_.ToString());
      return;
    }
    ucx_ = *std::move(node);
  }
  for (int slot = 0; slot < num_slots_; ++slot) {
    absl::StatusOr<Stubs*> stubs = StubsForSlot(slot);
    if (!stubs.ok()) continue;
    {
      absl::MutexLock lock(&stub_mu_);
      Stubs& s = **stubs;
      // Shared memory first where it works (or may work once the server
      // answers).
      const bool shm_reaches =
          options_.shared_memory && (s.shm || !s.shm_refused);
      if (shm_reaches || s.bulk || s.bulk_refused) continue;
    }
    absl::StatusOr<std::shared_ptr<BulkLink>> link =
        BulkLink::Attach((*stubs)->typed.get(), ucx_, scheduler_->member_id(),
                         scheduler_->view().epoch(), sealed);
    absl::MutexLock lock(&stub_mu_);
    if (link.ok()) {
      (*stubs)->bulk = *std::move(link);
    } else if (!ShmAttachMayWorkLater(link.status())) {
      (*stubs)->bulk_refused = true;
      (*stubs)->bulk_error = link.status().ToString();
      spdlog::info("strata client: shard slot {} without the bulk plane: {}",
                   slot, (*stubs)->bulk_error);
    }
  }
}

absl::Status PsClient::Impl::CheckWire() {
  if (options_.wire != WireKind::kUcx) return absl::OkStatus();
  if (!ucx_error_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--wire ucx: UCX could not start here: ", ucx_error_.message()));
  }
  for (int slot = 0; slot < num_slots_; ++slot) {
    STRATA_ASSIGN_OR_RETURN(Stubs * stubs, StubsForSlot(slot));
    absl::MutexLock lock(&stub_mu_);
    if (stubs->bulk || stubs->shm) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "--wire ucx: shard slot ", slot, " has no bulk plane: ",
        stubs->bulk_error.empty() ? "not attached" : stubs->bulk_error));
  }
  return absl::OkStatus();
}

v1::WirePaths PsClient::Impl::WirePaths() {
  // Whether any of a slot's chunks is large enough for the bulk plane.
  std::vector<bool> bulk_sized(num_slots_, false);
  for (const ChunkInfo& c : plan_.chunks) {
    if (c.shard >= 0 && c.shard < num_slots_ &&
        c.numel * sizeof(float) >= options_.bulk_min_bytes) {
      bulk_sized[c.shard] = true;
    }
  }
  std::vector<std::string> address(num_slots_);
  const v1::View view = scheduler_->view();
  for (const v1::ShardSlot& s : view.shard_map().slots()) {
    if (s.shard() >= 0 && s.shard() < num_slots_)
      address[s.shard()] = s.address();
  }
  v1::WirePaths paths;
  absl::MutexLock lock(&stub_mu_);
  for (int slot = 0; slot < num_slots_; ++slot) {
    auto it = stubs_.find(address[slot]);
    if (address[slot].empty() || it == stubs_.end()) {
      paths.set_grpc(paths.grpc() + 1);  // no server, or not reached yet
      continue;
    }
    const Stubs& s = *it->second;
    // The order PushMessage and PullMessage try them in.
    if (tensors_ != nullptr && s.tensors->id != 0 && !s.tensors->refused) {
      paths.set_region(paths.region() + 1);
    } else if (s.shm != nullptr) {
      paths.set_shm(paths.shm() + 1);
    } else if (bulk_sized[slot] && s.bulk != nullptr && !s.bulk->broken()) {
      paths.set_bulk(paths.bulk() + 1);
    } else {
      paths.set_grpc(paths.grpc() + 1);
    }
  }
  return paths;
}

bool PsClient::Impl::TakeBulk(const OpPtr& op, Stubs* stubs, void* data,
                              size_t bytes, v1::BulkRef* ref) {
  op->bulk_payload = false;
  // A batch's requests are not all handled when one is refused
  // (server/request_batch.h), and a bulk payload must be taken whatever
  // the answer: batched ops keep theirs in the message.
  if (options_.wire == WireKind::kGrpc || op->batched ||
      bytes < options_.bulk_min_bytes) {
    return false;
  }
  std::shared_ptr<BulkLink> link;
  {
    absl::MutexLock lock(&stub_mu_);
    link = stubs->bulk;
    if (link && link->broken()) {
      stubs->bulk.reset();
      link.reset();
    }
  }
  if (!link) {
    // Lost (its peer went, its tags ran out) or never attached: the timer
    // thread attaches one, unless this server refused the plane.
    bool refused;
    {
      absl::MutexLock lock(&stub_mu_);
      refused = stubs->bulk_refused;
    }
    if (!refused) WantAttach();
    return false;
  }
  if (op->kind == OpState::kPush) {
    absl::StatusOr<std::unique_ptr<UcxTransfer>> sent =
        link->Send(data, bytes, &op->sealed, ref);
    if (!sent.ok()) return false;  // in the message instead
    if (link->broken()) {
      // Closed meanwhile: the send fails, and a request naming it would
      // hold a server thread waiting for it.
      (*sent)->Abort();
      return false;
    }
    op->transfer = *std::move(sent);
  } else {
    op->transfer = link->Receive(data, bytes, &op->sealed, ref);
    op->bulk_ref = *ref;
    op->bulk_into = data;
  }
  op->bulk = std::move(link);
  op->bulk_payload = true;
  return true;
}

bool PsClient::Impl::TakeBulkPull(const OpPtr& op, Stubs* stubs,
                                  v1::DType dtype, v1::BulkRef* ref) {
  const size_t bytes = plan_.chunks[op->chunk].numel * ElementBytes(dtype);
  void* into = op->dst;
  if (dtype == v1::DTYPE_BF16) {
    op->bf16.resize(bytes);
    into = op->bf16.data();
  }
  return TakeBulk(op, stubs, into, bytes, ref);
}

absl::Status PsClient::Impl::EndBulkAttempt(const OpPtr& op,
                                            absl::Status status) {
  if (!op->transfer) return status;
  const bool pull = op->kind == OpState::kPull;
  absl::Duration grace = absl::ZeroDuration();
  if (op->answered && status.ok()) {
    grace = kAnsweredGrace;
  } else if (op->answered && !pull) {
    grace = kRefusedGrace;  // a pull refused sends nothing
  }
  absl::Status moved = op->transfer->Wait(absl::Now() + grace);
  // A push whose payload was not taken, or a pull answered OK whose
  // weights did not come: the link is not to be used again. (A pull the
  // server refused sends nothing: its receive is only cancelled.)
  bool broken = !moved.ok() && (!pull || (op->answered && status.ok()));
  if (!moved.ok() && !op->transfer->Abort(kAbortLimit)) {
    // A pull's receive already matched to weights still arriving: they
    // may land in the destination later, as a late pull into the tensor
    // region may (PsClient::ShareTensors). Kept until UCX ends it.
    spdlog::warn(
        "strata client: a pull's weights are still arriving on the "
        "bulk plane after its call ended");
    broken = true;
    std::shared_ptr<UcxNode> node = ucx_;
    node->Bury(std::move(op->transfer),
               std::make_shared<std::string>(std::move(op->sealed)),
               absl::ZeroDuration());
  }
  if (moved.ok() && pull && status.ok()) {
    moved = op->bulk->Opened(op->bulk_ref, op->sealed, op->bulk_into);
    if (!moved.ok()) {
      // Changed on the way: this link is not to be trusted again.
      spdlog::warn("strata client: {}", moved.ToString());
      broken = true;
    }
  }
  // The server does not know the session (it restarted, or ended it).
  if (absl::IsUnavailable(status) &&
      absl::StrContains(status.message(), "no bulk session")) {
    broken = true;
  }
  if (broken) {
    op->bulk->Break();
    absl::MutexLock lock(&stub_mu_);
    for (auto& [address, stubs] : stubs_) {
      if (stubs->bulk == op->bulk) stubs->bulk.reset();
    }
  }
  op->transfer.reset();
  op->bulk.reset();
  if (broken) WantAttach();
  if (status.ok() && pull && !moved.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the weights did not arrive on the bulk plane: ", moved.message()));
  }
  return status;
}

}  // namespace strata

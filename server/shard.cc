#include "server/shard.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "common/compress.h"
#include "common/status.h"
#include "common/wire.h"
#include "server/shard_parts.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

DeferredCommitsOptions CommitOrder(const ShardOptions& o) {
  DeferredCommitsOptions order;
  order.pull_order = o.spill == nullptr ||
                     o.spill->eviction() == SpillOptions::Eviction::kJustUsed;
  order.any_order = o.spill == nullptr;
  return order;
}

ChunkTableOptions TableOptions(const ShardOptions& o, TileCache* tiles) {
  ChunkTableOptions table;
  table.max_chunk_bytes = o.max_chunk_bytes;
  table.tile_budget = o.spill != nullptr ? o.spill->budget() : 0;
  table.admit = [tiles](Chunk& c) { return tiles->AdmitNew(c); };
  return table;
}

}  // namespace

Shard::Parts::Parts(const ShardOptions& o, ShardCounters& counters)
    : pool(/*capped=*/o.spill != nullptr),
      // (The tier is built next; the table calls it only at registration.)
      table(TableOptions(o, &tiles)),
      tiles(o.spill, table),
      membership(o, counters),
      snapshots(tiles, table),
      deferred(CommitOrder(o), pool, counters, failed),
      gates(GateParts{o, counters, pool, tiles, table, membership, applied,
                      snapshots, failed},
            o.consistency),
      mirrors(pool) {}

Shard::Shard(ShardOptions options)
    : options_(std::move(options)),
      p_(std::make_unique<Parts>(options_, counters_)) {}

Shard::~Shard() = default;

absl::StatusOr<v1::RegisterChunksResponse> Shard::Register(
    const v1::RegisterChunksRequest& req) {
  return p_->table.Register(req);
}

void Shard::UpdateView(const v1::View& v) {
  // One update at a time: a stale sweep must never undo a newer one.
  absl::MutexLock update_lock(&update_mu_);
  // A switch of the job's consistency (--consistency auto): every chunk
  // taken over by the new gate while the old one still serves, then the
  // new gate, then the view. So a retried push of a step before the switch
  // finds the clocks that make it one, and no request stamped with the new
  // view finds the old gate.
  if (v.epoch() >= p_->membership.Get().epoch) {
    p_->membership.SetScheduleOffset(v.schedule_offset());
  }
  if (v.epoch() > p_->membership.Get().epoch && !v.consistency().empty()) {
    if (absl::StatusOr<Consistency> to = ParseConsistency(v.consistency());
        to.ok() && to->ToString() != p_->gates.mode().ToString()) {
      AdoptChunks(ShardMembership::ViewOf(v), *to);
    }
  }
  if (!p_->membership.Publish(v)) return;
  Sweep();
}

void Shard::AdoptChunks(const ShardView& next, const Consistency& to) {
  const Consistency before = p_->gates.mode();
  ConsistencyGate& gate = p_->gates.Get(to);
  const bool reads = gate.AdoptReadsTile(before);
  for (Chunk* c : p_->table.All()) {
    if (reads) p_->tiles.BeforeUse(*c);
    {
      absl::MutexLock lock(&c->mu);
      gate.Adopt(*c, next, before);
      c->changed.SignalAll();
    }
    if (reads) p_->tiles.AfterUse(*c);
  }
  p_->gates.SwitchTo(to);
  spdlog::info("shard: switched from {} to {} at epoch {}", before.ToString(),
               to.ToString(), next.epoch);
}

void Shard::Sweep() {
  const ShardView now = p_->membership.Get();
  auto live = [&now](uint64_t id) { return now.IsLive(id); };
  // SSP/ASP: a worker that left mid-push is not reported; the ledger hands
  // its units out again.
  p_->applied.Forget(live);
  p_->deferred.Drop(live);
  p_->mirrors.Retain(live);
  for (Chunk* c : p_->table.All()) {
    absl::MutexLock lock(&c->mu);
    p_->gates.Current().Sweep(*c, now);
    c->changed.SignalAll();
  }
  // Steps closed above read their spilled tiles in: back within budget.
  p_->tiles.MakeRoom(0);
}

absl::Status Shard::AwaitWorker(uint64_t member, uint64_t epoch) {
  return p_->membership.AwaitWorker(member, epoch);
}

// The gate's epoch rule runs under the view's lock, with the view that
// found the member live.
absl::Status Shard::CheckMember(const v1::PushRequest& req) {
  return p_->membership.AwaitWorker(
      req.member_id(), req.epoch(), [&](const ShardView& view) {
        return p_->gates.Current().CheckPushEpoch(view, req);
      });
}

absl::Status Shard::DecodeGradient(const v1::PushRequest& req,
                                   size_t payload_bytes, PayloadReader read,
                                   uint64_t numel, std::vector<float>* out,
                                   bool* nonfinite) {
  if (req.dtype() == v1::DTYPE_ONEBIT || req.dtype() == v1::DTYPE_TOPK) {
    return DecodeCompressed(req, payload_bytes, read, numel, out, nonfinite);
  }
  if (req.dtype() != v1::DTYPE_F32 && req.dtype() != v1::DTYPE_BF16 &&
      req.dtype() != v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown gradient dtype ", req.dtype()));
  }
  const size_t want = numel * ElementBytes(req.dtype());
  if (payload_bytes != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", req.chunk_id(), " expects ", want,
                     " bytes of gradient, got ", payload_bytes));
  }
  // Copied and checked a block at a time: the check reads each block
  // while it is still in cache, rather than the whole gradient again.
  constexpr size_t kBlock = size_t{16} << 10;  // values: 64 KiB of fp32
  const bool bf16 = req.dtype() == v1::DTYPE_BF16;
  std::vector<uint16_t> raw(bf16 ? std::min(kBlock, numel) : 0);
  *out = p_->pool.Take(numel);
  float* dst = out->data();
  for (size_t begin = 0; begin < numel; begin += kBlock) {
    const size_t n = std::min(kBlock, numel - begin);
    absl::Status read_status;
    if (bf16) {
      read_status = read(reinterpret_cast<char*>(raw.data()), begin * 2, n * 2);
      if (read_status.ok()) Bf16ToFloat(raw.data(), dst + begin, n);
    } else {
      read_status =
          read(reinterpret_cast<char*>(dst + begin), begin * 4, n * 4);
    }
    if (!read_status.ok()) {
      p_->pool.Give(std::move(*out));
      return read_status;
    }
    if (!AllWithin(dst + begin, n, kMaxGradientMagnitude)) {
      counters_.rejected_nonfinite++;
      *nonfinite = true;
      p_->pool.Give(std::move(*out));
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient for chunk ", req.chunk_id(), " step ", req.step(),
          " has NaN, Inf or a value beyond +-1e19 (its square "
          "would overflow the optimizer's fp32 state); rejected"));
    }
  }
  return absl::OkStatus();
}

absl::Status Shard::DecodeCompressed(const v1::PushRequest& req,
                                     size_t payload_bytes, PayloadReader read,
                                     uint64_t numel, std::vector<float>* out,
                                     bool* nonfinite) {
  const bool onebit = req.dtype() == v1::DTYPE_ONEBIT;
  // Bounded by the chunk before anything is allocated.
  const size_t most = onebit ? OneBitBytes(numel) : 8 * numel;
  if (payload_bytes > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", req.chunk_id(), " takes at most ", most, " bytes of ",
        onebit ? "ONEBIT" : "TOPK", " gradient, got ", payload_bytes));
  }
  std::string bytes(payload_bytes, '\0');
  STRATA_RETURN_IF_ERROR(read(bytes.data(), 0, payload_bytes));
  *out = p_->pool.Take(numel);
  absl::Status decoded = onebit ? DecodeOneBit(bytes, numel, out->data())
                                : DecodeTopK(bytes, numel, out->data());
  if (decoded.ok() && !AllWithin(out->data(), numel, kMaxGradientMagnitude)) {
    counters_.rejected_nonfinite++;
    *nonfinite = true;
    decoded = absl::InvalidArgumentError(
        absl::StrCat("gradient for chunk ", req.chunk_id(), " step ",
                     req.step(), " has a value beyond +-1e19; rejected"));
  }
  if (!decoded.ok()) p_->pool.Give(std::move(*out));
  return decoded;
}

absl::Status Shard::CheckZeroPush(const v1::PushRequest& req,
                                  size_t payload_bytes) {
  if (payload_bytes > 0 || req.has_shm() || req.has_bulk()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a zero push of chunk ", req.chunk_id(), " carries a payload (",
        payload_bytes, " bytes): it says the gradient is zero"));
  }
  if (req.whole_step()) {
    return absl::InvalidArgumentError(
        "a whole-step push (all-reduce sync) cannot be a zero push");
  }
  counters_.pushes_zero++;
  return absl::OkStatus();
}

absl::StatusOr<v1::PushResponse> Shard::Push(const v1::PushRequest& req,
                                             absl::string_view data) {
  return Push(req, data.size(), [&data](char* dst, size_t begin, size_t n) {
    std::memcpy(dst, data.data() + begin, n);
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::PushResponse> Shard::Push(const v1::PushRequest& req,
                                             size_t payload_bytes,
                                             PayloadReader read) {
  counters_.bytes_in += payload_bytes;
  bool nonfinite = false;
  auto result = [&]() -> absl::StatusOr<v1::PushResponse> {
    STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(req.chunk_id()));
    if (req.num_samples() == 0)
      return absl::InvalidArgumentError("push with num_samples == 0");
    if (req.step() < 0)
      return absl::InvalidArgumentError("push with a negative step");
    // Written as "not in range", so that NaN fails too.
    if (!(req.async_lr_scale() >= 0 && req.async_lr_scale() <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("push with async_lr_scale ", req.async_lr_scale(),
                       " outside [0, 1]"));
    }
    if (req.whole_step() &&
        (req.deferred() || p_->gates.mode().mode != Consistency::kBsp)) {
      return absl::InvalidArgumentError(
          "a whole-step push (all-reduce sync) needs BSP and no deferral");
    }
    STRATA_RETURN_IF_ERROR(
        p_->membership.AwaitGeneration(req.generation(), req.member_id()));
    STRATA_RETURN_IF_ERROR(CheckMember(req));
    std::vector<float> grad;  // empty for a zero push
    if (req.zero()) {
      STRATA_RETURN_IF_ERROR(CheckZeroPush(req, payload_bytes));
    } else {
      STRATA_RETURN_IF_ERROR(DecodeGradient(
          req, payload_bytes, read, c->spec.numel(), &grad, &nonfinite));
    }
    if (req.deferred()) return Hold(*c, req, std::move(grad));
    return p_->gates.Current().Push(*c, req, std::move(grad), 1.0f);
  }();
  if (!result.ok() && !nonfinite) counters_.rejected_other++;
  return result;
}

absl::StatusOr<v1::PushResponse> Shard::Hold(Chunk& c,
                                             const v1::PushRequest& req,
                                             std::vector<float> grad) {
  v1::PushResponse resp;
  uint64_t pulled = 0;
  {
    absl::MutexLock lock(&c.mu);
    if (absl::Status s = CheckChunkGeneration(c, req.generation(), counters_);
        !s.ok()) {
      p_->pool.Give(std::move(grad));
      return s;
    }
    resp.set_version(c.rec.version);
    pulled = c.PullArrivalOf(req.step());
  }
  p_->deferred.Hold(req, std::move(grad), pulled);
  return resp;
}

absl::StatusOr<v1::CommitResponse> Shard::Commit(const v1::CommitRequest& req) {
  auto apply = [this](const v1::PushRequest& r, std::vector<float>& grad,
                      float scale) -> absl::StatusOr<v1::PushResponse> {
    STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(r.chunk_id()));
    STRATA_RETURN_IF_ERROR(CheckMember(r));
    return p_->gates.Current().Push(*c, r, std::move(grad), scale);
  };
  bool failed = false;
  absl::StatusOr<v1::CommitResponse> result =
      p_->deferred.Commit(req, apply, &failed);
  if (failed) WakeWaiters();  // pulls waiting for the step: it won't close
  return result;
}

void Shard::Cancel() {
  p_->membership.Cancel();
  WakeWaiters();
}

void Shard::WakeWaiters() {
  for (Chunk* c : p_->table.All()) {
    absl::MutexLock lock(&c->mu);
    c->changed.SignalAll();
  }
}

uint64_t Shard::generation() const { return p_->membership.generation(); }

size_t Shard::num_chunks() const { return p_->table.size(); }

absl::StatusOr<uint64_t> Shard::ChunkNumel(uint64_t id) const {
  STRATA_ASSIGN_OR_RETURN(Chunk * chunk, p_->table.Find(id));
  return chunk->spec.numel();
}

void Shard::set_snapshot_sink(SnapshotSink sink) {
  p_->snapshots.set_sink(std::move(sink));
}

void Shard::set_applied_sink(AppliedSink sink) {
  p_->applied.set_sink(std::move(sink));
}

void Shard::set_lost_state_sink(LostStateSink sink) {
  p_->tiles.set_lost_state_sink(std::move(sink));
}

void Shard::set_disk_error_sink(LostStateSink sink) {
  p_->tiles.set_disk_error_sink(std::move(sink));
}

void Shard::WaitForTierIo() { p_->tiles.WaitForIo(); }

void Shard::FillStats(v1::StatsResponse* out) const {
  out->set_pushes_applied(counters_.pushes_applied);
  out->set_pushes_rejected_nonfinite(counters_.rejected_nonfinite);
  out->set_pushes_rejected_other(counters_.rejected_other);
  out->set_pulls(counters_.pulls);
  out->set_bytes_in(counters_.bytes_in);
  out->set_bytes_out(counters_.bytes_out);
  out->set_bsp_samples_applied(counters_.bsp_samples_applied);
  out->set_bsp_tiling_errors(counters_.bsp_tiling_errors);
  out->set_aborted_stale_epoch(counters_.aborted_stale_epoch);
  out->set_aborted_rolled_back(counters_.aborted_rolled_back);
  out->set_generation(generation());
  p_->tiles.FillStats(out);
  out->set_summed_updates(counters_.summed_updates);
  out->set_pull_mirror_floats(p_->mirrors.floats());
  out->set_pulls_compressed(counters_.pulls_compressed);
  out->set_pushes_zero(counters_.pushes_zero);
  out->set_zero_steps(counters_.zero_steps);
  out->set_pulls_rebased(counters_.pulls_rebased);
  const std::vector<Chunk*> all = p_->table.All();
  out->set_chunks(all.size());
  uint64_t parameters = 0, state = 0;
  for (Chunk* c : all) {
    absl::MutexLock lock(&c->mu);
    (*out->mutable_chunk_versions())[c->spec.chunk_id()] = c->rec.version;
    parameters += c->spec.numel();
    for (uint64_t size : StateSizesOf(c->spec, c->group->params)) {
      state += size;
    }
  }
  out->set_parameters(parameters);
  out->set_state_floats(state);
}

}  // namespace strata

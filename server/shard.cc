#include "server/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bf16.h"
#include "common/check.h"
#include "common/chunk_plan.h"
#include "common/status.h"
#include "common/wire.h"
#include "server/init.h"

namespace strata {
namespace {

bool SameMessage(const google::protobuf::Message& a,
                 const google::protobuf::Message& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

// Whether two specs of a chunk agree in all but the path of an init file:
// workers may name one file by different paths (each server opens the
// path it was given first, and checks the file's size).
bool SameChunk(const v1::ChunkSpec& a, const v1::ChunkSpec& b) {
  v1::ChunkSpec x = a, y = b;
  x.mutable_init()->clear_file();
  y.mutable_init()->clear_file();
  return SameMessage(x, y);
}

}  // namespace

absl::Status Shard::ValidateChunkSpec(const v1::ChunkSpec& s,
                                      uint64_t max_chunk_bytes) {
  if (s.tensor().empty())
    return absl::InvalidArgumentError("chunk spec without a tensor name");
  if (s.numel() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", s.tensor(), "#", s.index(), " is empty"));
  }
  if (s.chunk_id() != ChunkId(s.tensor(), s.index())) {
    return absl::InvalidArgumentError(absl::StrCat("chunk id ", s.chunk_id(),
                                                   " is not the stable id of ",
                                                   s.tensor(), "#", s.index()));
  }
  if (s.numel() > max_chunk_bytes / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", s.tensor(), "#", s.index(), " has ", s.numel(),
                     " elements, over this server's limit of ", max_chunk_bytes,
                     " bytes per chunk"));
  }
  uint64_t numel = 1;
  for (int64_t d : s.tensor_shape()) {
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", s.tensor(), " has a non-positive dimension"));
    }
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", s.tensor(), " has more than 2^64 elements"));
    }
  }
  uint64_t end = 0;
  if (s.tensor_shape().empty() ||
      __builtin_add_overflow(s.offset(), s.numel(), &end) || end > numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", s.tensor(), "#", s.index(),
                     " lies outside its tensor's shape"));
  }
  return absl::OkStatus();
}

Shard::Shard(ShardOptions options) : options_(std::move(options)) {
  if (options_.spill != nullptr) {
    tier_io_ =
        std::make_unique<ThreadPool>(options_.spill->options().io_threads);
    tier_writer_ = std::make_unique<ThreadPool>(1);
  }
}
Shard::~Shard() = default;

absl::StatusOr<v1::RegisterChunksResponse> Shard::Register(
    const v1::RegisterChunksRequest& req) {
  absl::MutexLock lock(&table_mu_);
  // Validate everything before changing anything, so a bad request leaves
  // the shard as it was. An init file is opened once for the request (its
  // reads happen under the table's lock, at registration only).
  InitFiles files;
  absl::flat_hash_map<std::string, OptimizerParams> new_groups;
  for (const v1::GroupSpec& g : req.groups()) {
    if (g.name().empty())
      return absl::InvalidArgumentError("optimizer group without a name");
    STRATA_ASSIGN_OR_RETURN(OptimizerParams params,
                            OptimizerParamsFromProto(g.optimizer()));
    if (auto dup = new_groups.find(g.name()); dup != new_groups.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer group '", g.name(), "' appears twice in one request"));
    }
    auto it = groups_.find(g.name());
    if (it != groups_.end()) {
      if (!SameMessage(it->second->spec, g)) {
        return absl::FailedPreconditionError(
            absl::StrCat("optimizer group '", g.name(),
                         "' is already registered with a different config"));
      }
      continue;
    }
    new_groups[g.name()] = params;
  }
  absl::flat_hash_map<std::string, std::vector<int64_t>> shapes;
  absl::flat_hash_set<uint64_t> in_request;
  for (const v1::ChunkSpec& s : req.chunks()) {
    if (!in_request.insert(s.chunk_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", s.tensor(), "#", s.index(),
                       " appears twice in one request"));
    }
    STRATA_RETURN_IF_ERROR(ValidateChunkSpec(s, options_.max_chunk_bytes));
    if (!groups_.contains(s.group()) && !new_groups.contains(s.group())) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", s.tensor(), "#", s.index(),
                       " names unknown optimizer group '", s.group(), "'"));
    }
    if (options_.spill != nullptr) {
      const auto g = new_groups.find(s.group());
      const OptimizerParams& params =
          g != new_groups.end() ? g->second : groups_.at(s.group())->params;
      const uint64_t tile = s.numel() * 4 * (1 + NumStateSlots(params));
      if (tile > options_.spill->budget()) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", s.tensor(), "#", s.index(),
                         "'s weights and optimizer "
                         "state take ",
                         tile,
                         " bytes, more than this server's RAM budget "
                         "of ",
                         options_.spill->budget(), " bytes (--ram_budget)"));
      }
    }
    std::vector<int64_t> shape(s.tensor_shape().begin(),
                               s.tensor_shape().end());
    auto known = tensor_shapes_.find(s.tensor());
    auto& seen = known != tensor_shapes_.end()
                     ? known->second
                     : shapes.try_emplace(s.tensor(), shape).first->second;
    if (seen != shape) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", s.tensor(), "' is registered with shape [",
                       absl::StrJoin(seen, ","), "], not [",
                       absl::StrJoin(shape, ","), "]"));
    }
    auto c = chunks_.find(s.chunk_id());
    if (c != chunks_.end() && !SameChunk(c->second->spec, s)) {
      const v1::InitSpec& had = c->second->spec.init();
      const bool init = had.kind() != s.init().kind() ||
                        had.source() != s.init().source() ||
                        had.seed() != s.init().seed();
      return absl::FailedPreconditionError(absl::StrCat(
          "chunk ", s.tensor(), "#", s.index(),
          " is already registered with a different spec",
          init ? " (another initialization: every worker of a job needs "
                 "the same --init_from and --seed)"
               : ""));
    }
    if (c == chunks_.end()) STRATA_RETURN_IF_ERROR(CheckChunkInit(s, &files));
  }
  for (const v1::GroupSpec& g : req.groups()) {
    if (!new_groups.contains(g.name())) continue;
    auto group = std::make_unique<Group>();
    group->spec = g;
    group->params = new_groups[g.name()];
    groups_[g.name()] = std::move(group);
  }
  for (auto& [name, shape] : shapes) tensor_shapes_[name] = shape;
  v1::RegisterChunksResponse resp;
  for (const v1::ChunkSpec& s : req.chunks()) {
    if (chunks_.contains(s.chunk_id())) {
      resp.set_existing(resp.existing() + 1);
      continue;
    }
    STRATA_RETURN_IF_ERROR(
        CreateChunk(s, groups_[s.group()].get(), nullptr, &files));
    resp.set_created(resp.created() + 1);
  }
  return resp;
}

absl::Status Shard::CreateChunk(const v1::ChunkSpec& spec, const Group* group,
                                const ChunkRecord* restored, InitFiles* files) {
  auto c = std::make_unique<Chunk>();
  c->spec = spec;
  c->group = group;
  const size_t n = spec.numel();
  const int slots = NumStateSlots(group->params);
  absl::MutexLock lock(&c->mu);
  if (restored != nullptr) {
    if (restored->weights.size() != n ||
        static_cast<int>(restored->slots.size()) != slots) {
      return absl::DataLossError(absl::StrCat("snapshot record for ",
                                              spec.tensor(), "#", spec.index(),
                                              " does not match its spec"));
    }
    c->rec = *restored;
  } else {
    c->rec.id = spec.chunk_id();
    c->rec.spec = spec.SerializeAsString();
    c->rec.weights.resize(n);
    STRATA_RETURN_IF_ERROR(FillChunkInit(spec, c->rec.weights.data(), files));
    c->rec.slots.assign(slots, std::vector<float>(n, 0.0f));
  }
  c->tile_bytes = n * sizeof(float) * (1 + slots);
  if (SpillStore* spill = options_.spill.get(); spill != nullptr) {
    if (spill->OverBudget(c->tile_bytes)) {
      // Over budget already: the new tile goes straight to disk. A disk
      // that refuses it refuses the chunk (the request's earlier chunks
      // stay registered; a retry registers the rest).
      if (absl::Status s = spill->Write(c->rec); !s.ok()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot admit chunk ", spec.tensor(), "#", spec.index(),
            ": the RAM budget is full and the spill disk refused it: ",
            s.message()));
      }
      std::vector<float>().swap(c->rec.weights);
      std::vector<std::vector<float>>().swap(c->rec.slots);
      c->resident = false;
      c->disk_current = true;
      spill->NoteSpilled(c->tile_bytes);
    } else {
      spill->Admit(spec.chunk_id(), c->tile_bytes, /*was_spilled=*/false);
    }
  }
  // Created after a rollback (a restarted server that held no snapshot):
  // in its generation, or no request could reach it.
  c->generation = rolled_generation_.load();
  c->generation_step = rolled_step_.load();
  chunks_[spec.chunk_id()] = std::move(c);
  num_chunks_++;
  return absl::OkStatus();
}

absl::StatusOr<Shard::Chunk*> Shard::FindChunk(uint64_t id) const {
  absl::MutexLock lock(&table_mu_);
  auto it = chunks_.find(id);
  if (it == chunks_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown chunk ", id, " on this server"));
  }
  return it->second.get();
}

std::vector<float> Shard::TakeBuffer(size_t n) {
  std::vector<float> buffer;
  {
    absl::MutexLock lock(&pool_mu_);
    // At most twice the size: a small chunk's push that took a large
    // buffer would make the next large one allocate, and the pool, which
    // frees nothing, would grow past the peak it exists to keep.
    if (auto it = pool_.lower_bound(n);
        it != pool_.end() && it->first <= 2 * n) {
      buffer = std::move(it->second);
      pool_.erase(it);
    }
  }
  buffer.resize(n);
  return buffer;
}

void Shard::GiveBuffer(std::vector<float> buffer) {
  if (buffer.capacity() == 0) return;
  absl::MutexLock lock(&pool_mu_);
  if (options_.spill != nullptr && pool_.size() >= kSpillPoolBuffers) return;
  const size_t capacity = buffer.capacity();
  pool_.emplace(capacity, std::move(buffer));
}

absl::Status Shard::DecodeGradient(const v1::PushRequest& req,
                                   size_t payload_bytes, PayloadReader read,
                                   uint64_t numel, std::vector<float>* out,
                                   bool* nonfinite) {
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
  *out = TakeBuffer(numel);
  float* dst = out->data();
  absl::Status read_status;
  for (size_t begin = 0; begin < numel; begin += kBlock) {
    const size_t n = std::min(kBlock, numel - begin);
    if (bf16) {
      read_status = read(reinterpret_cast<char*>(raw.data()), begin * 2, n * 2);
      if (read_status.ok()) Bf16ToFloat(raw.data(), dst + begin, n);
    } else {
      read_status =
          read(reinterpret_cast<char*>(dst + begin), begin * 4, n * 4);
    }
    if (!read_status.ok()) {
      GiveBuffer(std::move(*out));
      return read_status;
    }
    if (!AllWithin(dst + begin, n, kMaxGradientMagnitude)) {
      counters_.rejected_nonfinite++;
      *nonfinite = true;
      GiveBuffer(std::move(*out));
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient for chunk ", req.chunk_id(), " step ", req.step(),
          " has NaN, Inf or a value beyond +-1e19 (its square "
          "would overflow the optimizer's fp32 state); rejected"));
    }
  }
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
    STRATA_ASSIGN_OR_RETURN(Chunk * c, FindChunk(req.chunk_id()));
    if (req.num_samples() == 0)
      return absl::InvalidArgumentError("push with num_samples == 0");
    if (req.step() < 0)
      return absl::InvalidArgumentError("push with a negative step");
    if (req.whole_step() &&
        (req.deferred() || options_.consistency.mode != Consistency::kBsp)) {
      return absl::InvalidArgumentError(
          "a whole-step push (all-reduce sync) needs BSP and no deferral");
    }
    STRATA_RETURN_IF_ERROR(AwaitGeneration(req.generation()));
    STRATA_RETURN_IF_ERROR(CheckMember(req));
    std::vector<float> grad;
    STRATA_RETURN_IF_ERROR(DecodeGradient(req, payload_bytes, read,
                                          c->spec.numel(), &grad, &nonfinite));
    if (req.deferred()) return Hold(*c, req, std::move(grad));
    return Apply(*c, req, std::move(grad));
  }();
  if (!result.ok() && !nonfinite) counters_.rejected_other++;
  return result;
}

absl::StatusOr<v1::PushResponse> Shard::Apply(Chunk& c,
                                              const v1::PushRequest& req,
                                              std::vector<float> grad,
                                              float scale) {
  if (options_.consistency.mode == Consistency::kBsp) {
    // Only the push that closes the step reads the tile (MaybeCloseStep):
    // room is made after it (AfterUse), not before every push, which
    // would spill a tile for each push that reads none.
    auto r = PushBsp(c, req, std::move(grad), scale);
    if (r.ok() && r->applied()) AfterUse(c);
    return r;
  }
  BeforeUse(c);
  absl::Cleanup after = [&] { AfterUse(c); };
  auto r = PushAsync(c, req, grad, scale);
  GiveBuffer(std::move(grad));
  return r;
}

void Shard::Cancel() {
  cancelled_ = true;
  {
    absl::MutexLock lock(&view_mu_);
    view_changed_.SignalAll();
  }
  WakeWaiters();
}

void Shard::WakeWaiters() {
  absl::MutexLock lock(&table_mu_);
  for (auto& [id, c] : chunks_) {
    absl::MutexLock chunk_lock(&c->mu);
    c->changed.SignalAll();
  }
}

size_t Shard::num_chunks() const { return num_chunks_.load(); }

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
  if (const SpillStore* spill = options_.spill.get(); spill != nullptr) {
    const SpillCounters& t = spill->counters();
    v1::TierStats* tier = out->mutable_tier();
    tier->set_ram_budget(spill->budget());
    const auto [resident, spilled] = spill->Bytes();
    tier->set_resident_bytes(resident);
    tier->set_spilled_bytes(spilled);
    tier->set_hits(t.hits);
    tier->set_misses(t.misses);
    tier->set_prefetched(t.prefetched);
    tier->set_read_bytes(t.read_bytes);
    tier->set_write_bytes(t.write_bytes);
    tier->set_write_errors(t.write_errors);
    tier->set_written_behind(t.written_behind);
    tier->set_spills_written(t.spills_written);
    tier->set_read_ahead_unused(t.read_ahead_unused);
    tier->set_read_aheads_skipped(t.read_aheads_skipped);
    tier->set_weight_reads(t.weight_reads);
  }
  absl::MutexLock lock(&table_mu_);
  out->set_chunks(chunks_.size());
  for (const auto& [id, c] : chunks_) {
    absl::MutexLock chunk_lock(&c->mu);
    (*out->mutable_chunk_versions())[id] = c->rec.version;
  }
}

}  // namespace strata

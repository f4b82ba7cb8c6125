// A joining replica's catch-up: the whole state of a shard, out of its
// slot's primary and into the joiner (server/replica_catch_up.h). The
// state is the chunks (record, generation, open BSP pushes, SSP/ASP
// clocks) and what the shard's parts keep across requests: deferred
// pushes and their commits, failed commits, partly applied updates. A
// replica that holds it applies every later change as the primary does.
// BSP auto-snapshot cuts under way are not sent: the joiner's first cut is
// the next whole one.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/shard.h"
#include "server/shard_parts.h"
#include "storage/chunk_record.h"

namespace strata {
namespace {

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

}  // namespace

absl::Status Shard::ExportState(uint64_t from_member, StateEmitter emit,
                                uint64_t* bytes) {
  absl::MutexLock update_lock(&update_mu_);  // no view sweep or rollback
  const std::vector<Chunk*> all = p_->table.All();
  v1::ShardStatePart part;
  v1::ShardStateHeader* header = part.mutable_header();
  header->set_from_member(from_member);
  header->set_groups(p_->table.GroupsMetadata());
  const auto [generation, generation_step] = p_->table.generation_start();
  header->set_generation(generation);
  header->set_generation_step(generation_step);
  for (const Chunk* c : all) header->add_chunk_ids(c->spec.chunk_id());
  p_->deferred.Export(header);
  p_->failed.Export(header);
  p_->applied.Export(header);
  STRATA_RETURN_IF_ERROR(emit(part));
  *bytes = 0;
  for (Chunk* c : all) {
    part.Clear();
    v1::ChunkState* state = part.mutable_chunk();
    absl::StatusOr<ChunkRecord> copy;
    {
      absl::MutexLock lock(&c->mu);
      copy = p_->tiles.TileCopy(*c);
      state->set_generation(c->generation);
      state->set_generation_step(c->generation_step);
      for (const auto& [member, contrib] : c->open) {
        v1::OpenPushState* o = state->add_open();
        o->set_member_id(member);
        o->set_samples(contrib.samples);
        o->set_first_sample(contrib.first_sample);
        o->set_epoch(contrib.epoch);
        o->set_whole_step(contrib.whole_step);
        o->set_scale(contrib.scale);
        o->set_grad(FloatBytes(contrib.grad));
      }
      for (const auto& [member, clock] : c->clocks)
        (*state->mutable_clocks())[member] = clock;
    }
    STRATA_RETURN_IF_ERROR(copy.status());
    STRATA_ASSIGN_OR_RETURN(std::string record, EncodeChunkRecord(*copy));
    *bytes += record.size();
    state->set_record(std::move(record));
    STRATA_RETURN_IF_ERROR(emit(part));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Shard::InstallState(const v1::ShardStateHeader& header,
                                             ChunkStateReader next) {
  absl::MutexLock update_lock(&update_mu_);
  const absl::flat_hash_set<uint64_t> listed(header.chunk_ids().begin(),
                                             header.chunk_ids().end());
  absl::flat_hash_set<uint64_t> held_before;
  for (const Chunk* c : p_->table.All()) {
    const uint64_t id = c->spec.chunk_id();
    if (!listed.contains(id)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this server holds chunk ", c->spec.tensor(), "#", c->spec.index(),
          ", which its slot's primary (member ", header.from_member(),
          ") does not: it holds another job's state; start it on an empty "
          "data directory"));
    }
    held_before.insert(id);
  }
  STRATA_RETURN_IF_ERROR(p_->table.RegisterGroups(header.groups()));
  p_->table.StartGeneration(header.generation(), header.generation_step());
  uint64_t installed = 0, max_version = 0;
  absl::flat_hash_set<uint64_t> seen;
  v1::ChunkState state;
  while (true) {
    STRATA_ASSIGN_OR_RETURN(bool more, next(&state));
    if (!more) break;
    STRATA_RETURN_IF_ERROR(
        InstallChunk(state, listed, held_before, &max_version));
    ++installed;
  }
  if (installed != listed.size()) {
    return absl::DataLossError(absl::StrCat("the primary's state lists ",
                                            listed.size(), " chunks; ",
                                            installed, " came"));
  }
  STRATA_RETURN_IF_ERROR(p_->deferred.Import(header));
  p_->failed.Import(header);
  p_->applied.Import(header);
  p_->snapshots.Reset(static_cast<int64_t>(max_version));
  p_->membership.SetGeneration(header.generation());
  return installed;
}

absl::Status Shard::InstallChunk(
    v1::ChunkState& state, const absl::flat_hash_set<uint64_t>& listed,
    const absl::flat_hash_set<uint64_t>& held_before, uint64_t* max_version) {
  STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, DecodeChunkRecord(state.record()));
  if (!listed.contains(rec.id)) {
    return absl::DataLossError(
        absl::StrCat("the primary sent chunk ", rec.id, ", not in its list"));
  }
  STRATA_RETURN_IF_ERROR(p_->table.RestoreChunk(rec));
  STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(rec.id));
  const size_t numel = c->spec.numel();
  if (rec.weights.size() != numel ||
      static_cast<int>(rec.slots.size()) != NumStateSlots(c->group->params)) {
    return absl::DataLossError(
        absl::StrCat("the primary's chunk ", c->spec.tensor(), "#",
                     c->spec.index(), " does not match"));
  }
  for (const v1::OpenPushState& o : state.open()) {
    if (o.grad().size() != numel * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(
          "an open push of chunk ", rec.id, " has ", o.grad().size(),
          " bytes of gradient; the chunk holds ", numel, " values"));
    }
  }
  *max_version = std::max(*max_version, rec.version);
  // A chunk this server held already (restored from its own snapshot)
  // takes the primary's record as a rollback would; a new one has it.
  if (held_before.contains(rec.id)) {
    ResetChunk(*c, state.generation(), state.generation_step(), &rec,
               /*init=*/false, /*files=*/nullptr);
  }
  {
    absl::MutexLock lock(&c->mu);
    c->generation = state.generation();
    c->generation_step = state.generation_step();
    for (const v1::OpenPushState& o : state.open()) {
      Contribution& contrib = c->open[o.member_id()];
      contrib.samples = o.samples();
      contrib.first_sample = o.first_sample();
      contrib.epoch = o.epoch();
      contrib.whole_step = o.whole_step();
      contrib.scale = o.scale();
      contrib.grad = p_->pool.Take(numel);
      std::memcpy(contrib.grad.data(), o.grad().data(), o.grad().size());
    }
    for (const auto& [member, clock] : state.clocks())
      c->clocks[member] = clock;
    c->changed.SignalAll();
  }
  p_->tiles.MakeRoom(0);  // within the budget, chunk by chunk
  return absl::OkStatus();
}

}  // namespace strata

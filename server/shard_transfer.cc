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
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/shard.h"
#include "server/shard_parts.h"
#include "storage/chunk_record.h"

namespace strata {
namespace {

// A record's pieces: within a push's size whatever the chunk's optimizer.
constexpr size_t kRecordPiece = size_t{4} << 20;

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

}  // namespace

// One chunk as InstallState assembles it from its parts.
struct Shard::ChunkInstall {
  v1::ChunkState meta;
  std::string record;
  std::vector<v1::OpenPushState> open;
};

absl::Status Shard::ExportState(uint64_t from_member, StateEmitter emit,
                                uint64_t* bytes) {
  absl::MutexLock update_lock(&update_mu_);  // no view sweep or rollback
  const std::vector<Chunk*> all = p_->table.All();
  // A closed step whose update waits for its tensor's sums (BSP with LAMB
  // or Adafactor) lives between Reduce calls: the joiner would get its
  // later phases without its gradient. Such a wait lasts a round trip, and
  // steps leave gaps between them: the joiner comes back.
  for (Chunk* c : all) {
    absl::MutexLock lock(&c->mu);
    if (c->AwaitingSums()) {
      return absl::UnavailableError(absl::StrCat(
          "chunk ", c->spec.tensor(), "#", c->spec.index(), "'s step ",
          c->sums.step, " waits for its tensor's sums; catch up again"));
    }
  }
  v1::ShardStatePart part;
  v1::ShardStateHeader* header = part.mutable_header();
  header->set_from_member(from_member);
  header->set_view_epoch(p_->membership.Get().epoch);
  header->set_groups(p_->table.GroupsMetadata());
  const auto [generation, generation_step] = p_->table.generation_start();
  header->set_generation(generation);
  header->set_generation_step(generation_step);
  for (const Chunk* c : all) header->add_chunk_ids(c->spec.chunk_id());
  p_->deferred.Export(header);
  p_->failed.Export(header);
  p_->applied.Export(header);
  // The held pushes (a chunk's gradient each) go in parts of their own.
  google::protobuf::RepeatedPtrField<v1::HeldPushState> held;
  held.Swap(header->mutable_held());
  STRATA_RETURN_IF_ERROR(emit(part));
  for (v1::HeldPushState& h : held) {
    part.Clear();
    part.mutable_held()->Swap(&h);
    STRATA_RETURN_IF_ERROR(emit(part));
  }
  *bytes = 0;
  for (Chunk* c : all) STRATA_RETURN_IF_ERROR(ExportChunk(*c, emit, bytes));
  return absl::OkStatus();
}

absl::Status Shard::ExportChunk(Chunk& c, StateEmitter emit, uint64_t* bytes) {
  v1::ShardStatePart part;
  v1::ChunkState* meta = part.mutable_chunk();
  std::vector<v1::OpenPushState> open;
  absl::StatusOr<ChunkRecord> copy;
  {
    absl::MutexLock lock(&c.mu);
    copy = p_->tiles.TileCopy(c);
    meta->set_generation(c.generation);
    meta->set_generation_step(c.generation_step);
    for (const auto& [member, contrib] : c.open) {
      v1::OpenPushState& o = open.emplace_back();
      o.set_member_id(member);
      o.set_samples(contrib.samples);
      o.set_first_sample(contrib.first_sample);
      o.set_epoch(contrib.epoch);
      o.set_whole_step(contrib.whole_step);
      o.set_scale(contrib.scale);
      o.set_grad(FloatBytes(contrib.grad));
      o.set_zero(contrib.zero);
    }
    for (const auto& [member, clock] : c.clocks)
      (*meta->mutable_clocks())[member] = clock;
    for (const auto& [member, lift] : c.lift)
      (*meta->mutable_lifts())[member] = lift;
  }
  STRATA_RETURN_IF_ERROR(copy.status());
  // The encoding's pieces view the copy's arrays: each part's bytes are
  // copied once, from them.
  std::string scratch;
  std::vector<absl::string_view> views;
  STRATA_RETURN_IF_ERROR(EncodeChunkRecordPieces(*copy, &scratch, &views));
  size_t record_bytes = 0;
  for (absl::string_view v : views) record_bytes += v.size();
  *bytes += record_bytes;
  meta->set_record_bytes(record_bytes);
  STRATA_RETURN_IF_ERROR(emit(part));
  part.Clear();
  std::string* piece = part.mutable_record_piece();
  piece->reserve(std::min(kRecordPiece, record_bytes));
  for (absl::string_view v : views) {
    while (!v.empty()) {
      const size_t n = std::min(v.size(), kRecordPiece - piece->size());
      piece->append(v.data(), n);
      v.remove_prefix(n);
      if (piece->size() == kRecordPiece) {
        STRATA_RETURN_IF_ERROR(emit(part));
        piece->clear();
      }
    }
  }
  if (!piece->empty()) STRATA_RETURN_IF_ERROR(emit(part));
  for (v1::OpenPushState& o : open) {
    part.Clear();
    part.mutable_open()->Swap(&o);
    STRATA_RETURN_IF_ERROR(emit(part));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Shard::InstallState(const v1::ShardStateHeader& header,
                                             PartReader next) {
  absl::MutexLock update_lock(&update_mu_);
  if (p_->membership.Get().epoch < header.view_epoch()) {
    return absl::UnavailableError(absl::StrCat(
        "this server's view (epoch ", p_->membership.Get().epoch,
        ") is older than the primary's (", header.view_epoch(), "): retry"));
  }
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
  v1::ShardStateHeader parts = header;  // with the held pushes added
  absl::flat_hash_set<uint64_t> seen;
  uint64_t max_version = 0;
  std::optional<ChunkInstall> chunk;
  auto finish = [&]() -> absl::Status {
    if (!chunk.has_value()) return absl::OkStatus();
    absl::Status s =
        InstallChunk(*chunk, listed, held_before, seen, &max_version);
    chunk.reset();
    return s;
  };
  v1::ShardStatePart part;
  while (true) {
    STRATA_ASSIGN_OR_RETURN(bool more, next(&part));
    if (!more) break;
    switch (part.part_case()) {
      case v1::ShardStatePart::kHeld:
        if (chunk.has_value() || !seen.empty()) {
          return absl::InvalidArgumentError("a held push after the chunks");
        }
        parts.add_held()->Swap(part.mutable_held());
        break;
      case v1::ShardStatePart::kChunk:
        STRATA_RETURN_IF_ERROR(finish());
        chunk.emplace();
        chunk->meta.Swap(part.mutable_chunk());
        chunk->record.reserve(chunk->meta.record_bytes());
        break;
      case v1::ShardStatePart::kRecordPiece:
        if (!chunk.has_value() ||
            chunk->record.size() + part.record_piece().size() >
                chunk->meta.record_bytes()) {
          return absl::InvalidArgumentError(
              "a record piece outside its chunk's record");
        }
        chunk->record += part.record_piece();
        break;
      case v1::ShardStatePart::kOpen:
        if (!chunk.has_value()) {
          return absl::InvalidArgumentError("an open push before any chunk");
        }
        chunk->open.emplace_back().Swap(part.mutable_open());
        break;
      default:
        return absl::InvalidArgumentError(
            "a part of a shard's state that is none of held, chunk, record "
            "piece or open push");
    }
  }
  STRATA_RETURN_IF_ERROR(finish());
  if (seen.size() != listed.size()) {
    return absl::DataLossError(absl::StrCat("the primary's state lists ",
                                            listed.size(), " chunks; ",
                                            seen.size(), " came"));
  }
  for (const v1::HeldPushState& h : parts.held()) {
    absl::StatusOr<Chunk*> c = p_->table.Find(h.req().chunk_id());
    const size_t want =
        h.req().zero() || !c.ok() ? 0 : (*c)->spec.numel() * sizeof(float);
    if (!c.ok() || h.grad().size() != want) {
      return absl::DataLossError(
          absl::StrCat("a held push of chunk ", h.req().chunk_id(),
                       " does not match a chunk of the state"));
    }
  }
  STRATA_RETURN_IF_ERROR(p_->deferred.Import(parts));
  p_->failed.Import(parts);
  p_->applied.Import(parts);
  p_->snapshots.Reset(static_cast<int64_t>(max_version));
  p_->membership.SetGeneration(header.generation());
  Sweep();  // this view may have dropped workers the sender's had
  return seen.size();
}

absl::Status Shard::InstallChunk(
    ChunkInstall& chunk, const absl::flat_hash_set<uint64_t>& listed,
    const absl::flat_hash_set<uint64_t>& held_before,
    absl::flat_hash_set<uint64_t>& seen, uint64_t* max_version) {
  STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, DecodeChunkRecord(chunk.record));
  chunk.record = std::string();  // its bytes are in `rec` now
  const uint64_t id = rec.id;
  if (!listed.contains(id) || !seen.insert(id).second) {
    return absl::DataLossError(absl::StrCat("the primary sent chunk ", id,
                                            ", not in its list or twice"));
  }
  *max_version = std::max(*max_version, rec.version);
  // A chunk this server held already (restored from its own snapshot)
  // takes the primary's record as a rollback would, once checked against
  // it; a new one is made from the record (whose sizes Create checks),
  // taking its arrays.
  const bool held = held_before.contains(id);
  if (!held) STRATA_RETURN_IF_ERROR(p_->table.RestoreChunk(std::move(rec)));
  STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(id));
  const size_t numel = c->spec.numel();
  for (const v1::OpenPushState& o : chunk.open) {
    if (o.grad().size() != (o.zero() ? 0 : numel * sizeof(float))) {
      return absl::DataLossError(absl::StrCat(
          "an open push of chunk ", id, " has ", o.grad().size(),
          " bytes of gradient; the chunk holds ", numel, " values"));
    }
  }
  const v1::ChunkState& meta = chunk.meta;
  if (held) {
    v1::ChunkSpec spec;
    if (rec.weights.size() != numel || !spec.ParseFromString(rec.spec) ||
        !google::protobuf::util::MessageDifferencer::Equals(spec, c->spec) ||
        !StateFits(rec.slots, c->spec, c->group->params)) {
      return absl::DataLossError(
          absl::StrCat("the primary's chunk ", c->spec.tensor(), "#",
                       c->spec.index(), " does not match"));
    }
    ResetChunk(*c, meta.generation(), meta.generation_step(), &rec,
               /*init=*/false, /*files=*/nullptr);
  }
  {
    absl::MutexLock lock(&c->mu);
    c->generation = meta.generation();
    c->generation_step = meta.generation_step();
    for (const v1::OpenPushState& o : chunk.open) {
      Contribution& contrib = c->open[o.member_id()];
      contrib.samples = o.samples();
      contrib.first_sample = o.first_sample();
      contrib.epoch = o.epoch();
      contrib.whole_step = o.whole_step();
      contrib.scale = o.scale();
      contrib.zero = o.zero();
      if (!o.zero()) {
        contrib.grad = p_->pool.Take(numel);
        std::memcpy(contrib.grad.data(), o.grad().data(), o.grad().size());
      }
    }
    for (const auto& [member, clock] : meta.clocks()) c->clocks[member] = clock;
    for (const auto& [member, lift] : meta.lifts()) c->lift[member] = lift;
    c->changed.SignalAll();
  }
  p_->tiles.MakeRoom(0);  // within the budget, chunk by chunk
  return absl::OkStatus();
}

}  // namespace strata

#include "server/chunk_table.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/chunk_plan.h"
#include "common/status.h"

namespace strata {
namespace {

bool SameMessage(const google::protobuf::Message& a,
                 const google::protobuf::Message& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

// Names (tensors, groups) and shapes a peer may register: long enough for
// any model's parameter names, short enough that every error echoing one
// stays short, and that a view or snapshot holding thousands stays small.
constexpr size_t kMaxNameBytes = 256;
constexpr int kMaxDims = 16;

// A path, as the OS takes one.
constexpr size_t kMaxPathBytes = 4096;

// INVALID_ARGUMENT for a `name` over `limit` bytes, quoting only its start.
absl::Status CheckNameLength(absl::string_view what, const std::string& name,
                             size_t limit = kMaxNameBytes) {
  if (name.size() <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " '", absl::string_view(name).substr(0, 32), "...' is ",
      name.size(), " bytes long, over the limit of ", limit));
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

ChunkTable::ChunkTable(ChunkTableOptions options)
    : options_(std::move(options)) {}

absl::Status ChunkTable::ValidateSpec(const v1::ChunkSpec& s,
                                      uint64_t max_chunk_bytes) {
  if (s.tensor().empty())
    return absl::InvalidArgumentError("chunk spec without a tensor name");
  STRATA_RETURN_IF_ERROR(CheckNameLength("tensor name", s.tensor()));
  STRATA_RETURN_IF_ERROR(CheckNameLength("optimizer group name", s.group()));
  STRATA_RETURN_IF_ERROR(
      CheckNameLength("init file", s.init().file(), kMaxPathBytes));
  if (s.tensor_shape_size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", s.tensor(), " has ", s.tensor_shape_size(),
                     " dimensions, over the limit of ", kMaxDims));
  }
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

absl::StatusOr<v1::RegisterChunksResponse> ChunkTable::Register(
    const v1::RegisterChunksRequest& req) {
  absl::MutexLock lock(&mu_);
  // Validate everything before changing anything, so a bad request leaves
  // the table as it was. An init file is opened once for the request (its
  // reads happen under the table's lock, at registration only).
  InitFiles files;
  absl::flat_hash_map<std::string, OptimizerParams> new_groups;
  for (const v1::GroupSpec& g : req.groups()) {
    if (g.name().empty())
      return absl::InvalidArgumentError("optimizer group without a name");
    STRATA_RETURN_IF_ERROR(CheckNameLength("optimizer group name", g.name()));
    STRATA_ASSIGN_OR_RETURN(OptimizerParams params,
                            OptimizerParamsFromProto(g.optimizer()));
    if (new_groups.contains(g.name())) {
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
    STRATA_RETURN_IF_ERROR(CheckChunk(s, new_groups, shapes, &files));
  }
  for (const v1::GroupSpec& g : req.groups()) {
    if (!new_groups.contains(g.name())) continue;
    auto group = std::make_unique<ChunkGroup>();
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
        Create(s, groups_[s.group()].get(), nullptr, &files));
    resp.set_created(resp.created() + 1);
  }
  return resp;
}

absl::Status ChunkTable::CheckChunk(
    const v1::ChunkSpec& s,
    const absl::flat_hash_map<std::string, OptimizerParams>& new_groups,
    absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes,
    InitFiles* files) const {
  STRATA_RETURN_IF_ERROR(ValidateSpec(s, options_.max_chunk_bytes));
  if (!groups_.contains(s.group()) && !new_groups.contains(s.group())) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", s.tensor(), "#", s.index(),
                     " names unknown optimizer group '", s.group(), "'"));
  }
  const auto g = new_groups.find(s.group());
  const OptimizerParams& params =
      g != new_groups.end() ? g->second : groups_.at(s.group())->params;
  STRATA_RETURN_IF_ERROR(
      CheckTensorPart(params, s.offset(), s.numel(), s.tensor_shape()));
  if (options_.tile_budget > 0) {
    const uint64_t tile = TileBytesOf(s, params);
    if (tile > options_.tile_budget) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", s.tensor(), "#", s.index(),
                       "'s weights and optimizer state take ", tile,
                       " bytes, more than this server's RAM budget of ",
                       options_.tile_budget, " bytes (--ram_budget)"));
    }
  }
  std::vector<int64_t> shape(s.tensor_shape().begin(), s.tensor_shape().end());
  auto known = tensor_shapes_.find(s.tensor());
  const std::vector<int64_t>& seen =
      known != tensor_shapes_.end()
          ? known->second
          : shapes.try_emplace(s.tensor(), shape).first->second;
  if (seen != shape) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", s.tensor(), "' is registered with shape [",
        absl::StrJoin(seen, ","), "], not [", absl::StrJoin(shape, ","), "]"));
  }
  auto c = chunks_.find(s.chunk_id());
  if (c == chunks_.end()) return CheckChunkInit(s, files);
  if (SameChunk(c->second->spec, s)) return absl::OkStatus();
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

absl::Status ChunkTable::Create(const v1::ChunkSpec& spec,
                                const ChunkGroup* group, ChunkRecord* restored,
                                InitFiles* files) {
  auto c = std::make_unique<Chunk>();
  c->spec = spec;
  c->group = group;
  const size_t n = spec.numel();
  absl::MutexLock lock(&c->mu);
  if (restored != nullptr) {
    if (restored->weights.size() != n ||
        !StateFits(restored->slots, spec, group->params)) {
      return absl::DataLossError(absl::StrCat("snapshot record for ",
                                              spec.tensor(), "#", spec.index(),
                                              " does not match its spec"));
    }
    c->rec = std::move(*restored);
  } else {
    c->rec.id = spec.chunk_id();
    c->rec.spec = spec.SerializeAsString();
    c->rec.weights.resize(n);
    STRATA_RETURN_IF_ERROR(FillChunkInit(spec, c->rec.weights.data(), files));
    c->rec.slots = ZeroState(spec, group->params);
  }
  c->tile_bytes = TileBytesOf(spec, group->params);
  if (options_.admit) STRATA_RETURN_IF_ERROR(options_.admit(*c));
  // Created after a rollback (a restarted server that held no snapshot):
  // in its generation, or no request could reach it.
  c->generation = generation_;
  c->generation_step = generation_step_;
  chunks_[spec.chunk_id()] = std::move(c);
  size_++;
  return absl::OkStatus();
}

absl::StatusOr<Chunk*> ChunkTable::Find(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = chunks_.find(id);
  if (it == chunks_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown chunk ", id, " on this server"));
  }
  return it->second.get();
}

std::vector<Chunk*> ChunkTable::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<Chunk*> all;
  all.reserve(chunks_.size());
  for (const auto& [id, c] : chunks_) all.push_back(c.get());
  return all;
}

std::string ChunkTable::GroupsMetadata() const {
  absl::MutexLock lock(&mu_);
  v1::RegisterChunksRequest meta;
  for (const auto& [name, g] : groups_) *meta.add_groups() = g->spec;
  std::sort(meta.mutable_groups()->begin(), meta.mutable_groups()->end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
  return meta.SerializeAsString();
}

absl::Status ChunkTable::RegisterGroups(const std::string& metadata) {
  v1::RegisterChunksRequest meta;
  if (!meta.ParseFromString(metadata))
    return absl::DataLossError("snapshot metadata is corrupt");
  return Register(meta).status();
}

absl::Status ChunkTable::RestoreChunk(ChunkRecord rec) {
  v1::ChunkSpec spec;
  if (!spec.ParseFromString(rec.spec)) {
    return absl::DataLossError(
        absl::StrCat("snapshot chunk ", rec.id, " has a corrupt spec"));
  }
  STRATA_RETURN_IF_ERROR(ValidateSpec(spec, options_.max_chunk_bytes));
  absl::MutexLock lock(&mu_);
  // Held already (a rollback of a running shard): the rollback sets its
  // state.
  if (chunks_.contains(rec.id)) return absl::OkStatus();
  auto g = groups_.find(spec.group());
  if (g == groups_.end()) {
    return absl::DataLossError(absl::StrCat(
        "snapshot chunk ", rec.id, " names unknown group ", spec.group()));
  }
  tensor_shapes_[spec.tensor()] = {spec.tensor_shape().begin(),
                                   spec.tensor_shape().end()};
  return Create(spec, g->second.get(), &rec, nullptr);
}

std::vector<Chunk*> ChunkTable::StartGeneration(uint64_t generation,
                                                int64_t step) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
  generation_step_ = step;
  std::vector<Chunk*> all;
  for (const auto& [id, c] : chunks_) all.push_back(c.get());
  return all;
}

std::pair<uint64_t, int64_t> ChunkTable::generation_start() const {
  absl::MutexLock lock(&mu_);
  return {generation_, generation_step_};
}

}  // namespace strata

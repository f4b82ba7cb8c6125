// Push and Pull requests as the parameter server's gRPC edge gets them:
// bytes parsed by PayloadMessage (common/wire.h), then handled by a Shard
// holding one Adam chunk with two live workers (ids 1 and 2). The first
// byte picks Push or Pull, and its second bit aims the request at the
// chunk the shard holds (its id is a hash the fuzzer would not guess). Any
// input ends in a Status; the shard's weights stay finite (no gradient may
// overflow its optimizer state).
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/chunk_plan.h"
#include "common/consistency.h"
#include "common/wire.h"
#include "optim/optimizer.h"
#include "server/shard.h"

namespace strata {
namespace {

Shard* NewShard() {
  ShardOptions o;
  o.consistency = *ParseConsistency("bsp");
  o.max_wait = absl::Milliseconds(1);  // a pull never blocks the run
  o.view_wait = absl::Milliseconds(1);
  auto* shard = new Shard(o);
  v1::RegisterChunksRequest reg;
  v1::GroupSpec* g = reg.add_groups();
  g->set_name("adam");
  g->mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAM);
  g->mutable_optimizer()->set_lr(0.01f);
  v1::ChunkSpec* c = reg.add_chunks();
  c->set_chunk_id(ChunkId("w", 0));
  c->set_tensor("w");
  c->set_numel(8);
  c->set_group("adam");
  c->add_tensor_shape(8);
  if (!shard->Register(reg).ok()) std::abort();
  v1::View view;
  view.set_epoch(1);
  view.set_workers_epoch(1);
  for (uint64_t id : {1, 2}) {
    v1::Member* m = view.add_workers();
    m->set_id(id);
    m->set_role(v1::ROLE_WORKER);
    m->set_joined_epoch(1);
  }
  shard->UpdateView(view);
  return shard;
}

}  // namespace
}  // namespace strata

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static Shard* shard = NewShard();
  if (size == 0) return 0;
  const bool push = data[0] & 1;
  const bool aim = data[0] & 2;
  static const uint64_t kChunk = ChunkId("w", 0);
  grpc::Slice slice(data + 1, size - 1);
  grpc::ByteBuffer buffer(&slice, 1);
  PayloadMessage message;
  if (push) {
    v1::PushRequest req;
    if (!message.Parse(buffer, v1::PushRequest::kDataFieldNumber, &req).ok())
      return 0;
    if (aim) req.set_chunk_id(kChunk);
    (void)shard->Push(req, message.payload_size(),
                      [&message](char* dst, size_t begin, size_t n) {
                        message.CopyPayload(dst, begin, n);
                        return absl::OkStatus();
                      });
  } else {
    v1::PullRequest req;
    if (!message.Parse(buffer, 0, &req).ok()) return 0;
    if (aim) req.set_chunk_id(kChunk);
    std::string out;
    auto pulled = shard->Pull(req, &out);
    if (pulled.ok()) {
      std::vector<float> w(out.size() / sizeof(float));
      std::memcpy(w.data(), out.data(), w.size() * sizeof(float));
      if (req.dtype() != v1::DTYPE_BF16 && !AllFinite(w.data(), w.size()))
        std::abort();
    }
  }
  return 0;
}

// Register and Heartbeat requests as the scheduler's handlers get them
// (protobuf bytes), applied to a Membership over an in-memory state store.
// The first byte picks the method. Any input ends in a Status, and the view
// holds only what a member could report (finite speeds, bounded clocks).
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "common/clock.h"
#include "scheduler/membership.h"
#include "scheduler/state_store.h"

namespace strata::scheduler_internal {
namespace {

struct World {
  std::unique_ptr<StateStore> store;
  std::unique_ptr<Membership> membership;
};

World* NewWorld() {
  auto* w = new World;
  auto store = StateStore::Open("");
  if (!store.ok()) std::abort();
  w->store = std::move(*store);
  auto state = w->store->Load();
  if (!state.ok()) std::abort();
  MembershipOptions o;
  o.num_shards = 2;
  o.lease = absl::Seconds(10);
  o.clock = Clock::Real();
  o.store = w->store.get();
  w->membership = std::make_unique<Membership>(o, *state);
  return w;
}

void CheckView(const v1::View& view) {
  for (const auto* members : {&view.servers(), &view.workers()}) {
    for (const v1::Member& m : *members) {
      if (!std::isfinite(m.samples_per_sec()) || m.samples_per_sec() < 0 ||
          m.clock() < -1 || m.address().size() > 256) {
        std::abort();
      }
    }
  }
}

}  // namespace
}  // namespace strata::scheduler_internal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using namespace strata::scheduler_internal;
  static World* world = NewWorld();
  if (size == 0) return 0;
  const char* body = reinterpret_cast<const char*>(data + 1);
  const int n = static_cast<int>(size - 1);
  if (data[0] & 1) {
    v1::RegisterRequest req;
    if (!req.ParseFromArray(body, n)) return 0;
    (void)world->membership->Register(req, nullptr);
  } else {
    v1::HeartbeatRequest req;
    if (!req.ParseFromArray(body, n)) return 0;
    (void)world->membership->Heartbeat(req);
  }
  const v1::View view = world->membership->View();
  CheckView(view);
  if (view.workers_size() + view.servers_size() > 64) {
    delete world;  // keep each input's cost small: start a fresh table
    world = NewWorld();
  }
  return 0;
}

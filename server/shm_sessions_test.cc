// The server's shared-memory sessions: how they end. A detach (or a new
// session of the same kind) waits for the accesses under way and refuses
// any later one, so a client that got the answer knows its region is no
// longer touched.
#include "server/shm_sessions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "absl/time/clock.h"

namespace strata {
namespace {

struct Attached {
  std::unique_ptr<ShmRegion> region;
  uint64_t id = 0;
};

// An attach of `region`, of this process, as member `member`'s.
v1::AttachShmRequest Request(const ShmRegion& region, uint64_t member,
                             bool tensors) {
  v1::AttachShmRequest req;
  req.set_member_id(member);
  req.set_pid(getpid());
  req.set_fd(region.fd());
  req.set_size(region.size());
  req.set_nonce(region.nonce());
  req.set_tensors(tensors);
  return req;
}

// A new region attached as member `member`'s.
Attached AttachOne(ShmSessions& sessions, uint64_t member, bool tensors) {
  Attached a;
  auto region = ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
  EXPECT_TRUE(region.ok()) << region.status();
  if (!region.ok()) return a;
  a.region = std::move(*region);
  auto id = sessions.Attach(Request(*a.region, member, tensors));
  EXPECT_TRUE(id.ok()) << id.status();
  if (id.ok()) a.id = *id;
  return a;
}

v1::ShmRef Ref(uint64_t id) {
  v1::ShmRef ref;
  ref.set_session(id);
  ref.set_offset(ShmRegion::kHeaderBytes);
  ref.set_size(4096);
  return ref;
}

// Runs `end` (a detach, or whatever ends the session) on another thread
// while a use of `span` is under way: `end` does not return before the use
// ends, uses that begin after it started are refused, and it returns once
// the use ends.
void ExpectEndWaitsForTheUse(const ShmSpan& span,
                             const std::function<void()>& end) {
  ShmUse use(span);
  ASSERT_TRUE(use.Begin());
  std::atomic<bool> ended{false};
  std::thread t([&] {
    end();
    ended = true;
  });
  // Once the end has begun, a new use is refused.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool refused = false;
  while (!refused && absl::Now() < deadline) {
    ShmUse probe(span);
    refused = !probe.Begin();
    if (!refused) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(refused);
  EXPECT_FALSE(ended.load()) << "the session ended under a use";
  use.End();
  t.join();
  EXPECT_TRUE(ended.load());
  ShmUse after(span);
  EXPECT_FALSE(after.Begin());
  EXPECT_TRUE(after.refused());
}

TEST(ShmSessions, ADetachWaitsForTheUseUnderWayAndRefusesLaterOnes) {
  ShmSessions sessions;
  Attached a = AttachOne(sessions, 7, /*tensors=*/true);
  ASSERT_NE(a.id, 0u);
  auto span = sessions.Resolve(Ref(a.id), 7);
  ASSERT_TRUE(span.ok()) << span.status();
  // Another member's request cannot name it.
  EXPECT_TRUE(absl::IsNotFound(sessions.Resolve(Ref(a.id), 8).status()));
  bool held = false;
  ExpectEndWaitsForTheUse(*span, [&] { held = sessions.Detach(a.id); });
  EXPECT_TRUE(held);
  EXPECT_TRUE(absl::IsNotFound(sessions.Resolve(Ref(a.id), 7).status()));
  EXPECT_FALSE(sessions.Detach(a.id));  // not held any more
  EXPECT_EQ(sessions.size(), 0u);
  EXPECT_TRUE(absl::IsNotFound(ShmUse::NoSessionError(a.id)));
}

// A client whose detach ran out of time detaches again while the server
// still waits for the use: the second detach waits too, never answering
// while the use is under way.
TEST(ShmSessions, ASecondDetachWaitsForTheSameUse) {
  ShmSessions sessions;
  Attached a = AttachOne(sessions, 7, /*tensors=*/true);
  auto span = sessions.Resolve(Ref(a.id), 7);
  ASSERT_TRUE(span.ok()) << span.status();
  ShmUse use(*span);
  ASSERT_TRUE(use.Begin());
  bool first_held = false;
  std::atomic<bool> first_ended{false}, second_ended{false};
  std::thread first([&] {
    first_held = sessions.Detach(a.id);
    first_ended = true;
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (bool refused = false; !refused && absl::Now() < deadline;) {
    ShmUse probe(*span);
    refused = !probe.Begin();
  }
  std::thread second([&] {
    sessions.Detach(a.id);
    second_ended = true;
  });
  // Give the second a moment to answer, as it did before it waited.
  for (int i = 0; i < 100 && !second_ended; ++i)
    absl::SleepFor(absl::Milliseconds(2));
  EXPECT_FALSE(second_ended.load()) << "a detach answered under a use";
  EXPECT_FALSE(first_ended.load());
  use.End();
  first.join();
  second.join();
  EXPECT_TRUE(first_held);
}

TEST(ShmSessions, ANewSessionOfTheSameKindEndsTheOldOneAsADetachWould) {
  ShmSessions sessions;
  Attached slots = AttachOne(sessions, 7, /*tensors=*/false);
  Attached old = AttachOne(sessions, 7, /*tensors=*/true);
  auto span = sessions.Resolve(Ref(old.id), 7);
  ASSERT_TRUE(span.ok()) << span.status();
  Attached replacement;
  ExpectEndWaitsForTheUse(
      *span, [&] { replacement = AttachOne(sessions, 7, /*tensors=*/true); });
  ASSERT_NE(replacement.id, 0u);
  EXPECT_NE(replacement.id, old.id);
  EXPECT_TRUE(absl::IsNotFound(sessions.Resolve(Ref(old.id), 7).status()));
  // The other kind stays.
  EXPECT_TRUE(sessions.Resolve(Ref(slots.id), 7).ok());
  EXPECT_TRUE(sessions.Resolve(Ref(replacement.id), 7).ok());
  EXPECT_EQ(sessions.size(), 2u);
}

// A member that leaves the view loses its sessions at once (the view's
// path does not wait); a detach of one whose use was under way still
// waits for that use, and once none is, the server forgets it.
TEST(ShmSessions, ADetachAfterTheMemberLeftStillWaitsForItsUse) {
  ShmSessions sessions;
  Attached gone = AttachOne(sessions, 7, /*tensors=*/true);
  Attached stays = AttachOne(sessions, 9, /*tensors=*/true);
  auto span = sessions.Resolve(Ref(gone.id), 7);
  ASSERT_TRUE(span.ok()) << span.status();
  ShmUse use(*span);
  ASSERT_TRUE(use.Begin());
  sessions.RetainOnly({9});
  EXPECT_EQ(sessions.size(), 1u);
  EXPECT_TRUE(absl::IsNotFound(sessions.Resolve(Ref(gone.id), 7).status()));
  ShmUse late(*span);
  EXPECT_FALSE(late.Begin());  // revoked at once
  use.End();
  // Held as ended-in-use: the detach finds it (and returns at once now).
  EXPECT_TRUE(sessions.Detach(gone.id));
  EXPECT_FALSE(sessions.Detach(gone.id));
  // Idle when its member left: forgotten then.
  sessions.RetainOnly({9, 11});
  Attached idle = AttachOne(sessions, 11, /*tensors=*/true);
  sessions.RetainOnly({9});
  EXPECT_FALSE(sessions.Detach(idle.id));
  EXPECT_TRUE(sessions.Resolve(Ref(stays.id), 9).ok());
}

// A member that left between the server's membership check and its
// attach gets no session: it would stay mapped until the next view change.
TEST(ShmSessions, AMemberThatLeftGetsNoSession) {
  ShmSessions sessions;
  sessions.RetainOnly({9});
  auto region = ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  const v1::AttachShmRequest req = Request(**region, 7, /*tensors=*/false);
  auto refused = sessions.Attach(req);
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_EQ(sessions.size(), 0u);
  sessions.RetainOnly({7, 9});  // it joined again (or the view caught up)
  auto attached = sessions.Attach(req);
  EXPECT_TRUE(attached.ok()) << attached.status();
}

}  // namespace
}  // namespace strata

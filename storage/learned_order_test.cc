// LearnedOrder: the order it learns and the spill order it gives; the
// misses it saves are tested through SpillStore (spill_store_test.cc).
#include "storage/learned_order.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(LearnedOrder, LearnsTheOrderTilesAreUsedIn) {
  LearnedOrder o;
  // Two steps of a backward pass then a forward one.
  for (int step = 0; step < 2; ++step) {
    for (uint64_t id : {5, 4, 3, 2, 1, 1, 2, 3, 4, 5}) o.Use(id);
  }
  // The next step's backward pass: after 5 then 4 come 3, 2, 1 (not 5
  // again, as the forward pass had it).
  o.Use(5);
  o.Use(4);
  EXPECT_EQ(o.Next(4, 3), (std::vector<uint64_t>{3, 2, 1}));
  // Its forward pass: after 1 then 2 come 3, 4, 5.
  for (uint64_t id : {3, 2, 1, 2}) o.Use(id);
  EXPECT_EQ(o.Next(2, 3), (std::vector<uint64_t>{3, 4, 5}));
  // After 5 the order turns back to 4, which the walk has: it stops
  // rather than repeat a tile.
  EXPECT_EQ(o.Next(2, 10), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(o.Next(9, 2), (std::vector<uint64_t>{}));  // never seen
}

TEST(LearnedOrder, PutsTheTileNeededLastFirst) {
  LearnedOrder o;
  for (int step = 0; step < 2; ++step) {
    for (uint64_t id : {4, 3, 2, 1, 0}) o.Use(id);
  }
  o.Use(4);
  o.Use(3);  // next: 2, 1, 0, then 4, then 3 again
  // 3 was just used: a whole cycle away, then 4, 0, 1, 2.
  EXPECT_EQ(o.FarthestFirst({0, 1, 2, 3, 4}),
            (std::vector<uint64_t>{3, 4, 0, 1, 2}));
  // Tiles never used (8, 7) go first of all, in the order given.
  EXPECT_EQ(o.FarthestFirst({2, 8, 3, 7}), (std::vector<uint64_t>{8, 7, 3, 2}));
  // The order changes (a new tile joins the cycle after 0): learned anew.
  for (uint64_t id : {2, 1, 0, 9, 4, 3, 2, 1, 0, 9, 4}) o.Use(id);
  EXPECT_EQ(o.FarthestFirst({9, 0, 3, 4}), (std::vector<uint64_t>{4, 9, 0, 3}));
}

TEST(LearnedOrder, AnOrderThatIsNotACycleIsWalkedFromEachLatestUse) {
  // 1 2 3 4 3 2 1 2 3 4 ...: from 4 the walk meets 3 and 2 and then 1
  // again after 2 (so not a cycle); its places hold only from 4.
  LearnedOrder o;
  for (uint64_t id : {1, 2, 3, 4, 3, 2, 1, 2, 3, 4}) o.Use(id);
  EXPECT_EQ(o.FarthestFirst({1, 2, 3, 4}), (std::vector<uint64_t>{4, 1, 2, 3}));
  o.Use(3);  // learned before: nothing changes but the latest use
  // Next come 2, 1, 2 (met again: the walk stops), so 4 is off the walk.
  EXPECT_EQ(o.FarthestFirst({1, 2, 3, 4}), (std::vector<uint64_t>{4, 3, 1, 2}));
}

TEST(LearnedOrder, WithNothingLearnedKeepsTheGivenOrder) {
  LearnedOrder o;
  EXPECT_EQ(o.FarthestFirst({3, 1, 2}), (std::vector<uint64_t>{3, 1, 2}));
  o.Use(1);
  // Only 1 is known (just used): the others, unknown, go first.
  EXPECT_EQ(o.FarthestFirst({1, 3, 2}), (std::vector<uint64_t>{3, 2, 1}));
}

}  // namespace
}  // namespace strata

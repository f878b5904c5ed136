// The settled prefix of a log (runtime/prefix_tracker.hpp), and where it would end once a
// batch about to be written is done too: what a stream's or a file's position, saved
// with the batch's rows, may cover.
#include "runtime/prefix_tracker.hpp"

#include <gtest/gtest.h>

#include <set>

using sluice::runtime::PrefixTracker;

namespace {
// Items 1..n read, item i at position 100 + i.
PrefixTracker read(std::uint64_t n) {
  PrefixTracker tracker;
  for (std::uint64_t i = 1; i <= n; ++i) tracker.delivered(i, 100 + i);
  return tracker;
}
auto in(std::set<std::uint64_t> batch) {
  return [batch](std::uint64_t item) { return batch.count(item) > 0; };
}
}  // namespace

TEST(PrefixTracker, TheDonePrefixStopsAtTheFirstItemNotSettled) {
  auto tracker = read(5);
  EXPECT_TRUE(tracker.settled(2));
  EXPECT_EQ(tracker.done_sequence(), 0u) << "1 is open: 2 is not covered";
  EXPECT_TRUE(tracker.settled(1));
  EXPECT_EQ(tracker.done_sequence(), 2u);
  EXPECT_EQ(tracker.done_position(), 102u);
  EXPECT_FALSE(tracker.settled(2)) << "settled twice";
  EXPECT_EQ(tracker.open(), 3u);
}

TEST(PrefixTracker, ABatchCountsAsDoneOnlyWhereNothingOpenComesBeforeIt) {
  auto tracker = read(6);
  EXPECT_FALSE(tracker.done_with(in({2, 3}))) << "1 is neither settled nor in the batch";
  const auto first = tracker.done_with(in({1, 2, 3}));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->first, 3u);
  EXPECT_EQ(first->second, 103u);
  EXPECT_EQ(tracker.done_sequence(), 0u) << "asking changes nothing";
  tracker.settled(1);
  tracker.settled(4);  // settled out of order: covered once 2 and 3 are
  const auto second = tracker.done_with(in({2, 3}));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->first, 4u) << "the batch joins the settled 4";
  EXPECT_EQ(second->second, 104u);
  const auto behind = tracker.done_with(in({6}));
  ASSERT_TRUE(behind);
  EXPECT_EQ(behind->first, 1u) << "5 is open before 6: only what is settled";
}

TEST(PrefixTracker, AfterAResumeTheCheckpointIsTheStart) {
  PrefixTracker tracker;
  tracker.resume(10, 500);
  EXPECT_EQ(tracker.done_with(in({})), (std::pair<std::uint64_t, std::uint64_t>{10, 500}))
      << "nothing new: where it resumed";
  tracker.delivered(5, 1);  // before the checkpoint: ignored
  EXPECT_EQ(tracker.open(), 0u);
  tracker.delivered(11, 520);
  EXPECT_EQ(tracker.done_with(in({11}))->second, 520u);
}

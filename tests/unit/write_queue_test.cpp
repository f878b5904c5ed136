// The sink writers' queue (pure logic): queue order, an ordered group held by one writer
// at a time until released, one record of a group per batch unless the writer's batches
// are all or nothing, and when a writer is woken.
#include "sinks/write_queue.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using sluice::sinks::OrderedWriteQueue;

namespace {
struct Item {
  std::string name;  // "a1": group a, first; "u3": unordered
  bool ordered() const { return name[0] != 'u'; }
};
OrderedWriteQueue<Item> make_queue() {
  return OrderedWriteQueue<Item>([](const Item& item) -> std::optional<std::string> {
    if (!item.ordered()) return std::nullopt;
    return item.name.substr(0, 1);
  });
}
std::vector<Item> items(std::initializer_list<const char*> names) {
  std::vector<Item> out;
  for (const char* n : names) out.push_back({n});
  return out;
}
std::vector<std::string> names(const std::vector<Item>& batch) {
  std::vector<std::string> out;
  for (const auto& item : batch) out.push_back(item.name);
  return out;
}
const int kWriterA = 0, kWriterB = 1;  // two writers: their addresses tell them apart
}  // namespace

TEST(OrderedWriteQueue, UnorderedItemsLeaveInQueueOrderInBatchesOfAtMostMax) {
  auto queue = make_queue();
  queue.push(items({"u1", "u2", "u3", "u4", "u5"}), 100);
  EXPECT_FALSE(queue.has_ordered());
  std::vector<std::string> claimed;
  EXPECT_EQ(names(queue.take(&kWriterA, false, 2, claimed)),
            (std::vector<std::string>{"u1", "u2"}));
  EXPECT_EQ(names(queue.take(&kWriterB, false, 2, claimed)),
            (std::vector<std::string>{"u3", "u4"}));
  EXPECT_EQ(names(queue.take(&kWriterA, false, 2, claimed)), (std::vector<std::string>{"u5"}));
  EXPECT_TRUE(claimed.empty());
  EXPECT_TRUE(queue.empty());
}

TEST(OrderedWriteQueue, AGroupHeldByOneWriterWaitsInOrderForItsRelease) {
  auto queue = make_queue();
  queue.push(items({"a1", "a2", "u1", "b1", "a3", "b2"}), 100);
  EXPECT_TRUE(queue.has_ordered());
  // Writer A's batches are all or nothing: a group's records share its batch.
  std::vector<std::string> held_by_a;
  EXPECT_EQ(names(queue.take(&kWriterA, true, 3, held_by_a)),
            (std::vector<std::string>{"a1", "a2", "u1"}));
  EXPECT_EQ(held_by_a, (std::vector<std::string>{"a"}));
  // Writer B skips group a (held by A) and takes the rest in order.
  std::vector<std::string> held_by_b;
  EXPECT_EQ(names(queue.take(&kWriterB, true, 10, held_by_b)),
            (std::vector<std::string>{"b1", "b2"}));
  EXPECT_EQ(held_by_b, (std::vector<std::string>{"b"}));
  // a3 waits for A's batch; nothing else is left for B meanwhile.
  std::vector<std::string> none;
  EXPECT_TRUE(queue.take(&kWriterB, true, 10, none).empty());
  EXPECT_EQ(queue.size(), 1u);
  queue.release(held_by_a);
  std::vector<std::string> now_b;
  EXPECT_EQ(names(queue.take(&kWriterB, true, 10, now_b)), (std::vector<std::string>{"a3"}));
  EXPECT_EQ(now_b, (std::vector<std::string>{"a"}));
  EXPECT_FALSE(queue.has_ordered());
}

TEST(OrderedWriteQueue, WithoutAllOrNothingBatchesAGroupHasOneRecordPerBatch) {
  auto queue = make_queue();
  queue.push(items({"a1", "a2", "b1", "a3"}), 100);
  std::vector<std::string> claimed;
  EXPECT_EQ(names(queue.take(&kWriterA, false, 10, claimed)),
            (std::vector<std::string>{"a1", "b1"}));
  queue.release(claimed);
  claimed.clear();
  EXPECT_EQ(names(queue.take(&kWriterA, false, 10, claimed)), (std::vector<std::string>{"a2"}));
  queue.release(claimed);
  claimed.clear();
  EXPECT_EQ(names(queue.take(&kWriterA, false, 10, claimed)), (std::vector<std::string>{"a3"}));
}

TEST(OrderedWriteQueue, AWriterWakesForABatchStartAFullBatchOrAnOrderedRecord) {
  auto queue = make_queue();
  EXPECT_TRUE(queue.push(items({"u1"}), 3));   // a batch can start: its timer begins
  EXPECT_FALSE(queue.push(items({"u2"}), 3));  // company for it: no wake-up
  EXPECT_TRUE(queue.push(items({"u3"}), 3));   // the batch is full
  EXPECT_FALSE(queue.push(items({"u4"}), 3));
  EXPECT_TRUE(queue.push(items({"a1"}), 3));  // an ordered record does not wait
}

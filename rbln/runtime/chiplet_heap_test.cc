#include "rbln/runtime/chiplet_heap.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

using ::testing::HasSubstr;

TEST(ChipletHeapTest, RoundsToAllocationUnit) {
  ChipletHeap heap(64 * 4096, 4096);
  auto a = heap.Allocate(1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(heap.BlockSize(*a), 4096u);
  auto b = heap.Allocate(4097);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(heap.BlockSize(*b), 8192u);
  EXPECT_EQ(heap.used_bytes(), 3 * 4096u);
  EXPECT_EQ(heap.RoundUp(0), 4096u);
}

TEST(ChipletHeapTest, FreeCoalescesNeighbours) {
  ChipletHeap heap(4 * 4096, 4096);
  auto a = heap.Allocate(4096);
  auto b = heap.Allocate(4096);
  auto c = heap.Allocate(4096);
  auto d = heap.Allocate(4096);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_FALSE(heap.Allocate(1).ok());
  ASSERT_TRUE(heap.Free(*b).ok());
  ASSERT_TRUE(heap.Free(*d).ok());
  EXPECT_EQ(heap.largest_free_block(), 4096u);
  ASSERT_TRUE(heap.Free(*c).ok());  // Joins b..d into one block.
  EXPECT_EQ(heap.largest_free_block(), 3 * 4096u);
  auto big = heap.Allocate(3 * 4096);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big, *b);
}

TEST(ChipletHeapTest, ExhaustionSaysRequestedAndFree) {
  ChipletHeap heap(2 * 4096, 4096);
  ASSERT_TRUE(heap.Allocate(4096).ok());
  auto r = heap.Allocate(2 * 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("requested 8192 bytes"));
  EXPECT_THAT(r.status().message(), HasSubstr("4096 bytes free"));
}

TEST(ChipletHeapTest, DoubleFreeIsAnError) {
  ChipletHeap heap(4096, 4096);
  auto a = heap.Allocate(10);
  ASSERT_TRUE(heap.Free(*a).ok());
  EXPECT_FALSE(heap.Free(*a).ok());
}

}  // namespace
}  // namespace rbln::runtime

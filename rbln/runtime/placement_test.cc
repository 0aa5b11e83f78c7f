#include "rbln/runtime/placement.h"

#include <vector>

#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

// spec: A2, A7 -- workers fill the chiplets of the group's first NPU, then
// the next NPU's, in group order.
TEST(PlacementTest, WorkersFillChipletsThenNpusInGroupOrder) {
  const std::vector<int> group = {2, 5};
  absl::StatusOr<std::vector<ComputeUnit>> units = PlaceWorkers("p", 8, group, 4);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 8u);
  for (int w = 0; w < 8; ++w) {
    EXPECT_EQ((*units)[w].npu, w < 4 ? 2 : 5) << w;
    EXPECT_EQ((*units)[w].chiplet, w % 4) << w;
  }
  EXPECT_EQ(ComputeUnitName((*units)[6]), "npu.5.chiplet.2");
}

TEST(PlacementTest, AtomGroupHasOneUnitPerNpu) {
  const std::vector<int> group = {0, 1, 2, 3};
  absl::StatusOr<std::vector<ComputeUnit>> units = PlaceWorkers("p", 3, group, 1);
  ASSERT_TRUE(units.ok()) << units.status();
  EXPECT_EQ((*units)[2].npu, 2);
  EXPECT_EQ((*units)[2].chiplet, 0);
}

TEST(PlacementTest, TooManyWorkersForTheGroupIsAClearError) {
  const std::vector<int> group = {0};
  absl::StatusOr<std::vector<ComputeUnit>> units = PlaceWorkers("prog", 8, group, 4);
  ASSERT_FALSE(units.ok());
  EXPECT_EQ(units.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(units.status().message());
  EXPECT_NE(message.find("program prog is split over 8 workers"), std::string::npos)
      << message;
  EXPECT_NE(message.find("[0]"), std::string::npos) << message;
  EXPECT_NE(message.find("num_devices=1"), std::string::npos) << message;
  EXPECT_NE(message.find("2 NPUs"), std::string::npos) << message;
}

}  // namespace
}  // namespace rbln::runtime

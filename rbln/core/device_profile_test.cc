// spec: A2, A9
#include "rbln/core/device_profile.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

class DeviceProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv(kEnvSimProfile);
    unsetenv(kEnvSimNpus);
    unsetenv(kEnvSimMemoryPerChiplet);
  }
};

TEST_F(DeviceProfileTest, DefaultIsOneRebel100Card) {
  absl::StatusOr<DeviceProfile> p = DeviceProfile::FromEnvironment();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->family, DeviceFamily::kRebel100);
  EXPECT_EQ(p->num_npus, 1);
  EXPECT_EQ(p->chiplets_per_npu, 4);
  EXPECT_GT(p->memory_per_chiplet, 0u);
  EXPECT_EQ(p->memory_per_chiplet % p->allocation_unit, 0u);
}

TEST_F(DeviceProfileTest, AtomHasOneChipletPerNpu) {
  setenv(kEnvSimProfile, "atom", 1);
  setenv(kEnvSimNpus, "4", 1);
  setenv(kEnvSimMemoryPerChiplet, "64MiB", 1);
  absl::StatusOr<DeviceProfile> p = DeviceProfile::FromEnvironment();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->family, DeviceFamily::kAtom);
  EXPECT_EQ(p->num_npus, 4);
  EXPECT_EQ(p->chiplets_per_npu, 1);
  EXPECT_EQ(p->memory_per_chiplet, 64u << 20);
  EXPECT_EQ(p->memory_per_npu(), 64u << 20);
}

TEST_F(DeviceProfileTest, UnknownProfileIsClearError) {
  setenv(kEnvSimProfile, "rebel200", 1);
  absl::StatusOr<DeviceProfile> p = DeviceProfile::FromEnvironment();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("RBLN_SIM_PROFILE"));
  EXPECT_THAT(p.status().message(), HasSubstr("rebel200"));
  EXPECT_THAT(p.status().message(), HasSubstr("rebel100, atom"));
}

TEST_F(DeviceProfileTest, MalformedMemorySizeIsClearError) {
  setenv(kEnvSimMemoryPerChiplet, "lots", 1);
  absl::StatusOr<DeviceProfile> p = DeviceProfile::FromEnvironment();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("RBLN_SIM_MEMORY_PER_CHIPLET"));
}

TEST_F(DeviceProfileTest, MemoryMustBeWholeAllocationUnits) {
  setenv(kEnvSimMemoryPerChiplet, "1000", 1);
  absl::StatusOr<DeviceProfile> p = DeviceProfile::FromEnvironment();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("allocation unit"));
}

TEST_F(DeviceProfileTest, NpuCountOutOfRange) {
  setenv(kEnvSimNpus, "0", 1);
  EXPECT_FALSE(DeviceProfile::FromEnvironment().ok());
}

}  // namespace
}  // namespace rbln

// spec: D5
#include "rbln/runtime/device_memory.h"

#include <cstring>

#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

constexpr uint64_t kChiplet = 1 << 20;

TEST(DeviceMemoryTest, ChipletsTileTheRange) {
  auto mem = DeviceMemory::Create(0, 4, kChiplet);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ((*mem)->size(), 4 * kChiplet);
  EXPECT_EQ((*mem)->chiplet_base(2), (*mem)->device_base() + 2 * kChiplet);
  EXPECT_EQ((*mem)->ChipletOf((*mem)->chiplet_base(3) + 17), 3);
  EXPECT_TRUE((*mem)->Contains((*mem)->device_base(), 4 * kChiplet));
  EXPECT_FALSE((*mem)->Contains((*mem)->device_base() + 1, 4 * kChiplet));
  EXPECT_FALSE((*mem)->Contains((*mem)->device_base() - 1, 1));
}

TEST(DeviceMemoryTest, BackingViewHoldsTheBytes) {
  auto mem = DeviceMemory::Create(0, 2, kChiplet);
  ASSERT_TRUE(mem.ok());
  uintptr_t addr = (*mem)->chiplet_base(1) + 64;
  auto view = (*mem)->Translate(addr, 8);
  ASSERT_TRUE(view.ok());
  std::memcpy(*view, "rblnrbln", 8);
  auto again = (*mem)->Translate(addr, 8);
  EXPECT_EQ(std::memcmp(*again, "rblnrbln", 8), 0);
  EXPECT_FALSE((*mem)->Translate((*mem)->device_base() + 2 * kChiplet - 4, 8).ok());
}

TEST(DeviceMemoryDeathTest, HostDereferenceOfDeviceAddressFaults) {
  auto mem = DeviceMemory::Create(0, 1, kChiplet);
  ASSERT_TRUE(mem.ok());
  // Write through the backing view so the page exists: the fault must come
  // from the protection of the device range, not from a missing page.
  std::memset(*(*mem)->Translate((*mem)->device_base(), 64), 7, 64);
  volatile const char* device =
      reinterpret_cast<const char*>((*mem)->device_base());
  EXPECT_DEATH({ [[maybe_unused]] char c = device[0]; }, "");
}

}  // namespace
}  // namespace rbln::runtime

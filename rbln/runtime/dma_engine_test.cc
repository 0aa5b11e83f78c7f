#include "rbln/runtime/dma_engine.h"

#include <vector>

#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

TEST(DmaEngineTest, RoundTripAndCounts) {
  auto mem = DeviceMemory::Create(0, 1, 1 << 20);
  ASSERT_TRUE(mem.ok());
  AddressSpace space({mem->get()});
  DmaEngine dma(&space);
  Counter* h2d = CounterRegistry::Global().Get("runtime/dma_h2d_bytes");
  Counter* d2h = CounterRegistry::Global().Get("runtime/dma_d2h_copies");
  Counter* d2d = CounterRegistry::Global().Get("runtime/dma_d2d_bytes");
  const int64_t h2d0 = h2d->value(), d2h0 = d2h->value(), d2d0 = d2d->value();

  std::vector<float> src = {1, 2, 3, 4};
  uintptr_t a = (*mem)->device_base();
  uintptr_t b = a + 4096;
  ASSERT_TRUE(dma.HostToDevice(a, src.data(), 16).ok());
  ASSERT_TRUE(dma.DeviceToDevice(b, a, 16).ok());
  std::vector<float> dst(4);
  ASSERT_TRUE(dma.DeviceToHost(dst.data(), b, 16).ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(h2d->value() - h2d0, 16);
  EXPECT_EQ(d2h->value() - d2h0, 1);
  EXPECT_EQ(d2d->value() - d2d0, 16);
}

// spec: K2 -- a strided descriptor: transpose a 3x4 matrix, broadcast a row,
// and write every other element of a destination, keeping the gaps.
TEST(DmaEngineTest, StridedDeviceToDevice) {
  auto mem = DeviceMemory::Create(0, 1, 1 << 20);
  ASSERT_TRUE(mem.ok());
  AddressSpace space({mem->get()});
  DmaEngine dma(&space);
  Counter* copies = CounterRegistry::Global().Get("runtime/dma_d2d_strided_copies");
  const int64_t copies0 = copies->value();
  std::vector<int32_t> m(12);
  for (int i = 0; i < 12; ++i) m[i] = i;  // 3x4 row-major
  const uintptr_t a = (*mem)->device_base();
  const uintptr_t b = a + 4096;
  ASSERT_TRUE(dma.HostToDevice(a, m.data(), m.size() * 4).ok());

  // dst [4,3] contiguous <- src = m.t() (sizes [4,3], strides [1,4]).
  ASSERT_TRUE(dma.DeviceToDeviceStrided(b, {3, 1}, a, {1, 4}, {4, 3}, 4).ok());
  std::vector<int32_t> t(12);
  ASSERT_TRUE(dma.DeviceToHost(t.data(), b, 48).ok());
  EXPECT_EQ(t, (std::vector<int32_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));

  // Broadcast row 1 (stride 0 over rows) into [2,4].
  ASSERT_TRUE(dma.DeviceToDeviceStrided(b, {4, 1}, a + 16, {0, 1}, {2, 4}, 4).ok());
  std::vector<int32_t> r(8);
  ASSERT_TRUE(dma.DeviceToHost(r.data(), b, 32).ok());
  EXPECT_EQ(r, (std::vector<int32_t>{4, 5, 6, 7, 4, 5, 6, 7}));

  // Every other element of an 8-element destination; the gaps keep -1.
  std::vector<int32_t> gaps(8, -1);
  ASSERT_TRUE(dma.HostToDevice(b, gaps.data(), 32).ok());
  ASSERT_TRUE(dma.DeviceToDeviceStrided(b, {2}, a, {1}, {4}, 4).ok());
  ASSERT_TRUE(dma.DeviceToHost(gaps.data(), b, 32).ok());
  EXPECT_EQ(gaps, (std::vector<int32_t>{0, -1, 1, -1, 2, -1, 3, -1}));
  EXPECT_EQ(copies->value() - copies0, 3);

  EXPECT_FALSE(dma.DeviceToDeviceStrided(b, {1}, a, {-1}, {4}, 4).ok());
}

TEST(DmaEngineTest, RejectsHostAddresses) {
  auto mem = DeviceMemory::Create(0, 1, 1 << 20);
  AddressSpace space({mem->get()});
  DmaEngine dma(&space);
  std::vector<char> host(16);
  EXPECT_FALSE(dma.DeviceToHost(host.data(),
                                reinterpret_cast<uintptr_t>(host.data()), 16)
                   .ok());
  EXPECT_FALSE(dma.HostToDevice((*mem)->device_base() + (1 << 20) - 8,
                                host.data(), 16)
                   .ok());
}

}  // namespace
}  // namespace rbln::runtime

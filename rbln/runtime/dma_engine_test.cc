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

#include "rbln/runtime/dma_engine.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/runtime/page_commit.h"

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

// spec: D2 -- a large upload into fresh device pages commits them ahead of
// the copy (one madvise, not a fault per page): the bytes land where they
// belong, the pages around an unaligned range keep their bytes, and small
// copies commit nothing.
TEST(DmaEngineTest, LargeCopiesCommitDevicePagesFirst) {
  const uint64_t size = 8 << 20;
  auto mem = DeviceMemory::Create(0, 1, size);
  ASSERT_TRUE(mem.ok());
  AddressSpace space({mem->get()});
  DmaEngine dma(&space);
  Counter* committed = CounterRegistry::Global().Get("runtime/dma_committed_bytes");
  const uintptr_t base = (*mem)->device_base();
  std::vector<uint8_t> marks(64, 0xAB);
  ASSERT_TRUE(dma.HostToDevice(base, marks.data(), marks.size()).ok());

  // 3 MiB + 100 bytes from byte 100: whole pages 4096 .. 3 MiB.
  const uint64_t n = (3 << 20) + 100;
  std::vector<uint8_t> src(n);
  for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  const int64_t before = committed->value();
  ASSERT_TRUE(dma.HostToDevice(base + 100, src.data(), n).ok());
  const int64_t after_upload = committed->value();
  if (KernelCanPopulateWrites()) {
    EXPECT_EQ(after_upload - before, (3 << 20) - 4096);
  } else {
    EXPECT_EQ(after_upload, before);
  }
  std::vector<uint8_t> back(n + 100);
  ASSERT_TRUE(dma.DeviceToHost(back.data(), base, n + 100).ok());
  EXPECT_EQ(0, std::memcmp(back.data(), marks.data(), 64));  // Kept.
  EXPECT_EQ(0, std::memcmp(back.data() + 100, src.data(), n));

  // A device copy of 4 MiB to another page-aligned place commits 4 MiB.
  ASSERT_TRUE(dma.DeviceToDevice(base + (4 << 20), base + 100, 4 << 20).ok());
  if (KernelCanPopulateWrites()) {
    EXPECT_EQ(committed->value() - after_upload, 4 << 20);
  }
  std::vector<uint8_t> copied(n);
  ASSERT_TRUE(dma.DeviceToHost(copied.data(), base + (4 << 20), n).ok());
  EXPECT_EQ(0, std::memcmp(copied.data(), src.data(), n));

  // Small copies do not commit ahead.
  const int64_t small_before = committed->value();
  ASSERT_TRUE(dma.HostToDevice(base + (7 << 20), src.data(), 64 << 10).ok());
  EXPECT_EQ(committed->value(), small_before);
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
// spec: D2 -- a commit of 16 MiB or more is split over the cores: every
// whole page of the range is committed once and the bytes land.
TEST(DmaEngineTest, HugeUploadsCommitTheirPagesOverSeveralCores) {
  const uint64_t size = 160 << 20;
  auto mem = DeviceMemory::Create(0, 1, size);
  ASSERT_TRUE(mem.ok());
  AddressSpace space({mem->get()});
  DmaEngine dma(&space);
  Counter* committed = CounterRegistry::Global().Get("runtime/dma_committed_bytes");
  const uint64_t n = (150 << 20) + 300;  // from byte 40: pages 4096 .. 150 MiB
  std::vector<uint8_t> src(n);
  for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 13 + 5);
  const int64_t before = committed->value();
  ASSERT_TRUE(dma.HostToDevice((*mem)->device_base() + 40, src.data(), n).ok());
  if (KernelCanPopulateWrites()) {
    EXPECT_EQ(committed->value() - before, (150 << 20) - 4096);
  }
  std::vector<uint8_t> back(n);
  ASSERT_TRUE(dma.DeviceToHost(back.data(), (*mem)->device_base() + 40, n).ok());
  EXPECT_EQ(0, std::memcmp(back.data(), src.data(), n));
}

}  // namespace rbln::runtime

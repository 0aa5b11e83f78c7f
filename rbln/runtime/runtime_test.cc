// spec: A9, E2, E7
#include "rbln/runtime/runtime.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

using ::testing::HasSubstr;

DeviceProfile SmallCard() {
  DeviceProfile p = DeviceProfile::ForFamily(DeviceFamily::kRebel100);
  p.memory_per_chiplet = 16 * 4096;
  p.num_npus = 2;
  return p;
}

TEST(RuntimeTest, SpreadsAllocationsOverChiplets) {
  auto rt = Runtime::Create(SmallCard());
  ASSERT_TRUE(rt.ok()) << rt.status();
  std::vector<int> chiplets;
  for (int i = 0; i < 4; ++i) {
    auto a = (*rt)->AllocatePhysical(1, 100, Runtime::kAnyChiplet, nullptr);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->npu, 1);
    EXPECT_EQ(a->size, 4096u);
    chiplets.push_back(a->chiplet);
  }
  EXPECT_THAT(chiplets, ::testing::UnorderedElementsAre(0, 1, 2, 3));
  EXPECT_EQ((*rt)->ChipletStats(1, 0).allocated_bytes.current, 4096);
  EXPECT_EQ((*rt)->UsedBytes(0, 0), 0u);
}

TEST(RuntimeTest, FreedBlocksAreCachedUntilEmptyCache) {
  // spec: E1
  auto rt = Runtime::Create(SmallCard());
  auto a = (*rt)->AllocatePhysical(0, 5000, Runtime::kAnyChiplet, nullptr);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*rt)->ChipletStats(0, a->chiplet).allocated_bytes.current, 8192);
  EXPECT_GT((*rt)->UsedBytes(0, a->chiplet), 0u);  // A whole segment.
  ASSERT_TRUE((*rt)->FreePhysical(*a).ok());
  EXPECT_EQ((*rt)->ChipletStats(0, a->chiplet).allocated_bytes.current, 0);
  EXPECT_GT((*rt)->UsedBytes(0, a->chiplet), 0u);  // Still cached.
  int dropped = 0;
  (*rt)->RegisterCacheDropper([&] { ++dropped; });
  (*rt)->EmptyCache();
  EXPECT_EQ((*rt)->UsedBytes(0, a->chiplet), 0u);
  EXPECT_EQ(dropped, 1);
  EXPECT_FALSE((*rt)->FreePhysical(DeviceAllocation{12345, 0, 0, 1}).ok());
}

TEST(RuntimeTest, OomNamesNpuChipletRequestedAndFree) {
  auto rt = Runtime::Create(SmallCard());
  // Total free is 4 x 64 KiB, but no single chiplet has 80 KiB.
  auto r = (*rt)->AllocatePhysical(0, 80 * 1024, Runtime::kAnyChiplet, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("NPU 0 chiplet 0"));
  EXPECT_THAT(r.status().message(), HasSubstr("tried to allocate 81920 bytes"));
  EXPECT_THAT(r.status().message(), HasSubstr("65536 bytes free and 0 cached"));
  EXPECT_THAT(r.status().message(), HasSubstr("262144 bytes free or cached in total"));
  EXPECT_EQ((*rt)->NpuStats(0).num_ooms, 1);
}

TEST(RuntimeTest, StoragesAreLazyUnlessEager) {
  // spec: D1
  auto lazy = Runtime::Create(SmallCard());
  uintptr_t a = *(*lazy)->storage().Create(0, 100);
  EXPECT_FALSE((*lazy)->storage().Info(a)->has_device_memory);
  EXPECT_EQ((*lazy)->UsedBytes(0, 0) + (*lazy)->UsedBytes(0, 1), 0u);
  auto eager = Runtime::Create(SmallCard(), RuntimeOptions{/*eager_malloc=*/true});
  uintptr_t b = *(*eager)->storage().Create(1, 100);
  auto info = (*eager)->storage().Info(b);
  ASSERT_TRUE(info->has_device_memory);
  EXPECT_EQ((*eager)->ChipletStats(1, info->chiplet).allocated_bytes.current, 4096);
}

TEST(RuntimeTest, NpuTotalsHaveExactPeaks) {
  // spec: E5, E6 -- the NPU's peak is the running maximum of its total,
  // kept exactly (the summary's total row only sums chiplet peaks).
  auto rt = Runtime::Create(SmallCard());
  auto a = (*rt)->AllocatePhysical(0, 8192, Runtime::kAnyChiplet, nullptr);  // chiplet 0
  ASSERT_TRUE((*rt)->FreePhysical(*a).ok());
  auto b = (*rt)->AllocatePhysical(0, 8192, Runtime::kAnyChiplet, nullptr);  // chiplet 0 again (least loaded)
  auto c = (*rt)->AllocatePhysical(0, 4096, Runtime::kAnyChiplet, nullptr);  // chiplet 1
  ASSERT_TRUE(b.ok() && c.ok());
  AllocatorStats total = (*rt)->NpuStats(0);
  EXPECT_EQ(total.allocated_bytes.current, 12288);
  EXPECT_EQ(total.allocated_bytes.peak, 12288);
  EXPECT_EQ(total.allocated_bytes.allocated, 20480);
  (*rt)->ResetPeakStats(0);
  ASSERT_TRUE((*rt)->FreePhysical(*b).ok());
  EXPECT_EQ((*rt)->NpuStats(0).allocated_bytes.peak, 12288);
  EXPECT_EQ((*rt)->NpuStats(0).allocated_bytes.current, 4096);
}

TEST(RuntimeTest, NpuTotalsStayTheSumOfTheChiplets) {
  // spec: E5, E6 -- the totals are updated from the chiplet that changed;
  // after any mix of allocations, frees, resets and cache flushes they are
  // still the chiplets' sums, and the peak their running maximum.
  auto rt = Runtime::Create(SmallCard());
  std::vector<DeviceAllocation> live;
  int64_t peak = 0;
  auto check = [&](int step) {
    AllocatorStats sum;
    for (int c = 0; c < 4; ++c) sum += (*rt)->ChipletStats(0, c);
    AllocatorStats total = (*rt)->NpuStats(0);
    auto want = sum.AllStats();
    auto got = total.AllStats();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i]->current, want[i]->current) << "step " << step << " stat " << i;
      ASSERT_EQ(got[i]->allocated, want[i]->allocated) << "step " << step << " stat " << i;
      ASSERT_EQ(got[i]->freed, want[i]->freed) << "step " << step << " stat " << i;
      ASSERT_GE(got[i]->peak, got[i]->current) << "step " << step << " stat " << i;
    }
    ASSERT_EQ(total.num_device_alloc, sum.num_device_alloc);
    ASSERT_EQ(total.num_device_free, sum.num_device_free);
    peak = std::max(peak, total.allocated_bytes.current);
    ASSERT_EQ(total.allocated_bytes.peak, peak) << "step " << step;
  };
  for (int step = 0; step < 200; ++step) {
    const int what = (step * 7919) % 11;
    if (what < 6 || live.empty()) {
      auto a = (*rt)->AllocatePhysical(0, 100 + (step % 5) * 3000, Runtime::kAnyChiplet, nullptr);
      if (a.ok()) live.push_back(*a);
    } else if (what < 10) {
      ASSERT_TRUE((*rt)->FreePhysical(live[step % live.size()]).ok());
      live.erase(live.begin() + step % live.size());
    } else if (step % 2 == 0) {
      (*rt)->ResetAccumulatedStats(0);
    } else {
      (*rt)->EmptyCache();
    }
    check(step);
  }
}

TEST(RuntimeTest, ProgramOwnedStoragesAreReservedNotAllocated) {
  // spec: E2 -- marked before it has device memory (a lazy constant): the
  // block it acquires later is program-owned; releasing the storage frees it.
  auto rt = Runtime::Create(SmallCard());
  StorageManager& storage = (*rt)->storage();
  uintptr_t constant = *storage.Create(0, 5000);
  uintptr_t user = *storage.Create(0, 100);
  ASSERT_TRUE(storage.SetProgramOwned(constant, true).ok());
  ASSERT_TRUE(storage.Bind(constant).ok());
  ASSERT_TRUE(storage.Bind(user).ok());
  EXPECT_TRUE(storage.Info(constant)->program_owned);
  EXPECT_FALSE(storage.Info(user)->program_owned);
  AllocatorStats total = (*rt)->NpuStats(0);
  EXPECT_EQ(total.allocated_bytes.current, 4096);
  EXPECT_EQ(total.active_bytes.current, 4096);
  EXPECT_EQ(total.program_bytes.current, 8192);
  EXPECT_GE(total.reserved_bytes.current, 12288);
  // Placement counts program-owned bytes as load: the user block went to
  // another chiplet than the constant.
  EXPECT_NE(storage.Info(user)->chiplet, storage.Info(constant)->chiplet);
  ASSERT_TRUE(storage.SetProgramOwned(constant, false).ok());
  EXPECT_EQ((*rt)->NpuStats(0).allocated_bytes.current, 12288);
  ASSERT_TRUE(storage.SetProgramOwned(constant, true).ok());
  ASSERT_TRUE(storage.Release(constant).ok());
  total = (*rt)->NpuStats(0);
  EXPECT_EQ(total.program_bytes.current, 0);
  EXPECT_EQ(total.allocated_bytes.current, 4096);
}

TEST(RuntimeTest, NpuIndexOutOfRange) {
  auto rt = Runtime::Create(SmallCard());
  auto r = (*rt)->AllocatePhysical(2, 1, Runtime::kAnyChiplet, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("NPU index 2 is out of range"));
  EXPECT_THAT(r.status().message(), HasSubstr("0..1"));
}

// set_per_process_memory_fraction (no SPEC ID; torch.cuda parity): the
// fraction limits each chiplet, and the OOM names NPU, chiplet and limit.
TEST(RuntimeTest, MemoryFractionLimitsEachChiplet) {
  auto rt = Runtime::Create(SmallCard());  // 64 KiB per chiplet.
  EXPECT_EQ((*rt)->MemoryFraction(0), 1.0);
  EXPECT_FALSE((*rt)->SetMemoryFraction(0, -0.5).ok());
  EXPECT_FALSE((*rt)->SetMemoryFraction(0, 1.5).ok());
  ASSERT_TRUE((*rt)->SetMemoryFraction(0, 0.5).ok());
  EXPECT_EQ((*rt)->MemoryFraction(0), 0.5);
  EXPECT_EQ((*rt)->MemoryFraction(1), 1.0);
  auto r = (*rt)->AllocatePhysical(0, 40 * 1024, 2, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("NPU 0 chiplet 2"));
  EXPECT_THAT(r.status().message(), HasSubstr("per-process memory fraction"));
  EXPECT_THAT(r.status().message(), HasSubstr("may reserve 0.5 of each chiplet of NPU 0"));
  EXPECT_TRUE((*rt)->AllocatePhysical(0, 32 * 1024, 2, nullptr).ok());
  EXPECT_TRUE((*rt)->AllocatePhysical(1, 40 * 1024, 2, nullptr).ok());  // Other NPU.
  ASSERT_TRUE((*rt)->SetMemoryFraction(0, 0.0).ok());
  EXPECT_FALSE((*rt)->AllocatePhysical(0, 100, 1, nullptr).ok());  // Nothing new.
  ASSERT_TRUE((*rt)->SetMemoryFraction(0, 1.0).ok());
  EXPECT_TRUE((*rt)->AllocatePhysical(0, 16 * 1024, 2, nullptr).ok());
}

class RecordingObserver : public AllocationObserver {
 public:
  void OnAllocationEvent(const AllocationEvent& event) override { events.push_back(event); }
  std::vector<AllocationEvent> events;
};

// Memory histories (no SPEC ID; torch.cuda parity): events carry the NPU,
// the chiplet and device addresses that match the block handed out.
TEST(RuntimeTest, ObserverSeesEventsWithDeviceAddresses) {
  auto rt = Runtime::Create(SmallCard());
  RecordingObserver observer;
  (*rt)->SetAllocationObserver(&observer);
  auto a = (*rt)->AllocatePhysical(1, 100, 3, nullptr);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*rt)->FreePhysical(*a).ok());
  (*rt)->SetAllocationObserver(nullptr);
  ASSERT_TRUE((*rt)->AllocatePhysical(1, 100, 3, nullptr).ok());
  ASSERT_EQ(observer.events.size(), 3u);  // segment, alloc, free
  EXPECT_EQ(observer.events[0].action, AllocationEvent::Action::kSegmentAlloc);
  const AllocationEvent& alloc = observer.events[1];
  EXPECT_EQ(alloc.action, AllocationEvent::Action::kAlloc);
  EXPECT_EQ(alloc.npu, 1);
  EXPECT_EQ(alloc.chiplet, 3);
  EXPECT_EQ(alloc.address, a->address);
  const std::vector<SegmentInfo> segments = (*rt)->ChipletSnapshot(1, 3);
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ((*rt)->ChipletBase(1, 3) + segments[0].blocks[0].offset, a->address);
  EXPECT_EQ(observer.events[2].address, a->address);
}

}  // namespace
}  // namespace rbln::runtime

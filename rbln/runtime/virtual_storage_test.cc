// spec: D1, D2, D3, D5, D6, D8
#include "rbln/runtime/virtual_storage.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/runtime/fake_physical_memory.h"

namespace rbln::runtime {
namespace {

using ::testing::HasSubstr;

// Counts of the transfers a step caused, read from the global counters.
struct Transfers {
  int64_t h2d, d2h, uploads, downloads, pushes;
  static Transfers Now() {
    CounterRegistry& r = CounterRegistry::Global();
    return {r.Get("runtime/dma_h2d_copies")->value(),
            r.Get("runtime/dma_d2h_copies")->value(),
            r.Get("storage/uploads")->value(),
            r.Get("storage/downloads")->value(),
            r.Get("storage/host_pushes")->value()};
  }
  Transfers operator-(const Transfers& o) const {
    return {h2d - o.h2d, d2h - o.d2h, uploads - o.uploads,
            downloads - o.downloads, pushes - o.pushes};
  }
};

class StorageManagerTest : public ::testing::Test {
 protected:
  StorageManager Make(bool eager = false) {
    return StorageManager(1, 64 << 20, &phys_, phys_.dma(), eager);
  }
  DataState State(StorageManager& m, uintptr_t a) { return m.Info(a)->state; }

  FakePhysicalMemory phys_;
};

TEST_F(StorageManagerTest, CreateIsLazy) {
  StorageManager m = Make();
  auto a = m.Create(0, 1000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(phys_.allocations, 0);
  EXPECT_FALSE(m.Info(*a)->has_device_memory);
  EXPECT_EQ(State(m, *a), DataState::kEmpty);
}

TEST_F(StorageManagerTest, EagerAcquiresAtCreate) {
  StorageManager m = Make(/*eager=*/true);
  auto a = m.Create(0, 1000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(phys_.allocations, 1);
  EXPECT_EQ(m.Info(*a)->device_bytes, 4096u);
}

TEST_F(StorageManagerTest, HostOnlyWorkNeverTouchesTheDevice) {
  // spec: D4 -- write and read back on the host: no device memory, no DMA.
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 16);
  const Transfers t0 = Transfers::Now();
  float in[4] = {1, 2, 3, 4}, out[4] = {};
  ASSERT_TRUE(m.WriteFromHost(a, in, 16).ok());
  ASSERT_TRUE(m.ReadToHost(out, a + 4, 12).ok());
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(State(m, a), DataState::kHostLatest);
  const Transfers d = Transfers::Now() - t0;
  EXPECT_EQ(d.h2d + d.d2h, 0);
  EXPECT_EQ(phys_.allocations, 0);
}

TEST_F(StorageManagerTest, EveryTransitionAndItsTransfers) {
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 16);
  float v[4] = {1, 2, 3, 4};

  // empty --device read--> empty, memory acquired, nothing uploaded.
  Transfers t = Transfers::Now();
  ASSERT_TRUE(m.MapForDevice(a, 16, DeviceAccess::kRead).ok());
  EXPECT_EQ(State(m, a), DataState::kEmpty);
  EXPECT_EQ((Transfers::Now() - t).h2d, 0);

  // empty --host write--> host-latest.
  ASSERT_TRUE(m.WriteFromHost(a, v, 16).ok());
  EXPECT_EQ(State(m, a), DataState::kHostLatest);

  // host-latest --device read--> in-sync: one upload.
  t = Transfers::Now();
  float* dev = static_cast<float*>(*m.MapForDevice(a, 16, DeviceAccess::kRead));
  EXPECT_EQ(State(m, a), DataState::kInSync);
  EXPECT_EQ((Transfers::Now() - t).uploads, 1);
  EXPECT_EQ(dev[3], 4);

  // in-sync --device read--> in-sync: nothing.
  t = Transfers::Now();
  ASSERT_TRUE(m.MapForDevice(a, 16, DeviceAccess::kRead).ok());
  EXPECT_EQ((Transfers::Now() - t).h2d, 0);

  // in-sync --host read--> in-sync: nothing.
  float out[4];
  ASSERT_TRUE(m.ReadToHost(out, a, 16).ok());
  EXPECT_EQ((Transfers::Now() - t).d2h, 0);

  // in-sync --device write--> device-latest.
  dev = static_cast<float*>(*m.MapForDevice(a, 16, DeviceAccess::kWrite));
  dev[0] = 10;
  EXPECT_EQ(State(m, a), DataState::kDeviceLatest);

  // device-latest --host read--> in-sync: one download.
  t = Transfers::Now();
  ASSERT_TRUE(m.ReadToHost(out, a, 4).ok());
  EXPECT_EQ(out[0], 10);
  EXPECT_EQ(State(m, a), DataState::kInSync);
  EXPECT_EQ((Transfers::Now() - t).downloads, 1);

  // in-sync --host write--> host-latest (device copy is stale).
  float w = 20;
  ASSERT_TRUE(m.WriteFromHost(a + 4, &w, 4).ok());
  EXPECT_EQ(State(m, a), DataState::kHostLatest);

  // host-latest --partial device write--> upload first, then device-latest.
  t = Transfers::Now();
  dev = static_cast<float*>(*m.MapForDevice(a + 8, 4, DeviceAccess::kWrite));
  EXPECT_EQ((Transfers::Now() - t).uploads, 1);
  EXPECT_EQ(State(m, a), DataState::kDeviceLatest);
  dev[0] = 30;

  // device-latest --host write--> pushed into device memory, stays.
  t = Transfers::Now();
  float x = 40;
  ASSERT_TRUE(m.WriteFromHost(a + 12, &x, 4).ok());
  EXPECT_EQ(State(m, a), DataState::kDeviceLatest);
  EXPECT_EQ((Transfers::Now() - t).pushes, 1);

  ASSERT_TRUE(m.ReadToHost(out, a, 16).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(10, 20, 30, 40));
}

// spec: D2 -- an in-sync storage's host copy can be freed: it becomes
// device-latest, and a host read downloads the bytes into a new copy.
TEST_F(StorageManagerTest, ReleasingTheHostCopyOfAnInSyncStorage) {
  StorageManager m = Make();
  const uintptr_t a = *m.Create(0, 16);
  float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE(m.WriteFromHost(a, v, 16).ok());
  EXPECT_EQ(m.Info(a)->host_bytes, 16u);
  EXPECT_EQ(*m.ReleaseHostCopy(a), 0u);  // host-latest: the only copy
  EXPECT_EQ(State(m, a), DataState::kHostLatest);
  ASSERT_TRUE(m.MapForDevice(a, 16, DeviceAccess::kRead).ok());
  EXPECT_EQ(State(m, a), DataState::kInSync);

  EXPECT_EQ(*m.ReleaseHostCopy(a + 4), 16u);  // any address inside it
  EXPECT_EQ(State(m, a), DataState::kDeviceLatest);
  EXPECT_EQ(m.Info(a)->host_bytes, 0u);
  EXPECT_EQ(*m.ReleaseHostCopy(a), 0u);  // device-latest: nothing to free

  Transfers t = Transfers::Now();
  float out[4];
  ASSERT_TRUE(m.ReadToHost(out, a, 16).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(1, 2, 3, 4));
  EXPECT_EQ((Transfers::Now() - t).downloads, 1);
  EXPECT_EQ(State(m, a), DataState::kInSync);
  EXPECT_EQ(m.Info(a)->host_bytes, 16u);
}

// spec: F3 -- an offloaded host copy (a file) is kept.
TEST_F(StorageManagerTest, AnOffloadedHostCopyIsNotReleased) {
  StorageManager m = Make();
  StorageManager::SetThreadOffloadDir(::testing::TempDir());
  const uintptr_t a = *m.Create(0, 64);
  StorageManager::SetThreadOffloadDir("");
  const char text[] = "offloaded";
  ASSERT_TRUE(m.WriteFromHost(a, text, sizeof(text)).ok());
  ASSERT_TRUE(m.MapForDevice(a, 64, DeviceAccess::kRead).ok());
  EXPECT_EQ(*m.ReleaseHostCopy(a), 0u);
  EXPECT_EQ(State(m, a), DataState::kInSync);
  EXPECT_NE(m.Info(a)->offload_path, "");
}

TEST_F(StorageManagerTest, WholeWriteOfHostLatestSkipsTheUpload) {
  // An op output that overwrites the whole storage needs no old bytes.
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 16);
  float v[4] = {};
  ASSERT_TRUE(m.WriteFromHost(a, v, 16).ok());
  Transfers t = Transfers::Now();
  ASSERT_TRUE(m.MapForDevice(a, 16, DeviceAccess::kWrite).ok());
  EXPECT_EQ((Transfers::Now() - t).uploads, 0);
  EXPECT_EQ(State(m, a), DataState::kDeviceLatest);
}

TEST_F(StorageManagerTest, ContentVersionChangesOnEveryWriteOnly) {
  // What a program derives from an input's bytes (packed weights) is kept
  // while the version stays: every kind of write must replace it, reads and
  // moves must not.
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 16), b = *m.Create(0, 16);
  auto version = [&](uintptr_t x) {
    uint64_t v = 0;
    EXPECT_TRUE(m.MapForDevice(x, 16, DeviceAccess::kRead, &v).ok());
    EXPECT_EQ(v, m.Info(x)->content_version);
    return v;
  };
  EXPECT_NE(version(a), version(b));  // unique across storages
  float v[4] = {1, 2, 3, 4}, out[4];
  uint64_t last = version(a);
  ASSERT_TRUE(m.WriteFromHost(a + 4, v, 4).ok());  // host write, device-latest
  EXPECT_NE(version(a), last);
  last = version(a);
  ASSERT_TRUE(m.ReadToHost(out, a, 16).ok());  // host read: in-sync
  ASSERT_TRUE(m.ReadFromDevice(out, a, 16).ok());
  EXPECT_EQ(version(a), last);
  ASSERT_TRUE(m.WriteFromHost(a, v, 16).ok());  // host write into the shadow
  EXPECT_NE(version(a), last);
  last = version(a);
  ASSERT_TRUE(m.MapForDevice(a, 16, DeviceAccess::kReadWrite).ok());
  EXPECT_NE(version(a), last);
  last = version(a);
  ASSERT_TRUE(m.CopyOnDevice(b, a, 16).ok());  // a is the source: unchanged
  EXPECT_EQ(version(a), last);
  const uint64_t before_copy = version(b);
  ASSERT_TRUE(m.CopyOnDevice(a, b, 8).ok());  // a is the destination
  EXPECT_NE(version(a), last);
  EXPECT_EQ(version(b), before_copy);
  // A storage created where a released one was gets a version of its own.
  last = version(a);
  ASSERT_TRUE(m.Release(a).ok());
  uintptr_t c = *m.Create(0, 16);
  if (c == a) EXPECT_NE(version(c), last);
}

TEST_F(StorageManagerTest, CopyOnDeviceMovesBytesWithoutHost) {
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 16), b = *m.Create(0, 16);
  float v[4] = {5, 6, 7, 8}, out[4];
  ASSERT_TRUE(m.WriteFromHost(a, v, 16).ok());
  ASSERT_TRUE(m.CopyOnDevice(b + 4, a, 8).ok());
  EXPECT_EQ(State(m, b), DataState::kDeviceLatest);
  ASSERT_TRUE(m.ReadToHost(out, b, 16).ok());
  EXPECT_EQ(out[1], 5);
  EXPECT_EQ(out[2], 6);
}

TEST_F(StorageManagerTest, ReadFromDeviceReadsDeviceDataWithARealTransfer) {
  // spec: D2 -- the read side of a host bounce (K3): a host-latest storage
  // is made device-resident first (one upload), then its bytes cross back
  // by DMA even though the host copy is current; the state is left in sync.
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 16);
  float v[4] = {1, 2, 3, 4}, out[2] = {};
  ASSERT_TRUE(m.WriteFromHost(a, v, 16).ok());
  Transfers t = Transfers::Now();
  ASSERT_TRUE(m.ReadFromDevice(out, a + 4, 8).ok());
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[1], 3);
  Transfers d = Transfers::Now() - t;
  EXPECT_EQ(d.uploads, 1);
  EXPECT_EQ(d.h2d, 1);
  EXPECT_EQ(d.d2h, 1);
  EXPECT_EQ(d.downloads, 0);  // Not a whole-storage download into the host copy.
  EXPECT_EQ(State(m, a), DataState::kInSync);

  // Device-latest: one D2H of the bytes asked for; the host copy stays stale.
  float* dev = static_cast<float*>(*m.MapForDevice(a, 16, DeviceAccess::kWrite));
  dev[3] = 40;
  Counter* d2h_bytes = CounterRegistry::Global().Get("runtime/dma_d2h_bytes");
  const int64_t bytes_before = d2h_bytes->value();
  t = Transfers::Now();
  ASSERT_TRUE(m.ReadFromDevice(out, a + 12, 4).ok());
  EXPECT_EQ(out[0], 40);
  d = Transfers::Now() - t;
  EXPECT_EQ(d.h2d, 0);
  EXPECT_EQ(d.d2h, 1);
  EXPECT_EQ(d2h_bytes->value() - bytes_before, 4);
  EXPECT_EQ(State(m, a), DataState::kDeviceLatest);
  EXPECT_FALSE(m.ReadFromDevice(out, a + 12, 8).ok());  // Past the storage's end.
}

// The NaN/Inf check reads its inputs in place (SPEC H8): a read of the host
// copy with ReadToHost's state change and transfers, without a copy out.
TEST_F(StorageManagerTest, ReadOnHostIsAHostReadInPlace) {
  StorageManager m = Make();
  const uintptr_t a = *m.Create(0, 16);
  float in[4] = {1, 2, 3, 4};
  ASSERT_TRUE(m.WriteFromHost(a, in, 16).ok());
  float* dev = static_cast<float*>(*m.MapForDevice(a, 16, DeviceAccess::kReadWrite));
  dev[2] = 30;
  ASSERT_EQ(State(m, a), DataState::kDeviceLatest);

  // device-latest: one download, then the bytes where a host read sees them.
  Transfers t = Transfers::Now();
  float seen[3] = {0, 0, 0};
  ASSERT_TRUE(m.ReadOnHost(a + 4, 12, [&](const void* bytes) {
                 std::memcpy(seen, bytes, 12);
               }).ok());
  EXPECT_EQ(seen[0], 2);
  EXPECT_EQ(seen[1], 30);
  EXPECT_EQ(seen[2], 4);
  EXPECT_EQ(State(m, a), DataState::kInSync);
  EXPECT_EQ((Transfers::Now() - t).downloads, 1);

  // in-sync: no transfer.
  t = Transfers::Now();
  int calls = 0;
  ASSERT_TRUE(m.ReadOnHost(a, 16, [&](const void*) { ++calls; }).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ((Transfers::Now() - t).d2h, 0);

  // Nothing to read: `read` is not called; a range outside a storage fails.
  ASSERT_TRUE(m.ReadOnHost(a, 0, [&](const void*) { ++calls; }).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(m.ReadOnHost(a + 8, 16, [&](const void*) { ++calls; }).ok());
  EXPECT_EQ(calls, 1);
}

TEST_F(StorageManagerTest, OomAtFirstDeviceUseNotAtCreate) {
  // spec: D3
  StorageManager m = Make();
  auto big = m.Create(0, 2 << 20);  // Larger than a 1 MiB chiplet.
  ASSERT_TRUE(big.ok());
  float v = 1;
  ASSERT_TRUE(m.WriteFromHost(*big, &v, 4).ok());
  auto mapped = m.MapForDevice(*big, 4, DeviceAccess::kRead);
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kResourceExhausted);
  // Nothing is lost: the host copy is still readable.
  float out = 0;
  ASSERT_TRUE(m.ReadToHost(&out, *big, 4).ok());
  EXPECT_EQ(out, 1);
}

TEST_F(StorageManagerTest, BindAcquiresAFlatRegionAtTheBase) {
  // spec: D6
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 8192);
  EXPECT_THAT(m.Bind(a + 64).message(), HasSubstr("start of a storage"));
  ASSERT_TRUE(m.Bind(a).ok());
  EXPECT_TRUE(m.Info(a)->bound);
  EXPECT_TRUE(m.Info(a)->has_device_memory);
}

TEST_F(StorageManagerTest, AlignLayoutColocatesWithoutHostCopies) {
  // spec: D7
  StorageManager m = Make();
  uintptr_t ref = *m.Create(0, 64), target = *m.Create(0, 64);
  EXPECT_THAT(m.AlignLayout(target, ref).message(), HasSubstr("ref's data on the device"));
  phys_.next_chiplet = 1;
  float v[16] = {3};
  ASSERT_TRUE(m.WriteFromHost(ref, v, 64).ok());
  ASSERT_TRUE(m.MapForDevice(ref, 64, DeviceAccess::kRead).ok());  // ref on chiplet 1
  phys_.next_chiplet = 0;
  ASSERT_TRUE(m.MapForDevice(target, 64, DeviceAccess::kWrite).ok());  // target on 0
  EXPECT_EQ(m.Info(target)->chiplet, 0);
  Counter* cross = CounterRegistry::Global().Get("storage/d2d_cross_chiplet_copies");
  Counter* same = CounterRegistry::Global().Get("storage/d2d_same_chiplet_copies");
  const int64_t cross0 = cross->value();
  ASSERT_TRUE(m.CopyOnDevice(target, ref, 64).ok());
  EXPECT_EQ(cross->value(), cross0 + 1);
  const Transfers t = Transfers::Now();
  ASSERT_TRUE(m.AlignLayout(target, ref).ok());
  EXPECT_EQ(m.Info(target)->chiplet, 1);
  EXPECT_EQ((Transfers::Now() - t).h2d + (Transfers::Now() - t).d2h, 0);
  const int64_t same0 = same->value();
  ASSERT_TRUE(m.CopyOnDevice(target, ref, 64).ok());
  EXPECT_EQ(same->value(), same0 + 1);
  float out[16];
  ASSERT_TRUE(m.ReadToHost(out, target, 64).ok());  // The moved block kept its data.
  EXPECT_EQ(out[0], 3);
  EXPECT_THAT(m.AlignLayout(target + 4, ref).message(), HasSubstr("start of both"));
}

TEST_F(StorageManagerTest, OffloadedShadowLivesInAFileUntilRelease) {
  // spec: F3
  StorageManager m = Make();
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(StorageManager::SetThreadOffloadDir(dir), "");
  uintptr_t a = *m.Create(0, 4096);
  EXPECT_EQ(StorageManager::SetThreadOffloadDir(""), dir);
  uintptr_t b = *m.Create(0, 64);  // Created after the block: in memory.
  const char text[] = "offloaded bytes";
  ASSERT_TRUE(m.WriteFromHost(a, text, sizeof(text)).ok());
  ASSERT_TRUE(m.WriteFromHost(b, text, sizeof(text)).ok());
  const std::string path = m.Info(a)->offload_path;
  ASSERT_EQ(path.rfind(dir, 0), 0u) << path;
  EXPECT_EQ(m.Info(b)->offload_path, "");
  FILE* f = fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  char buf[sizeof(text)] = {};
  ASSERT_EQ(fread(buf, 1, sizeof(text), f), sizeof(text));
  fclose(f);
  EXPECT_STREQ(buf, text);
  ASSERT_TRUE(m.Release(a).ok());
  EXPECT_NE(access(path.c_str(), F_OK), 0);  // Cleaned up with the storage.
}

TEST_F(StorageManagerTest, ReleaseFreesPhysicalAndRejectsStrangers) {
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 100);
  ASSERT_TRUE(m.Bind(a).ok());
  EXPECT_EQ(phys_.used(0), 4096u);
  ASSERT_TRUE(m.Release(a).ok());
  EXPECT_EQ(phys_.used(0), 0u);
  EXPECT_FALSE(m.Release(a).ok());
  EXPECT_FALSE(m.Contains(a));
  float v;
  EXPECT_THAT(m.ReadToHost(&v, a, 4).message(), HasSubstr("not inside a live rbln storage"));
}

TEST_F(StorageManagerTest, OutOfBoundsAccessIsRejected) {
  StorageManager m = Make();
  uintptr_t a = *m.Create(0, 16);
  float v[8] = {};
  EXPECT_FALSE(m.WriteFromHost(a + 8, v, 16).ok());
  EXPECT_FALSE(m.MapForDevice(a, 32, DeviceAccess::kRead).ok());
}

TEST(StorageManagerDeathTest, VirtualAddressesFaultOnTheHost) {
  // spec: D5
  FakePhysicalMemory phys;
  StorageManager m(1, 64 << 20, &phys, phys.dma(), /*eager=*/true);
  uintptr_t a = *m.Create(0, 64);
  EXPECT_DEATH({ [[maybe_unused]] volatile char c = *reinterpret_cast<char*>(a); }, "");
}

}  // namespace
}  // namespace rbln::runtime

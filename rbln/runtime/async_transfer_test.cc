// Asynchronous transfers through the storage manager, on a real runtime.
// spec: L1, L3, L5, M2, M3
#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/runtime/device_event.h"
#include "rbln/runtime/runtime.h"

namespace rbln::runtime {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Runtime> SmallRuntime() {
  DeviceProfile p = DeviceProfile::ForFamily(DeviceFamily::kAtom);
  p.memory_per_chiplet = 64 << 20;
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(p);
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(*rt);
}

// Holds `stream` until the returned notification is notified.
std::shared_ptr<absl::Notification> Hold(DeviceStream& stream) {
  auto gate = std::make_shared<absl::Notification>();
  stream.Enqueue("gate", [gate] {
    gate->WaitForNotification();
    return absl::OkStatus();
  });
  return gate;
}

TEST(AsyncTransferTest, UploadIntoBoundStorageIsQueuedAndOrdered) {  // spec: L1, M2
  auto rt = SmallRuntime();
  StorageManager& storage = rt->storage();
  const uint64_t n = 1 << 16;
  auto base = storage.Create(0, n);
  ASSERT_TRUE(base.ok());
  ASSERT_TRUE(storage.Bind(*base).ok());
  std::vector<char> src(n, 7);
  DeviceStream& stream = rt->Stream(0, 5);
  auto gate = Hold(stream);
  auto started = storage.WriteFromHostAsync(*base, src.data(), n, stream, nullptr);
  ASSERT_TRUE(started.ok() && *started);
  EXPECT_TRUE(storage.Info(*base)->transfer_pending);
  EXPECT_TRUE(rt->NpuBusy(0));
  gate->Notify();
  // A host read waits for the pending transfer: never stale bytes.
  std::vector<char> out(n, 0);
  ASSERT_TRUE(storage.ReadToHost(out.data(), *base, n).ok());
  EXPECT_EQ(out, src);
  EXPECT_FALSE(storage.Info(*base)->transfer_pending);
}

TEST(AsyncTransferTest, OnlyFlatRegionsTakeAsyncUploads) {  // spec: L1, L3
  auto rt = SmallRuntime();
  StorageManager& storage = rt->storage();
  const uint64_t n = 4096;
  std::vector<char> src(n, 1);
  DeviceStream& stream = rt->Stream(0, 1);
  auto lazy = storage.Create(0, n);
  auto started = storage.WriteFromHostAsync(*lazy, src.data(), n, stream, nullptr);
  ASSERT_TRUE(started.ok());
  EXPECT_FALSE(*started);  // No device memory yet (SPEC L2).
  ASSERT_TRUE(storage.Bind(*lazy).ok());
  EXPECT_TRUE(storage.Info(*lazy)->flat);
  ASSERT_TRUE(storage.MapForDevice(*lazy, n, DeviceAccess::kRead).ok());  // An op input.
  EXPECT_FALSE(storage.Info(*lazy)->flat);
  started = storage.WriteFromHostAsync(*lazy, src.data(), n, stream, nullptr);
  ASSERT_TRUE(started.ok());
  EXPECT_FALSE(*started);
}

TEST(AsyncTransferTest, KeepAliveIsReleasedWhenTheTransferFinished) {  // spec: L5
  auto rt = SmallRuntime();
  StorageManager& storage = rt->storage();
  const uint64_t n = 4096;
  auto base = storage.Create(0, n);
  ASSERT_TRUE(storage.Bind(*base).ok());
  auto host = std::make_shared<std::vector<char>>(n, 3);
  std::weak_ptr<std::vector<char>> watch = host;
  DeviceStream& stream = rt->Stream(0, 1);
  auto gate = Hold(stream);
  ASSERT_TRUE(*storage.WriteFromHostAsync(*base, host->data(), n, stream, host));
  host.reset();
  EXPECT_FALSE(watch.expired());  // The queued transfer still owns it.
  gate->Notify();
  ASSERT_TRUE(rt->SynchronizeNpu(0).ok());
  EXPECT_TRUE(watch.expired());
}

TEST(AsyncTransferTest, ReleaseWaitsForThePendingTransfer) {  // spec: L5
  auto rt = SmallRuntime();
  StorageManager& storage = rt->storage();
  const uint64_t n = 1 << 20;
  auto base = storage.Create(0, n);
  ASSERT_TRUE(storage.Bind(*base).ok());
  std::vector<char> src(n, 9);
  DeviceStream& stream = rt->Stream(0, 1);
  ASSERT_TRUE(*storage.WriteFromHostAsync(*base, src.data(), n, stream, nullptr));
  ASSERT_TRUE(storage.Release(*base).ok());
  EXPECT_TRUE(stream.Idle());  // The block went back only after the DMA.
}

TEST(AsyncTransferTest, RecordStreamDefersTheBlockUntilTheStreamPassed) {  // spec: L5
  auto rt = SmallRuntime();
  StorageManager& storage = rt->storage();
  const uint64_t n = 1 << 20;
  auto base = storage.Create(0, n);
  ASSERT_TRUE(storage.Bind(*base).ok());
  DeviceStream& stream = rt->Stream(0, 2);
  auto gate = Hold(stream);
  ASSERT_TRUE(storage.RecordStream(*base, stream).ok());
  const int64_t allocated = rt->NpuStats(0).allocated_bytes.current;
  ASSERT_TRUE(storage.Release(*base).ok());
  EXPECT_EQ(rt->NpuStats(0).allocated_bytes.current, allocated);  // Deferred.
  EXPECT_EQ(storage.FreeDeferredBlocks(/*wait=*/false), 1);
  gate->Notify();
  ASSERT_TRUE(rt->SynchronizeNpu(0).ok());
  EXPECT_EQ(storage.FreeDeferredBlocks(/*wait=*/false), 0);
  EXPECT_EQ(rt->NpuStats(0).allocated_bytes.current, allocated - static_cast<int64_t>(n));
}

TEST(AsyncTransferTest, DownloadAndErrorsSurfaceAtSynchronize) {  // spec: M2, M3
  auto rt = SmallRuntime();
  StorageManager& storage = rt->storage();
  const uint64_t n = 4096;
  auto base = storage.Create(0, n);
  std::vector<char> src(n, 5), out(n, 0);
  ASSERT_TRUE(storage.WriteFromHost(*base, src.data(), n).ok());
  DeviceStream& stream = rt->Stream(0, 3);
  auto started = storage.ReadToHostAsync(out.data(), *base, n, stream, nullptr);
  ASSERT_TRUE(started.ok());
  EXPECT_FALSE(*started);  // Host-latest: the bytes are not on the device.
  ASSERT_TRUE(storage.MapForDevice(*base, n, DeviceAccess::kReadWrite).ok());
  ASSERT_TRUE(*storage.ReadToHostAsync(out.data(), *base, n, stream, nullptr));
  // A DMA to an address that is not device memory fails on the worker...
  rt->dma().HostToDeviceAsync(stream, /*dst=*/16, src.data(), n, nullptr);
  // ... and is reported by the next synchronize, naming the transfer.
  const absl::Status status = rt->SynchronizeNpu(0);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("host->device transfer of 4096 bytes"));
  EXPECT_THAT(status.message(), HasSubstr("stream 3 of NPU 0"));
  EXPECT_EQ(out, src);
  EXPECT_TRUE(rt->SynchronizeNpu(0).ok());
}

}  // namespace
}  // namespace rbln::runtime

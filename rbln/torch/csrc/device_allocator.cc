#include "rbln/torch/csrc/device_allocator.h"

#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
constexpr size_t kAggregate =
    static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

// Hands out virtual storages (SPEC D1): physical memory is acquired by the
// runtime at the first device use, so statistics come from the runtime's
// physical allocators, not from here.
class RblnDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = CurrentDevice();
    const c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (nbytes == 0) return c10::DataPtr(nullptr, dev);
    absl::StatusOr<uintptr_t> address =
        RuntimeOrThrow().storage().Create(PhysicalNpu(device), nbytes);
    if (!address.ok()) ThrowStatus(address.status());
    void* ptr = reinterpret_cast<void*>(*address);
    return c10::DataPtr(ptr, ptr, &Delete, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    ThrowIfError(RuntimeOrThrow().storage().CopyOnDevice(
        reinterpret_cast<uintptr_t>(dest), reinterpret_cast<uintptr_t>(src),
        count));
  }

  bool initialized() override { return RuntimeCommitted(); }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats s;
    if (!RuntimeCommitted()) return s;
    runtime::Runtime& rt = RuntimeOrThrow();
    CheckDeviceIndex(device);
    const int npu = PhysicalNpu(device);
    int64_t used = 0;
    for (int c = 0; c < rt.profile().chiplets_per_npu; ++c) {
      used += static_cast<int64_t>(rt.UsedBytes(npu, c));
    }
    for (auto* stat : {&s.allocated_bytes[kAggregate], &s.reserved_bytes[kAggregate],
                       &s.active_bytes[kAggregate]}) {
      stat->increase(used);
    }
    return s;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex) override {}
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    runtime::Runtime& rt = RuntimeOrThrow();
    const int npu = PhysicalNpu(device);
    size_t free = 0;
    for (int c = 0; c < rt.profile().chiplets_per_npu; ++c) {
      free += rt.FreeBytes(npu, c);
    }
    return {free, rt.profile().memory_per_npu()};
  }

 private:
  static void Delete(void* ptr) {
    // A deleter must not throw; a failed release would be a runtime bug.
    (void)RuntimeOrThrow().storage().Release(reinterpret_cast<uintptr_t>(ptr));
  }
};

RblnDeviceAllocator g_allocator;

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

c10::DeviceAllocator* GetDeviceAllocator() { return &g_allocator; }

c10::DeviceIndex DeviceOfAddress(const void* address) {
  if (!RuntimeCommitted()) return -1;
  absl::StatusOr<runtime::StorageInfo> info =
      RuntimeOrThrow().storage().Info(reinterpret_cast<uintptr_t>(address));
  return info.ok() ? LogicalDeviceOfNpu(info->npu) : -1;
}

}  // namespace rbln::torch_backend

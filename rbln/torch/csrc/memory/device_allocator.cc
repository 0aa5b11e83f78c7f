#include "rbln/torch/csrc/memory/device_allocator.h"

#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/memory/memory_history.h"

namespace rbln::torch_backend {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
constexpr size_t kAggregate =
    static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

// Hands out virtual storages (SPEC D1): physical memory is acquired by the
// runtime at the first device use, so statistics come from the runtime's
// per-chiplet caching allocators, not from here. A logical device's
// statistics are those of the NPU that holds its eager allocations.
class RblnDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = CurrentDevice();
    const c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (nbytes == 0) return c10::DataPtr(nullptr, dev);
    absl::StatusOr<uintptr_t> address =
        RuntimeOrThrow().storage().Create(PhysicalNpu(device), nbytes,
                                          GatherAllocationContext());
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

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    if (RuntimeCommitted()) RuntimeOrThrow().EmptyCache();
  }
  // Tensor.record_stream: the block is released to the caching allocator
  // only after `stream` passed the point where the storage was freed.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get() == nullptr) return;
    TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
                "rbln: record_stream needs an rbln stream, got ", stream);
    CheckDeviceIndex(stream.device_index());
    runtime::Runtime& rt = RuntimeOrThrow();
    ThrowIfError(rt.storage().RecordStream(
        reinterpret_cast<uintptr_t>(ptr.get()),
        rt.Stream(PhysicalNpu(stream.device_index()), stream.id())));
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats out;
    CheckDeviceIndex(device);
    if (!RuntimeCommitted()) return out;  // Nothing acquired yet.
    runtime::AllocatorStats s = RuntimeOrThrow().NpuStats(PhysicalNpu(device));
    auto copy = [](c10::CachingAllocator::StatArray& to, const runtime::Stat& from) {
      to[kAggregate].current = from.current;
      to[kAggregate].peak = from.peak;
      to[kAggregate].allocated = from.allocated;
      to[kAggregate].freed = from.freed;
    };
    copy(out.allocation, s.allocation);
    copy(out.segment, s.segment);
    copy(out.active, s.active);
    copy(out.inactive_split, s.inactive_split);
    copy(out.allocated_bytes, s.allocated_bytes);
    copy(out.reserved_bytes, s.reserved_bytes);
    copy(out.active_bytes, s.active_bytes);
    copy(out.inactive_split_bytes, s.inactive_split_bytes);
    copy(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    CheckDeviceIndex(device);
    if (RuntimeCommitted()) RuntimeOrThrow().ResetAccumulatedStats(PhysicalNpu(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    CheckDeviceIndex(device);
    if (RuntimeCommitted()) RuntimeOrThrow().ResetPeakStats(PhysicalNpu(device));
  }
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
    const FreeContextScope free_context;
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

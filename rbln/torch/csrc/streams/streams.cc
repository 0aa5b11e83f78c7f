#include "rbln/torch/csrc/streams/streams.h"

#include <atomic>
#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/memory/device_allocator.h"

namespace rbln::torch_backend {
namespace {

constexpr c10::DeviceType kRbln = c10::DeviceType::PrivateUse1;

// Per thread, per device: the current stream id (0 until set).
std::vector<c10::StreamId>& ThreadCurrentIds() {
  thread_local std::vector<c10::StreamId> ids;
  return ids;
}

c10::Device Dev(c10::DeviceIndex device) { return c10::Device(kRbln, device); }

}  // namespace

c10::Stream DefaultStream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::UNSAFE, Dev(device), 0);
}

c10::Stream NewStream(c10::DeviceIndex device) {
  static std::atomic<c10::StreamId> next{kPoolSize + 1};
  return c10::Stream(c10::Stream::UNSAFE, Dev(device), next++);
}

c10::Stream PoolStream(c10::DeviceIndex device) {
  static std::atomic<uint32_t> next{0};
  return c10::Stream(c10::Stream::UNSAFE, Dev(device), 1 + next++ % kPoolSize);
}

c10::Stream CurrentStream(c10::DeviceIndex device) {
  std::vector<c10::StreamId>& ids = ThreadCurrentIds();
  const c10::StreamId id =
      device < static_cast<c10::DeviceIndex>(ids.size()) ? ids[device] : 0;
  return c10::Stream(c10::Stream::UNSAFE, Dev(device), id);
}

c10::Stream ExchangeStream(c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kRbln, "expected an rbln stream, got ",
              stream);
  const c10::DeviceIndex device = stream.device_index();
  CheckDeviceIndex(device);
  const c10::Stream old = CurrentStream(device);
  std::vector<c10::StreamId>& ids = ThreadCurrentIds();
  if (device >= static_cast<c10::DeviceIndex>(ids.size())) ids.resize(device + 1, 0);
  ids[device] = stream.id();
  return old;
}

runtime::DeviceStream& RuntimeStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kRbln, "expected an rbln stream, got ",
              stream);
  CheckDeviceIndex(stream.device_index());
  return RuntimeOrThrow().Stream(PhysicalNpu(stream.device_index()), stream.id());
}

void CompleteCurrentStreamWork(c10::DeviceIndex device) {
  if (!RuntimeCommitted()) return;  // No stream has work before the runtime.
  runtime::DeviceStream& stream = RuntimeStream(CurrentStream(device));
  if (stream.Idle()) return;
  ThrowIfErrorOn(Dev(device), stream.Synchronize());
}

void SynchronizeDeviceStreams(c10::DeviceIndex device) {
  CheckDeviceIndex(device);
  runtime::Runtime& rt = RuntimeOrThrow();
  ThrowIfErrorOn(Dev(device), rt.SynchronizeNpu(PhysicalNpu(device)));
}

namespace {

// Tensor.record_stream (CUDA-only in ATen): tells the allocator the storage
// is used by `s`'s queued work.
void RecordStream(at::Tensor& self, at::Stream s) {
  TORCH_CHECK(s.device_type() == kRbln, "rbln: record_stream needs an rbln stream, got ", s);
  GetDeviceAllocator()->recordStream(self.storage().data_ptr(), s);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("record_stream", RecordStream); }

}  // namespace
}  // namespace rbln::torch_backend

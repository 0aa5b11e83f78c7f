// The c10 device guard for rbln (PrivateUse1): devices, streams (see
// streams.h) and events (runtime::DeviceEvent behind the void* handle).
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "rbln/runtime/device_event.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/memory/device_allocator.h"
#include "rbln/torch/csrc/streams/streams.h"
#include "rbln/torch/csrc/streams/sync_debug.h"

namespace rbln::torch_backend {
namespace {

struct RblnGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  RblnGuardImpl() = default;
  explicit RblnGuardImpl(c10::DeviceType t) {
    TORCH_CHECK(t == static_type, "RblnGuardImpl made for ", t);
  }

  c10::DeviceType type() const override { return static_type; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == static_type, "expected an rbln device, got ", d);
    const c10::Device old = getDevice();
    if (d.has_index() && d.index() != old.index()) SetCurrentDevice(d.index());
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(static_type, CurrentDevice());
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == static_type, "expected an rbln device, got ", d);
    if (d.has_index()) SetCurrentDevice(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index() && d.index() >= 0 && d.index() < DeviceCountNoThrow()) {
      try {
        SetCurrentDevice(d.index());
      } catch (...) {
      }
    }
  }

  // A stream belongs to a concrete device: bare "rbln" (torch.Stream(device=
  // "rbln")) means the current one, as for CUDA.
  static c10::DeviceIndex Concrete(c10::Device d) {
    const c10::DeviceIndex index = d.has_index() ? d.index() : CurrentDevice();
    CheckDeviceIndex(index);
    return index;
  }
  c10::Stream getStream(c10::Device d) const override {
    return CurrentStream(Concrete(d));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return DefaultStream(Concrete(d));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return NewStream(Concrete(d));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d,
                                      bool /*high_priority*/) const override {
    return PoolStream(Concrete(d));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return ExchangeStream(s);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return DeviceCountNoThrow();
  }
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    return c10::DeviceCapability();
  }

  // Events: the handle is a runtime::DeviceEvent, made at the first record.
  // Every event keeps timestamps (taking one is cheap), so EventFlag only
  // matters to torch's own enable_timing check.
  static runtime::DeviceEvent* AsEvent(void* event) {
    return static_cast<runtime::DeviceEvent*>(event);
  }
  void record(void** event, const c10::Stream& stream,
              const c10::DeviceIndex device_index,
              const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "rbln: event of device ", static_cast<int>(device_index),
                " cannot be recorded on stream ", stream, " of another device");
    runtime::DeviceStream& target = RuntimeStream(stream);
    if (*event == nullptr) *event = new runtime::DeviceEvent();
    AsEvent(*event)->Record(target);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;  // Never recorded: nothing to wait for.
    AsEvent(event)->Block(RuntimeStream(stream));
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || AsEvent(event)->Query();
  }
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    CheckSynchronize("Event.synchronize()",
                     c10::Device(c10::DeviceType::PrivateUse1, CurrentDevice()));
    ThrowIfError(AsEvent(event)->Synchronize());
  }
  double elapsedTime(void* start, void* end,
                     const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "rbln: elapsed_time needs both events recorded; call record() "
                "on each first");
    absl::StatusOr<double> ms = runtime::DeviceEvent::ElapsedMs(*AsEvent(start),
                                                                *AsEvent(end));
    if (!ms.ok()) ThrowStatus(ms.status());
    return *ms;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    // A marker task holds its own reference to what it writes, so deleting
    // an event with queued markers is safe.
    delete AsEvent(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    if (!RuntimeCommitted()) return true;  // Nothing was ever queued.
    return RuntimeStream(stream).Idle();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    if (!RuntimeCommitted()) return;
    CheckSynchronize("Stream.synchronize()", stream.device());
    ThrowIfErrorOn(stream.device(), RuntimeStream(stream).Synchronize());
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    // synchronize() is a real use: it commits (SPEC A6).
    CheckSynchronize("torch.rbln.synchronize()",
                     c10::Device(c10::DeviceType::PrivateUse1,
                                 device_index < 0 ? CurrentDevice() : device_index));
    SynchronizeDeviceStreams(device_index < 0 ? CurrentDevice() : device_index);
  }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override {
    GetDeviceAllocator()->recordStream(data_ptr, stream);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, RblnGuardImpl);

}  // namespace
}  // namespace rbln::torch_backend

// The c10 device guard for rbln (PrivateUse1). Streams and events are
// synchronous for now: every runtime call completes before it returns, so
// the default stream is always idle and every event is complete.
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "rbln/torch/csrc/device_state.h"

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
  static c10::Device Concrete(c10::Device d) {
    return d.has_index() ? d : c10::Device(static_type, CurrentDevice());
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, Concrete(d));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, Concrete(d));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, Concrete(d));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d,
                                      bool /*high_priority*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, Concrete(d));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return DeviceCountNoThrow();
  }
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    return c10::DeviceCapability();
  }

  // Events: work is synchronous, so recording marks a completed point.
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = reinterpret_cast<void*>(1);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {
    RuntimeOrThrow();  // synchronize() is a real use: it commits (SPEC A6).
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, RblnGuardImpl);

}  // namespace
}  // namespace rbln::torch_backend

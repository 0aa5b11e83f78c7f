// at::PrivateUse1HooksInterface for rbln: availability, device count,
// current device, generators (generator.h: one per device, CPU algorithm).
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/memory/device_allocator.h"
#include "rbln/torch/csrc/memory/pinned_host_allocator.h"
#include "rbln/torch/csrc/memory/storage_resize.h"
#include "rbln/torch/csrc/rng/generator.h"

namespace rbln::torch_backend {
namespace {

class RblnHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return DeviceCountNoThrow() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return RuntimeCommitted();
  }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return DeviceCountNoThrow(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { SetCurrentDevice(d); }
  c10::DeviceIndex getCurrentDevice() const override { return CurrentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const c10::DeviceIndex old = CurrentDevice();
    if (d >= 0) SetCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    const c10::DeviceIndex old = CurrentDevice();
    if (d >= 0 && d < DeviceCountNoThrow()) SetCurrentDevice(d);
    return old;
  }
  at::Device getDeviceFromPtr(void* data) const override {
    const c10::DeviceIndex d = DeviceOfAddress(data);
    return at::Device(c10::DeviceType::PrivateUse1, d >= 0 ? d : CurrentDevice());
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return DefaultGenerator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return NewGenerator(index);
  }
  bool isPinnedPtr(const void* data) const override {
    return IsPinnedHostPtr(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return GetPinnedHostAllocator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override {
    ResizeStorageBytes(storage, new_bytes);
  }
};

const bool g_hooks_registered [[maybe_unused]] = [] {
  at::RegisterPrivateUse1HooksInterface(new RblnHooks());
  return true;
}();

}  // namespace
}  // namespace rbln::torch_backend

// at::PrivateUse1HooksInterface for rbln: availability, device count,
// current device, generators (the CPU generator's algorithm, per device).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <mutex>
#include <vector>

#include "rbln/torch/csrc/device_allocator.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/pinned_host_allocator.h"
#include "rbln/torch/csrc/storage_resize.h"

namespace rbln::torch_backend {
namespace {

// Random ops run through the CPU fallback with the CPU generator; an rbln
// generator still needs to exist for torch.Generator(device="rbln") and
// torch.manual_seed.
class RblnGeneratorImpl : public at::CPUGeneratorImpl {
 public:
  explicit RblnGeneratorImpl(c10::DeviceIndex index) {
    device_ = c10::Device(c10::DeviceType::PrivateUse1, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
};

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
    static std::vector<at::Generator>* generators = [] {
      auto* v = new std::vector<at::Generator>();
      for (c10::DeviceIndex i = 0; i < DeviceCountNoThrow(); ++i) {
        v->push_back(at::make_generator<RblnGeneratorImpl>(i));
      }
      return v;
    }();
    const c10::DeviceIndex i = index < 0 ? CurrentDevice() : index;
    CheckDeviceIndex(i);
    TORCH_CHECK(i < static_cast<c10::DeviceIndex>(generators->size()),
                "rbln: no default generator for device ", i);
    return (*generators)[i];
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<RblnGeneratorImpl>(index < 0 ? CurrentDevice()
                                                           : index);
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

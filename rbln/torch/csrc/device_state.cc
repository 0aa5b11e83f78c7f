#include "rbln/torch/csrc/device_state.h"

#include <atomic>

#include <c10/util/Exception.h>

#include "absl/strings/str_format.h"
#include "rbln/core/device_profile.h"

namespace rbln::torch_backend {
namespace {

std::atomic<runtime::Runtime*> g_committed{nullptr};
thread_local c10::DeviceIndex t_current_device = 0;

absl::StatusOr<int> PlannedDeviceCount() {
  if (runtime::Runtime* rt = g_committed.load()) return rt->num_npus();
  absl::StatusOr<DeviceProfile> profile = DeviceProfile::FromEnvironment();
  if (!profile.ok()) return profile.status();
  return profile->num_npus;
}

}  // namespace

void ThrowStatus(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    case absl::StatusCode::kOutOfRange:
      TORCH_CHECK_INDEX(false, message);
    case absl::StatusCode::kInvalidArgument:
      TORCH_CHECK_VALUE(false, message);
    case absl::StatusCode::kUnimplemented:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    default:
      TORCH_CHECK(false, message);
  }
}

c10::DeviceIndex DeviceCountNoThrow() noexcept {
  absl::StatusOr<int> count = PlannedDeviceCount();
  return count.ok() ? static_cast<c10::DeviceIndex>(*count) : 0;
}

c10::DeviceIndex DeviceCount() {
  absl::StatusOr<int> count = PlannedDeviceCount();
  if (!count.ok()) ThrowStatus(count.status());
  return static_cast<c10::DeviceIndex>(*count);
}

void CheckDeviceIndex(c10::DeviceIndex index) {
  const c10::DeviceIndex count = DeviceCount();
  // DeviceIndex is a char-sized integer: print it as a number.
  TORCH_CHECK_INDEX(index >= 0 && index < count, "rbln: device index ",
                    static_cast<int>(index), " is out of range: this process sees ",
                    static_cast<int>(count), " rbln device(s) (valid: rbln:0..rbln:",
                    static_cast<int>(count) - 1,
                    "); set RBLN_SIM_NPUS to simulate more NPUs");
}

c10::DeviceIndex CurrentDevice() { return t_current_device; }

void SetCurrentDevice(c10::DeviceIndex index) {
  CheckDeviceIndex(index);
  t_current_device = index;
}

runtime::Runtime& RuntimeOrThrow() {
  if (runtime::Runtime* rt = g_committed.load()) return *rt;
  absl::StatusOr<runtime::Runtime*> rt = runtime::Runtime::Get();
  if (!rt.ok()) ThrowStatus(rt.status());
  g_committed.store(*rt);
  return **rt;
}

bool RuntimeCommitted() { return g_committed.load() != nullptr; }

}  // namespace rbln::torch_backend

// Which NPUs this process sees and which one is current.
//
// Until the first real use, the device count is only *planned* from the
// environment (SPEC A6); RuntimeOrThrow() commits: it creates the simulated
// NPUs once, after which the environment is no longer read.
#ifndef RBLN_TORCH_CSRC_DEVICE_STATE_H_
#define RBLN_TORCH_CSRC_DEVICE_STATE_H_

#include <c10/core/Device.h>

#include <vector>

#include <functional>

#include "absl/status/status.h"
#include "rbln/core/device_map.h"
#include "rbln/core/device_profile.h"
#include "rbln/runtime/runtime.h"

namespace rbln::torch_backend {

// The simulated machine and its logical devices: planned from the
// environment until the first real use, fixed afterwards (SPEC A6).
struct DevicePlan {
  DeviceProfile profile;
  DeviceMap map;
};
absl::StatusOr<DevicePlan> CurrentPlan();

// Physical NPU id that holds eager allocations of a logical device.
int PhysicalNpu(c10::DeviceIndex device);
// Physical NPU ids of a logical device's RSD group, in group order (the
// NPUs compiled programs are split over, SPEC A7).
std::vector<int> PhysicalNpus(c10::DeviceIndex device);
// Logical device whose group holds `physical_npu`, or -1.
c10::DeviceIndex LogicalDeviceOfNpu(int physical_npu);

// Number of logical devices; 0 if the environment is invalid. Never throws.
c10::DeviceIndex DeviceCountNoThrow() noexcept;
// Number of logical devices; throws a RuntimeError naming the bad variable.
c10::DeviceIndex DeviceCount();

// Throws IndexError-style errors for indices outside [0, DeviceCount()).
void CheckDeviceIndex(c10::DeviceIndex index);

c10::DeviceIndex CurrentDevice();
void SetCurrentDevice(c10::DeviceIndex index);  // Checked.

// The committed runtime; throws with the runtime's error message. The first
// call commits the plan and prints its warnings once.
runtime::Runtime& RuntimeOrThrow();
bool RuntimeCommitted();
// True in a child forked after the parent committed the runtime (SPEC C1).
bool InBadFork();

// Registers a cache that torch.rbln.empty_cache() must drop (SPEC E1). Safe
// before the runtime exists (e.g. from static initializers).
void RegisterCacheDropper(std::function<void()> dropper);

// Runs `fn` on the runtime when it is committed (now, if it already is).
void OnCommit(std::function<void(runtime::Runtime&)> fn);

// Called by ThrowStatus before it throws an out-of-memory error, with the
// error's message; what it returns (if not empty) is appended to the
// message, e.g. where a memory snapshot was written. One observer; null
// removes it.
using OutOfMemoryObserver = std::function<std::string(const std::string& message)>;
void SetOutOfMemoryObserver(OutOfMemoryObserver observer);

// Throws a c10::Error (or c10::OutOfMemoryError for ResourceExhausted)
// carrying `status`'s message.
[[noreturn]] void ThrowStatus(const absl::Status& status);
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}
// As ThrowIfError, naming the logical device the failing work ran for
// ("rbln:1: ..."), e.g. on an OOM at the first device use of a tensor.
void ThrowIfErrorOn(c10::Device device, const absl::Status& status);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DEVICE_STATE_H_

#include "rbln/torch/csrc/device_state.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <vector>

#include <c10/util/Exception.h>

#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace rbln::torch_backend {
namespace {

std::atomic<runtime::Runtime*> g_committed{nullptr};
// Written once, before g_committed is published.
DevicePlan* g_committed_plan = nullptr;
std::mutex g_commit_mu;
// Droppers registered before the commit; handed to the runtime at commit.
std::vector<std::function<void()>>* g_pending_droppers = nullptr;
// OnCommit() functions waiting for the commit.
std::vector<std::function<void(runtime::Runtime&)>>* g_pending_on_commit = nullptr;
std::mutex g_oom_mu;
OutOfMemoryObserver* g_oom_observer = nullptr;  // Guarded by g_oom_mu.
thread_local c10::DeviceIndex t_current_device = 0;

// SPEC C1 (beyond): a child forked after the parent used the device inherits
// the parent's device mappings (shared memory) but no usable runtime; its
// first device call raises instead of corrupting the parent's tensors.
std::atomic<bool> g_in_bad_fork{false};
pid_t g_committed_pid = 0;

void MarkChildAfterFork() {
  if (g_committed.load() != nullptr) g_in_bad_fork.store(true);
}

void CheckNotInBadFork() {
  if (!g_in_bad_fork.load()) return;
  TORCH_CHECK(false, "rbln: this process (pid ", getpid(),
              ") was forked from pid ", g_committed_pid,
              " after that process had used the rbln device; a forked child "
              "cannot use the parent's runtime. Use the 'spawn' start method "
              "(torch.multiprocessing.set_start_method('spawn')), or fork "
              "before the first device use; DataLoader workers must not use "
              "rbln tensors.");
}

// The OOM observer's note for `message`; "" without one. Not re-entered: an
// OOM inside the observer itself is thrown as is.
std::string OutOfMemoryNote(const std::string& message) {
  thread_local bool in_observer = false;
  if (in_observer) return "";
  OutOfMemoryObserver observer;
  {
    std::lock_guard<std::mutex> lock(g_oom_mu);
    if (g_oom_observer == nullptr) return "";
    observer = *g_oom_observer;
  }
  in_observer = true;
  std::string note;
  try {
    note = observer(message);
  } catch (...) {
    // The OOM is the error to report, not the observer's failure.
  }
  in_observer = false;
  return note;
}

}  // namespace

void SetOutOfMemoryObserver(OutOfMemoryObserver observer) {
  std::lock_guard<std::mutex> lock(g_oom_mu);
  delete g_oom_observer;
  g_oom_observer = observer ? new OutOfMemoryObserver(std::move(observer)) : nullptr;
}

void OnCommit(std::function<void(runtime::Runtime&)> fn) {
  {
    std::lock_guard<std::mutex> lock(g_commit_mu);
    if (g_committed.load() == nullptr) {
      if (g_pending_on_commit == nullptr) {
        g_pending_on_commit = new std::vector<std::function<void(runtime::Runtime&)>>();
      }
      g_pending_on_commit->push_back(std::move(fn));
      return;
    }
  }
  fn(*g_committed.load());
}

void ThrowStatus(const absl::Status& status) {
  std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      message += OutOfMemoryNote(message);
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    case absl::StatusCode::kOutOfRange:
      TORCH_CHECK_INDEX(false, message);
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      TORCH_CHECK_VALUE(false, message);
    case absl::StatusCode::kUnimplemented:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    default:
      TORCH_CHECK(false, message);
  }
}

void ThrowIfErrorOn(c10::Device device, const absl::Status& status) {
  if (status.ok()) return;
  absl::string_view message = status.message();
  absl::ConsumePrefix(&message, "rbln: ");
  ThrowStatus(absl::Status(
      status.code(),
      absl::StrFormat("rbln:%d: %s", static_cast<int>(device.index()), message)));
}

absl::StatusOr<DevicePlan> CurrentPlan() {
  if (g_committed.load() != nullptr) return *g_committed_plan;
  absl::StatusOr<DeviceProfile> profile = DeviceProfile::FromEnvironment();
  if (!profile.ok()) return profile.status();
  absl::StatusOr<DeviceMap> map = PlanDeviceMap(*profile);
  if (!map.ok()) return map.status();
  return DevicePlan{*profile, *std::move(map)};
}

c10::DeviceIndex DeviceCountNoThrow() noexcept {
  try {
    absl::StatusOr<DevicePlan> plan = CurrentPlan();
    return plan.ok() ? static_cast<c10::DeviceIndex>(plan->map.devices.size()) : 0;
  } catch (...) {
    return 0;
  }
}

c10::DeviceIndex DeviceCount() {
  // Once committed the plan is immutable: no copy on the hot path.
  if (g_committed.load() != nullptr) {
    return static_cast<c10::DeviceIndex>(g_committed_plan->map.devices.size());
  }
  absl::StatusOr<DevicePlan> plan = CurrentPlan();
  if (!plan.ok()) ThrowStatus(plan.status());
  return static_cast<c10::DeviceIndex>(plan->map.devices.size());
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

bool InBadFork() { return g_in_bad_fork.load(); }

runtime::Runtime& RuntimeOrThrow() {
  CheckNotInBadFork();
  if (runtime::Runtime* rt = g_committed.load()) return *rt;
  std::lock_guard<std::mutex> lock(g_commit_mu);
  if (runtime::Runtime* rt = g_committed.load()) return *rt;
  absl::StatusOr<DevicePlan> plan = CurrentPlan();
  if (!plan.ok()) ThrowStatus(plan.status());
  absl::StatusOr<runtime::Runtime*> rt = runtime::Runtime::Get();
  if (!rt.ok()) ThrowStatus(rt.status());
  g_committed_plan = new DevicePlan(*std::move(plan));
  if (g_pending_droppers != nullptr) {
    for (auto& drop : *g_pending_droppers) (*rt)->RegisterCacheDropper(drop);
    g_pending_droppers->clear();
  }
  for (const std::string& warning : g_committed_plan->map.warnings) {
    TORCH_WARN("rbln: ", warning);
  }
  if (g_pending_on_commit != nullptr) {
    for (auto& fn : *g_pending_on_commit) fn(**rt);
    g_pending_on_commit->clear();
  }
  g_committed_pid = getpid();
  static const bool fork_handler_installed [[maybe_unused]] =
      pthread_atfork(nullptr, nullptr, &MarkChildAfterFork) == 0;
  g_committed.store(*rt);
  return **rt;
}

bool RuntimeCommitted() { return g_committed.load() != nullptr; }

void RegisterCacheDropper(std::function<void()> dropper) {
  std::lock_guard<std::mutex> lock(g_commit_mu);
  if (runtime::Runtime* rt = g_committed.load()) {
    rt->RegisterCacheDropper(std::move(dropper));
    return;
  }
  if (g_pending_droppers == nullptr) {
    g_pending_droppers = new std::vector<std::function<void()>>();
  }
  g_pending_droppers->push_back(std::move(dropper));
}

int PhysicalNpu(c10::DeviceIndex device) {
  CheckDeviceIndex(device);
  if (g_committed.load() != nullptr) {
    const DeviceMap& map = g_committed_plan->map;
    return map.visible_npus[map.devices[device].npus[0]];
  }
  absl::StatusOr<DevicePlan> plan = CurrentPlan();
  if (!plan.ok()) ThrowStatus(plan.status());
  // Eager work of a logical device runs on its first NPU (SPEC A7).
  return plan->map.visible_npus[plan->map.devices[device].npus[0]];
}

std::vector<int> PhysicalNpus(c10::DeviceIndex device) {
  CheckDeviceIndex(device);
  auto physical = [device](const DeviceMap& map) {
    std::vector<int> npus;
    for (int index : map.devices[device].npus) npus.push_back(map.visible_npus[index]);
    return npus;
  };
  if (g_committed.load() != nullptr) return physical(g_committed_plan->map);
  absl::StatusOr<DevicePlan> plan = CurrentPlan();
  if (!plan.ok()) ThrowStatus(plan.status());
  return physical(plan->map);
}

c10::DeviceIndex LogicalDeviceOfNpu(int physical_npu) {
  absl::StatusOr<DevicePlan> plan = CurrentPlan();
  if (!plan.ok()) return -1;
  for (size_t d = 0; d < plan->map.devices.size(); ++d) {
    for (int index : plan->map.devices[d].npus) {
      if (plan->map.visible_npus[index] == physical_npu) {
        return static_cast<c10::DeviceIndex>(d);
      }
    }
  }
  return -1;
}

}  // namespace rbln::torch_backend

#include "rbln/torch/csrc/streams/sync_debug.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/fallback_policy.h"

namespace rbln::torch_backend {
namespace {

std::atomic<int> g_mode{0};
thread_local std::optional<std::string> t_op;

void Report(const std::string& what) {
  const std::string where = UserSourceLocation();
  const std::string message = absl::StrFormat(
      "rbln: host-device synchronization: %s%s (torch.rbln sync debug mode is '%s'; "
      "explain() shows the same costs per region)",
      what, where.empty() ? "" : absl::StrFormat(" at %s", where),
      GetSyncDebugMode() == SyncDebugMode::kError ? "error" : "warn");
  if (GetSyncDebugMode() == SyncDebugMode::kError) {
    TORCH_CHECK(false, message,
                "; call torch.rbln.set_sync_debug_mode('default') to allow it");
  }
  TORCH_WARN(message);
}

}  // namespace

void SetSyncDebugMode(SyncDebugMode mode) { g_mode.store(static_cast<int>(mode)); }

SyncDebugMode GetSyncDebugMode() { return static_cast<SyncDebugMode>(g_mode.load()); }

void CheckHostRead(uintptr_t address, uint64_t n, bool always_device) {
  if (g_mode.load(std::memory_order_relaxed) == 0 || n == 0) return;
  if (!always_device) {
    // Only a device-latest storage needs the device's bytes (a D2H); an
    // unknown address is left to the read itself to report.
    absl::StatusOr<runtime::StorageInfo> info = RuntimeOrThrow().storage().Info(address);
    if (!info.ok() || info->state != runtime::DataState::kDeviceLatest) return;
  }
  Report(absl::StrFormat("%s reads %d bytes of device data on the host",
                         t_op ? *t_op : "a device-to-host copy", n));
}

void CheckSynchronize(const std::string& what, c10::Device device) {
  if (g_mode.load(std::memory_order_relaxed) == 0) return;
  Report(absl::StrFormat("%s waits for %s", t_op ? *t_op : what, device.str()));
}

SyncOpScope::SyncOpScope(absl::string_view op, absl::string_view why)
    : outermost_(g_mode.load(std::memory_order_relaxed) != 0 && !t_op.has_value()) {
  if (outermost_) t_op = absl::StrCat(op, why);
}

SyncOpScope::~SyncOpScope() {
  if (outermost_) t_op.reset();
}

}  // namespace rbln::torch_backend

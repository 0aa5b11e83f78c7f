// torch.rbln.set_sync_debug_mode: warn about, or refuse, host-device
// synchronizations as they happen -- the per-call twin of explain().
//
// A synchronization is a host read of device data (a D2H DMA the host waits
// for: .item(), .cpu(), printing, the NaN/Inf check's reads, ops that run on
// the CPU with device-resident inputs, dtype-converting copies through the
// host) and an explicit wait for the device (torch.rbln.synchronize(),
// Stream/Event.synchronize(), a synchronous copy that first waits for pending
// asynchronous transfers). Reading data whose latest copy is on the host
// (a tensor no device op wrote yet, or one already in sync) moves nothing and
// waits for nothing, so it is not one. Asynchronous copies are not either.
//
// Each report names the op (the innermost SyncOpScope, else the read itself)
// and the user's Python location, as the fallback log does.
#ifndef RBLN_TORCH_CSRC_SYNC_DEBUG_H_
#define RBLN_TORCH_CSRC_SYNC_DEBUG_H_

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace rbln::torch_backend {

// torch.cuda's values: 0 "default" (silent), 1 "warn", 2 "error".
enum class SyncDebugMode { kDefault = 0, kWarn = 1, kError = 2 };
void SetSyncDebugMode(SyncDebugMode mode);
SyncDebugMode GetSyncDebugMode();

// Call before a synchronous host read of [address, address + n) of an rbln
// storage, outside any runtime lock. `always_device`: the read takes the
// device's bytes whatever the storage's state (a copy through the host).
void CheckHostRead(uintptr_t address, uint64_t n, bool always_device = false);
// Call before an explicit wait for `device`'s work; `what` names the call.
void CheckSynchronize(const std::string& what, c10::Device device);

// Names the op on whose behalf this thread reads device data while the scope
// lives, as `op` followed by `why`; the outermost scope wins (a CPU
// fallback's own copies report the fallback's op). Costs nothing while the
// mode is "default".
class SyncOpScope {
 public:
  explicit SyncOpScope(absl::string_view op, absl::string_view why = "");
  ~SyncOpScope();
  SyncOpScope(const SyncOpScope&) = delete;
  SyncOpScope& operator=(const SyncOpScope&) = delete;

 private:
  bool outermost_;
};

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_SYNC_DEBUG_H_

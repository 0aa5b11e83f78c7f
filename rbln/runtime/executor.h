// Runs an Executable on device buffers: maps each buffer's virtual range to
// the physical bytes behind it (acquiring memory and uploading host-latest
// data as the storage state requires; outputs become device-latest), places
// the program's workers on the compute units of an NPU group (placement.h),
// gives each worker its workspace segment in its own chiplet's memory for
// the run, and calls the program. Counts runtime/executions, the slices run
// on each compute unit (runtime/slices/npu.N.chiplet.C), the runs split over
// several NPUs (runtime/multi_npu_executions) and the workspace bytes placed
// (runtime/workspace_bytes).
#ifndef RBLN_RUNTIME_EXECUTOR_H_
#define RBLN_RUNTIME_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "rbln/core/counters.h"
#include "rbln/core/dtype.h"
#include "rbln/runtime/executable.h"
#include "rbln/runtime/physical_memory.h"
#include "rbln/runtime/virtual_storage.h"

namespace rbln::runtime {

// A strided tensor in device memory. `address` is the virtual device address
// of element 0 (what PyTorch's data_ptr() returns).
struct DeviceBuffer {
  uintptr_t address = 0;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

class Executor {
 public:
  // `physical` provides workspace memory (null: programs that need
  // workspace fail); NPUs have `chiplets_per_npu` compute units each.
  explicit Executor(StorageManager* storage, PhysicalMemory* physical = nullptr,
                    int chiplets_per_npu = 1);

  // Runs `program` on the NPUs `group` (physical indices of the logical
  // device's RSD group, in order); empty: the NPU of the first argument.
  absl::Status Run(const Executable& program,
                   absl::Span<const DeviceBuffer> args,
                   absl::Span<const int> group = {});

  int chiplets_per_npu() const { return chiplets_per_npu_; }

  // Called after each run, once per compute unit the run used, with the
  // run's time in the program (all units of a run work concurrently). Set it
  // before the first Run.
  using BusyObserver = std::function<void(const ComputeUnit& unit, int64_t busy_ns)>;
  void SetBusyObserver(BusyObserver observer) { busy_observer_ = std::move(observer); }

 private:
  Counter* UnitCounter(const ComputeUnit& unit) ABSL_LOCKS_EXCLUDED(mu_);

  StorageManager* const storage_;
  PhysicalMemory* const physical_;
  const int chiplets_per_npu_;
  Counter* const executions_;
  Counter* const multi_npu_executions_;
  Counter* const workspace_bytes_;
  absl::Mutex mu_;
  // By npu * chiplets_per_npu + chiplet.
  absl::flat_hash_map<int64_t, Counter*> unit_counters_ ABSL_GUARDED_BY(mu_);
  BusyObserver busy_observer_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_EXECUTOR_H_

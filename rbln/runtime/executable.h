// The interface through which the runtime runs a compiled program. The
// compiler implements it; the runtime knows nothing of MLIR.
#ifndef RBLN_RUNTIME_EXECUTABLE_H_
#define RBLN_RUNTIME_EXECUTABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "rbln/core/dtype.h"
#include "rbln/runtime/compute_slices.h"

namespace rbln::runtime {

// A strided buffer as the program sees it. `data` points at element 0 of the
// view (storage offset already applied); sizes and strides are in elements.
struct BufferView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  // For an input, when non-zero: the storage's content version as the run
  // mapped it (StorageManager::MapForDevice) and the view's virtual address.
  // Two runs that see the same (content_address, content_version) see the
  // same bytes, so a program may keep what it derives from them (packed
  // weights) between runs. Zero: unknown, derive afresh.
  uint64_t content_version = 0;
  uintptr_t content_address = 0;
};

// Where one worker of a program runs: an NPU of the logical device's RSD
// group and one of that NPU's chiplets (SPEC A2, A7).
struct ComputeUnit {
  int npu = 0;
  int chiplet = 0;
};

// One worker's share of a run: its compute unit and its workspace segment,
// memory homed on that unit's chiplet (null when the program asked for
// none).
struct WorkerContext {
  ComputeUnit unit;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// A run placed on compute units: one WorkerContext per worker of the
// program, and the profiler's slice sink (null when it does not record).
struct ExecutionContext {
  std::vector<WorkerContext> workers;
  ComputeSliceSink* slices = nullptr;
};

class Executable {
 public:
  virtual ~Executable() = default;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  // `args` holds the inputs, then the outputs (written in place).
  virtual absl::Status Execute(absl::Span<const BufferView> args) const = 0;
  // Execute() that also reports compute slices, one per chiplet worker and
  // phase, to `slices` (never null) when the profiler records (SPEC O2; see
  // compute_slices.h). The default reports none: the run is then one phase
  // of worker 0. A program that runs on several chiplet workers overrides
  // this.
  virtual absl::Status ExecuteProfiled(absl::Span<const BufferView> args,
                                       ComputeSliceSink* slices) const {
    (void)slices;
    return Execute(args);
  }
  virtual std::string DebugName() const = 0;
  // True if the program writes input `input` in place (an updated input: a
  // KV cache it writes rows of); its buffer is then device-latest after the
  // run with a new content version. Other inputs are only read.
  virtual bool WritesInput(int input) const {
    (void)input;
    return false;
  }

  // Workers the program is split over (1: it runs on the calling thread).
  virtual int num_workers() const { return 1; }
  // Bytes of workspace each worker needs on its own chiplet (num_workers()
  // entries, or empty when the program needs none).
  virtual std::vector<int64_t> WorkspaceBytes() const { return {}; }
  // Runs with the workers placed and their workspace provided by the
  // caller (`context.workers` has num_workers() entries). The default is for
  // single-worker programs without workspace.
  virtual absl::Status ExecutePlaced(absl::Span<const BufferView> args,
                                     const ExecutionContext& context) const {
    return context.slices != nullptr ? ExecuteProfiled(args, context.slices)
                                     : Execute(args);
  }
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_EXECUTABLE_H_

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
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_EXECUTABLE_H_

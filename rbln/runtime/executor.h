// Runs an Executable on device buffers: translates each device address into
// the private backing view (after checking the whole strided range is device
// memory of one NPU) and calls the program. Counts runtime/executions.
#ifndef RBLN_RUNTIME_EXECUTOR_H_
#define RBLN_RUNTIME_EXECUTOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "rbln/core/counters.h"
#include "rbln/core/dtype.h"
#include "rbln/runtime/address_space.h"
#include "rbln/runtime/executable.h"

namespace rbln::runtime {

// A strided tensor in device memory. `address` is the device address of
// element 0 (what PyTorch's data_ptr() returns).
struct DeviceBuffer {
  uintptr_t address = 0;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

class Executor {
 public:
  explicit Executor(const AddressSpace* address_space);

  absl::Status Run(const Executable& program,
                   absl::Span<const DeviceBuffer> args);

 private:
  const AddressSpace* const address_space_;
  Counter* const executions_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_EXECUTOR_H_

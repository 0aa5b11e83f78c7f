// Runs an Executable on device buffers: maps each buffer's virtual range to
// the physical bytes behind it (acquiring memory and uploading host-latest
// data as the storage state requires; outputs become device-latest) and
// calls the program. Counts runtime/executions.
#ifndef RBLN_RUNTIME_EXECUTOR_H_
#define RBLN_RUNTIME_EXECUTOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "rbln/core/counters.h"
#include "rbln/core/dtype.h"
#include "rbln/runtime/executable.h"
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
  explicit Executor(StorageManager* storage);

  absl::Status Run(const Executable& program,
                   absl::Span<const DeviceBuffer> args);

 private:
  StorageManager* const storage_;
  Counter* const executions_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_EXECUTOR_H_

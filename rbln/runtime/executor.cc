#include "rbln/runtime/executor.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "rbln/core/status_macros.h"

namespace rbln::runtime {

Executor::Executor(StorageManager* storage)
    : storage_(storage),
      executions_(CounterRegistry::Global().Get("runtime/executions")) {}

absl::Status Executor::Run(const Executable& program,
                           absl::Span<const DeviceBuffer> args) {
  const size_t expected = program.num_inputs() + program.num_outputs();
  if (args.size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln: program %s takes %d buffers, got %d", program.DebugName(),
        expected, args.size()));
  }
  std::vector<BufferView> views(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const DeviceBuffer& arg = args[i];
    if (arg.sizes.size() != arg.strides.size()) {
      return absl::InvalidArgumentError("rbln: sizes and strides differ in rank");
    }
    for (int64_t stride : arg.strides) {
      if (stride < 0) {
        return absl::InvalidArgumentError("rbln: negative strides are not supported");
      }
    }
    const uint64_t nbytes = SpannedBytes(arg.dtype, arg.sizes, arg.strides);
    const DeviceAccess access = static_cast<int>(i) < program.num_inputs()
                                    ? DeviceAccess::kRead
                                    : DeviceAccess::kWrite;
    RBLN_ASSIGN_OR_RETURN(views[i].data,
                          storage_->MapForDevice(arg.address, nbytes, access));
    views[i].dtype = arg.dtype;
    views[i].sizes = arg.sizes;
    views[i].strides = arg.strides;
  }
  // Time inside the program (explain()'s "in librbln"), without mapping.
  static Counter* const execution_ns =
      CounterRegistry::Global().Get("runtime/execution_ns");
  const auto start = std::chrono::steady_clock::now();
  RBLN_RETURN_IF_ERROR(program.Execute(views));
  execution_ns->Add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count());
  executions_->Increment();
  return absl::OkStatus();
}

}  // namespace rbln::runtime

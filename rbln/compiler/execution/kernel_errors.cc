#include "rbln/compiler/execution/kernel_errors.h"

#include <type_traits>

#include "rbln/compiler/execution/chiplet_team.h"

namespace rbln::compiler {
namespace {

// Only the first report counts: later ones are usually the same bad value
// seen again by another output element.
thread_local std::optional<KernelError> first_error;

// A report belongs to the chiplet worker that made it, also when workers
// share a thread (a worker's report must survive the others' Clear calls
// while it waits at a barrier).
static_assert(std::is_trivially_copyable_v<std::optional<KernelError>>);
const bool first_error_is_worker_local = RegisterWorkerLocal(
    +[]() -> void* { return &first_error; }, sizeof(first_error));

void Report(const KernelError& e) {
  if (!first_error.has_value()) first_error = e;
}

}  // namespace

extern "C" void rbln_report_index_error(int64_t site, int64_t index,
                                        int64_t bound) {
  Report({KernelError::Kind::kIndexOutOfRange, site, index, bound});
}

extern "C" void rbln_report_zero_division(int64_t site) {
  Report({KernelError::Kind::kZeroDivision, site, 0, 0});
}

void ClearKernelError() { first_error.reset(); }

std::optional<KernelError> TakeKernelError() {
  std::optional<KernelError> e = first_error;
  first_error.reset();
  return e;
}

}  // namespace rbln::compiler

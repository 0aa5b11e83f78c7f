#include "rbln/compiler/kernel_errors.h"

namespace rbln::compiler {
namespace {

// Only the first report counts: later ones are usually the same bad index
// seen again by another output element.
thread_local std::optional<IndexError> first_error;

}  // namespace

extern "C" void rbln_report_index_error(int64_t site, int64_t index,
                                        int64_t bound) {
  if (!first_error.has_value()) first_error = IndexError{site, index, bound};
}

void ClearKernelError() { first_error.reset(); }

std::optional<IndexError> TakeKernelError() {
  std::optional<IndexError> e = first_error;
  first_error.reset();
  return e;
}

}  // namespace rbln::compiler

// Errors that native kernels raise at run time (SPEC P8).
//
// A kernel cannot return a Status. It calls one of the C functions below and
// goes on so that it stays in bounds: a gather whose index is out of range
// calls kReportIndexErrorSymbol(site, index, bound) and uses the index
// clamped into range; an integer division by zero calls
// kReportZeroDivisionSymbol(site) and divides by 1 instead.
// CompiledProgram::Execute clears the calling thread's report slot before the
// call and turns the first report of the call into an error Status afterwards
// (kernels run on the calling thread; the slot is the chiplet worker's when
// workers share a thread, see RegisterWorkerLocal). `site` is the reporting node's
// position in the graph, so the message can name the op.
#ifndef RBLN_COMPILER_EXECUTION_KERNEL_ERRORS_H_
#define RBLN_COMPILER_EXECUTION_KERNEL_ERRORS_H_

#include <cstdint>
#include <optional>

#include "rbln/compiler/abi/kernel_abi.h"

namespace rbln::compiler {

struct KernelError {
  enum class Kind { kIndexOutOfRange, kZeroDivision };
  Kind kind;
  int64_t site;   // node position in the graph
  int64_t index;  // kIndexOutOfRange: the offending index value
  // kIndexOutOfRange: valid indices are [0, bound); a negative bound -n
  // means [-n, n) (negative indices count from the end, as in advanced
  // indexing).
  int64_t bound;
};

// The functions kernels call; their addresses are given to the JIT by name.
extern "C" void rbln_report_index_error(int64_t site, int64_t index,
                                        int64_t bound);
extern "C" void rbln_report_zero_division(int64_t site);

// Forgets any report on the calling thread.
void ClearKernelError();
// The first report on the calling thread since ClearKernelError().
std::optional<KernelError> TakeKernelError();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_EXECUTION_KERNEL_ERRORS_H_

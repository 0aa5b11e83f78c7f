// Errors that native kernels raise at run time (SPEC P8).
//
// A kernel cannot return a Status. A gather whose index is out of range calls
// the C function kReportIndexErrorSymbol(site, index, bound) and goes on with
// the index clamped into range, so it never reads out of bounds.
// CompiledProgram::Execute clears the calling thread's report slot before the
// call and turns the first report of the call into an error Status afterwards
// (kernels run on the calling thread). `site` is the gather node's position
// in the graph, so the message can name the op.
#ifndef RBLN_COMPILER_KERNEL_ERRORS_H_
#define RBLN_COMPILER_KERNEL_ERRORS_H_

#include <cstdint>
#include <optional>

namespace rbln::compiler {

inline constexpr char kReportIndexErrorSymbol[] = "rbln_report_index_error";

struct IndexError {
  int64_t site;   // node position in the graph
  int64_t index;  // the offending index value
  int64_t bound;  // valid indices are [0, bound)
};

// The function kernels call; its address is given to the JIT by name.
extern "C" void rbln_report_index_error(int64_t site, int64_t index,
                                        int64_t bound);

// Forgets any report on the calling thread.
void ClearKernelError();
// The first report on the calling thread since ClearKernelError().
std::optional<IndexError> TakeKernelError();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNEL_ERRORS_H_

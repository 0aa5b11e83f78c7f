// The LLVM optimization pipeline a kernel's module runs before the JIT
// generates its machine code.
#ifndef RBLN_COMPILER_EXECUTION_KERNEL_OPTIMIZER_H_
#define RBLN_COMPILER_EXECUTION_KERNEL_OPTIMIZER_H_

#include "llvm/IR/Module.h"
#include "llvm/Support/Error.h"
#include "llvm/Target/TargetMachine.h"

namespace rbln::compiler {

// Runs LLVM's -O2 module pipeline on `module` for `machine`'s CPU, with the
// loop and SLP vectorizers but without loop unrolling. A kernel's loops are
// element-wise and reduction loops around library calls, and the vectorizer
// interleaves them on its own. Unrolling (full unrolls of the constant-trip
// scalar loops the vectorizer keeps behind its alias checks, partial and
// runtime unrolls of the vector loops) made a Llama-3.2-1B decoder layer's
// machine code 6x larger and its compile 3x slower, for element-wise kernels
// within ~10% and model forwards within noise (docs/llm-profile.md).
// No fast-math flags: LLVM may vectorize but not reassociate.
llvm::Error OptimizeKernelModule(llvm::Module& module,
                                 llvm::TargetMachine* machine);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_EXECUTION_KERNEL_OPTIMIZER_H_

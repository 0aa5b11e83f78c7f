// BindOutputs: makes each returned tensor be computed in its output argument.
//
// The kernel takes one `{bufferization.writable}` tensor argument per result.
// Fusion rewrites unused `outs` to fresh `tensor.empty`s, so after it each
// returned value's destination chain (through DPS inits) ends in a
// tensor.empty; this pass replaces that use with the output argument. Then
// one-shot bufferization writes the result in place into the caller's buffer
// and drop-equivalent-buffer-results removes the returns (SPEC P4).
#ifndef RBLN_COMPILER_BIND_OUTPUTS_PASS_H_
#define RBLN_COMPILER_BIND_OUTPUTS_PASS_H_

#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

std::unique_ptr<mlir::Pass> CreateBindOutputsPass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_BIND_OUTPUTS_PASS_H_

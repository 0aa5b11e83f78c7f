// One-time MLIR/LLVM initialization and the dialect set of the compiler.
#ifndef RBLN_COMPILER_PIPELINES_MLIR_SETUP_H_
#define RBLN_COMPILER_PIPELINES_MLIR_SETUP_H_

#include <memory>

#include "mlir/IR/MLIRContext.h"

namespace rbln::compiler {

// Registers MLIR's passes (for textual pipelines) and the native LLVM target.
// Safe to call from any thread, any number of times.
void InitializeMlirOnce();

// A context with every dialect, bufferization model and LLVM translation the
// compiler uses. Creating one costs a few ms: keep it for many compiles.
std::unique_ptr<mlir::MLIRContext> CreateCompilerContext();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_PIPELINES_MLIR_SETUP_H_

// The words of a library call's problem (GemmProblem::Encode(),
// ConvProblem::Encode()) as a constant of the module that the kernel passes
// to the call: one private memref.global per call site.
#ifndef RBLN_COMPILER_PROBLEM_WORDS_H_
#define RBLN_COMPILER_PROBLEM_WORDS_H_

#include <cstdint>
#include <vector>

#include "llvm/ADT/StringRef.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

namespace rbln::compiler {

// `words` as a private constant i64 global named `name` (renamed by
// `symbols` if taken), 8-byte aligned, at the start of `module`.
mlir::memref::GlobalOp ProblemWordsGlobal(mlir::ModuleOp module,
                                          mlir::SymbolTable& symbols,
                                          llvm::StringRef name,
                                          const std::vector<int64_t>& words);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_PROBLEM_WORDS_H_

// What the library rewrites (blas_rewrite_pass.cc, conv_rewrite_pass.cc)
// emit alike: the private declaration of a library entry point, a call's
// problem as constant words of the module, and the calls of a problem cut
// into blocks that the partition pass spreads over the chiplet workers.
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_CALLS_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_CALLS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "rbln/compiler/abi/gemm_problem.h"

namespace rbln::compiler {

// A GEMM or convolution large enough is cut into at most kMaxGemmBlocks
// blocks of at least kMinGemmBlockWork multiply-adds (~2 M, well under a
// millisecond: enough to amortize a call).
inline constexpr int64_t kMaxGemmBlocks = 4;
inline constexpr int64_t kMinGemmBlockWork = int64_t{1} << 21;

// Blocks a problem of `work` multiply-adds is cut into: as above, and no
// more than `split_extent`, the extent of the dimension cut.
int64_t LibraryCallBlocks(int64_t work, int64_t split_extent);

// The private declaration of `name` with `num_args` i64 arguments and no
// result, added once at the start of `module`; null if the module has the
// symbol with another type.
mlir::func::FuncOp DeclareLibraryFunction(mlir::ModuleOp module,
                                          llvm::StringRef name, int num_args);
// The same with any function type.
mlir::func::FuncOp DeclareLibraryFunction(mlir::ModuleOp module,
                                          llvm::StringRef name,
                                          mlir::FunctionType type);

// `words` as a private constant i64 global named `name` (renamed by
// `symbols` if taken), 8-byte aligned, at the start of `module`: one per
// call site, the problem a kernel passes to the call (GemmProblem::Encode(),
// ConvProblem::Encode()).
mlir::memref::GlobalOp ProblemWordsGlobal(mlir::ModuleOp module,
                                          mlir::SymbolTable& symbols,
                                          llvm::StringRef name,
                                          const std::vector<int64_t>& words);
// The address of `problem`'s words as i64.
mlir::Value ProblemWordsAddress(mlir::OpBuilder& b, mlir::Location l,
                                mlir::memref::GlobalOp problem);

// How a kernel reads buffers of `element`: f32, bf16 (stored as i16 bits)
// or f16; nothing for other types.
std::optional<GemmOperandType> LibraryOperandType(mlir::Type element);

// Calls `callee` with `args` followed by the block and the block count:
// once (block 0 of 1) when `blocks` is 1, else from an scf.for over the
// blocks marked kParallelIterationsAttr. The call or the loop carries
// `work` (multiply-adds) in kWorkAttr.
void EmitBlockedCalls(mlir::OpBuilder& b, mlir::Location l,
                      mlir::func::FuncOp callee,
                      llvm::SmallVector<mlir::Value> args, int64_t blocks,
                      int64_t work);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_CALLS_H_

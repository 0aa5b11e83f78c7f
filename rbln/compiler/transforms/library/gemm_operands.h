// The oneDNN GEMM's operand analysis (blas_rewrite_pass.cc): where a GEMM
// can read its operands from instead of the f32 buffers the matmul reads
// -- the source of a copy, or the narrow (bf16, f16) values the f32 ones
// were widened from (narrow_operands.h) -- and the bookkeeping of the
// writers and buffers that the calls leave unread.
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_GEMM_OPERANDS_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_GEMM_OPERANDS_H_

#include <optional>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/transforms/library/gemm_lowering.h"
#include "rbln/compiler/transforms/library/narrow_operands.h"

namespace rbln::compiler {

GemmOperandType OperandTypeOf(NarrowFloat format);

// A GEMM operand copied from another buffer: the generic that copies, what
// it does, and the collapse_shape through which the GEMM reads its buffer
// (null if direct).
struct CopiedOperand {
  mlir::linalg::GenericOp generic;
  OperandCopy copy;
  mlir::memref::CollapseShapeOp collapse;
};

// How `operand`, an f32 buffer of its own (memref.alloc) that the GEMM `op`
// reads directly or through one collapse_shape, was copied by one generic
// alone, or nothing. The copy's source must still hold the same values
// when `op` runs, and collapse the same way (identity layout, no
// transpose).
std::optional<CopiedOperand> CopiedOperandOf(mlir::Value operand,
                                             mlir::Operation* op);

// The source of `w` as the GEMM reads it, created before `op`.
mlir::Value CopySource(CopiedOperand w, mlir::Operation* op);

// The narrow matrix `op` reads in place of the f32 operand `w` stands for
// (a copy's source, or the writer's narrow twin, made once in `twins`).
std::optional<Matrix> NarrowMatrix(
    NarrowOperand w, mlir::Operation* op,
    llvm::DenseMap<mlir::Operation*, mlir::Value>& twins);

// The ops that use `buffer`, directly or through views of it.
llvm::SmallVector<mlir::Operation*> BufferUsers(mlir::Value buffer);

// The writers among `writers` whose f32 values nothing will read: every use
// of their buffer (through views) is a deallocation, the writer itself, or
// a GEMM that reads the writer's twin instead (`twin_readers`).
llvm::SmallPtrSet<mlir::Operation*, 8> ReplacedWriters(
    llvm::ArrayRef<mlir::linalg::GenericOp> writers,
    const llvm::DenseMap<mlir::Operation*,
                         llvm::SmallPtrSet<mlir::Operation*, 4>>& twin_readers);

// Erases `buffer` (a memref.alloc), its unused views and its
// deallocations, if nothing else uses it.
void EraseIfUnused(mlir::Value buffer);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_GEMM_OPERANDS_H_

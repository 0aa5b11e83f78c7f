// GEMMs as the library calls see them (blas_rewrite_pass.cc): the linalg
// matmuls on memrefs that a call can take (PlanGemm), and the calls that
// replace them: OpenBLAS's cblas_sgemm (EmitSgemm) or oneDNN's rbln_gemm
// and rbln_gemm_problem (EmitOnednnGemm, with the problem of
// abi/gemm_problem.h).
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_GEMM_LOWERING_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_GEMM_LOWERING_H_

#include <cstdint>
#include <optional>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "rbln/compiler/abi/gemm_problem.h"

namespace rbln::compiler {

// One operand as BLAS sees it: a stack of row-major matrices.
struct Matrix {
  mlir::Value memref;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;                 // leading dimension: the row stride
  int64_t batch_stride = 0;       // elements between matrices of a batch
  std::optional<int64_t> offset;  // static offset, if known
  int64_t element_bytes = 4;
};

struct Gemm {
  Matrix a, b, c;
  bool trans_b = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  // oneDNN only: what A and B are read as: f32, or bf16 / f16 (the i16 or
  // f16 buffers the f32 operands were widened from); and whether C is
  // overwritten (its zero fill dropped) instead of accumulated into.
  GemmOperandType type = GemmOperandType::kF32;
  bool overwrite = false;
  // oneDNN only: C stored as bf16 by the call (the rounding generic that
  // followed the GEMM folded into it; c is then the i16 buffer).
  StoreType store = StoreType::kF32;
  // oneDNN only: a per-column bias added by the call (row 0 of `sides`).
  bool bias = false;
  // oneDNN only: a ReLU applied by the call before its store.
  bool relu = false;
};

// `v` as BLAS operand, or nothing if BLAS cannot address it: an f32 (or
// `element`) memref of static shape and strides whose rows are contiguous
// and do not overlap.
std::optional<Matrix> AsMatrix(mlir::Value v, mlir::Type element = nullptr);

// The GEMM `op` computes if a library call can take it: a linalg.matmul,
// matmul_transpose_b or batch_matmul on buffers whose operands are all
// matrices (AsMatrix), no dimension empty, the sizes within int32.
std::optional<Gemm> PlanGemm(mlir::linalg::LinalgOp op);

// The address of `m`'s first element, in bytes, as an index.
mlir::Value BaseAddress(mlir::OpBuilder& b, mlir::Location l, const Matrix& m);

// The private declaration of cblas_sgemm, added once; null if the module
// already has the symbol with another type.
mlir::func::FuncOp DeclareSgemm(mlir::ModuleOp module);

// Emits the cblas_sgemm call(s) of `g` (one per matrix of a batch).
void EmitSgemm(mlir::OpBuilder& b, mlir::Location l, const Gemm& g,
               mlir::func::FuncOp sgemm);

// The GemmProblem `g` describes (GEMM library words, abi/gemm_problem.h).
GemmProblem GemmProblemOf(const Gemm& g);

// Emits the call(s) of `gemm`: rbln_gemm with the problem as arguments, or,
// with an epilogue, rbln_gemm_problem with the problem's words in the
// constant global `problem` and the per-column rows at `sides` (i64
// address; null: none). A GEMM large enough is cut into blocks
// (library_calls.h).
void EmitOnednnGemm(mlir::OpBuilder& b, mlir::Location l, const Gemm& g,
                    mlir::func::FuncOp gemm, mlir::memref::GlobalOp problem,
                    mlir::Value sides = nullptr);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_GEMM_LOWERING_H_

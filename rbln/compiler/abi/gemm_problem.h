// A GEMM as a kernel hands it to the GEMM library (kernels/onednn_gemm.h):
// the problem, its encoding as i64 words (a constant of the kernel for
// calls with an epilogue) and how it is cut into blocks. The BLAS rewrite
// (transforms/library/) writes it; rbln_gemm reads it. No MLIR, no oneDNN.
#ifndef RBLN_COMPILER_ABI_GEMM_PROBLEM_H_
#define RBLN_COMPILER_ABI_GEMM_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "rbln/compiler/abi/library_epilogue.h"

namespace rbln::compiler {

// Element type of the A and B operands. oneDNN 2.6 has no f16 matmul on
// any CPU: kF16 (IEEE half) operands are either widened, exactly, to f32
// per block (kernels/half_convert.h; A whole, B in its stored layout a chunk of
// columns at a time) and multiplied as f32, or split into bf16 pairs and
// multiplied as one bf16 GEMM with K tripled (kernels/bf16_split.h; F16GemmRoute),
// or, B a weight, as [Ah ; Al] x Bh and Ah x Bl with Bh and Bl packed once.
enum class GemmOperandType : int64_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

// One GEMM problem as rbln_gemm receives it, row-major:
// C[b] (+)= A[b] * op(B[b]) for b < batch, A [m, k], op(B) [k, n] (B stored
// [n, k] when trans_b), C [m, n]; ld* are row strides and stride_* batch
// strides, in elements. C is f32 unless the epilogue stores bf16; its
// per-channel operands are per column (sides [rows, n]).
struct GemmProblem {
  GemmOperandType type = GemmOperandType::kF32;
  bool trans_b = false;
  bool accumulate = true;  // C += A*B (linalg's semantics); else C = A*B
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // Only when !accumulate.
  LibraryEpilogue epilogue;

  std::vector<int64_t> Encode() const;
  static GemmProblem Decode(const int64_t* words);
};

// Block `block` of `blocks` of `p`: the same problem restricted to a range
// of batch, rows or columns, with the element offsets of its first A, B and
// C elements and of its first column (of the per-column operands). A block
// may be empty (m, n or batch 0).
struct GemmBlock {
  GemmProblem problem;
  int64_t offset_a = 0, offset_b = 0, offset_c = 0, column = 0;
};
GemmBlock GemmBlockOf(const GemmProblem& p, int64_t block, int64_t blocks);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ABI_GEMM_PROBLEM_H_

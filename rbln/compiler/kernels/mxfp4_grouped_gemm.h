// Grouped GEMMs on MXFP4 weights (gpt-oss's experts as its checkpoints
// store them): C[rows of group g] = A[rows of group g] x W[g]^T, W[g] [n, k]
// given as OCP MX FP4: `blocks` [groups, n, k/2] uint8, two e2m1 values a
// byte (low nibble first), and `scales` [groups, n, k/32] uint8, an e8m0
// scale 2^(s - 127) per 32 values of a row (s = 0 flushes to zero here).
// The weights are read packed, 4.25 bits each, and dequantized on the way:
//
// - A group of at most kMxfp4GemvMaxRows rows (decode) is a fused GEMV:
//   each row of W is decoded 32 values at a time (AVX2: a byte shuffle of
//   the nibbles into a table of doubled e2m1 values) and multiplied with
//   every row of the group, f32 accumulation; W is read once.
// - A larger group (prefill) has its W rows dequantized, exactly, into a
//   per-thread buffer in A's type (bf16: decoded as the GEMV decodes) and
//   multiplied through oneDNN (onednn_gemm.h).
//
// Rows as in grouped_gemm.h (GroupRows: offsets clamped as Tensor.slice
// clamps them; rows outside every group are left as they are). A block is
// a range of C's columns (GroupedGemmColumns) over every group, so each
// element is computed by one call whatever the block count (SPEC A2).
#ifndef RBLN_COMPILER_KERNELS_MXFP4_GROUPED_GEMM_H_
#define RBLN_COMPILER_KERNELS_MXFP4_GROUPED_GEMM_H_

#include <cstdint>

#include "rbln/compiler/abi/gemm_problem.h"

namespace rbln::compiler {

inline constexpr int64_t kMxfp4BlockValues = 32;
inline constexpr int64_t kMxfp4GemvMaxRows = 8;

// A [m, k] f32 or bf16 (row stride lda), C [m, n] f32 (row stride ldc),
// blocks and scales contiguous as above, offsets [groups] int32 or int64.
struct Mxfp4GroupedGemmProblem {
  GemmOperandType type = GemmOperandType::kF32;
  bool offsets_i64 = false;
  int64_t groups = 0, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldc = 0;
};

// Which code multiplies the small groups: the best this CPU runs, or the
// portable loops (tests compare both).
enum class Mxfp4Isa { kPortable = 0, kAvx2 = 1 };
Mxfp4Isa BestMxfp4Isa();

// `rows` rows of k values from their blocks and scales, in f32 (exact).
void DequantizeMxfp4Rows(const uint8_t* blocks, const uint8_t* scales, int64_t rows,
                         int64_t k, float* out);

// Runs block `block` of `blocks` of `p` (what rbln_grouped_gemm_mxfp4 does).
void RunMxfp4GroupedGemmBlock(const Mxfp4GroupedGemmProblem& p, const void* a,
                              const uint8_t* w_blocks, const uint8_t* w_scales,
                              const void* offsets, float* c, int64_t block, int64_t blocks,
                              Mxfp4Isa isa = BestMxfp4Isa());

}  // namespace rbln::compiler

// The entry point compiled kernels call (kGroupedGemmMxfp4Symbol); all
// arguments i64 (pointers as addresses): the problem in
// Mxfp4GroupedGemmProblem's order, then A, blocks, scales, the offsets and
// C, then the block and block count.
extern "C" void rbln_grouped_gemm_mxfp4(int64_t type, int64_t offsets_i64, int64_t groups,
                                        int64_t m, int64_t n, int64_t k, int64_t lda,
                                        int64_t ldc, int64_t a, int64_t w_blocks,
                                        int64_t w_scales, int64_t offsets, int64_t c,
                                        int64_t block, int64_t blocks);

#endif  // RBLN_COMPILER_KERNELS_MXFP4_GROUPED_GEMM_H_

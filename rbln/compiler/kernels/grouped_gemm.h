// Grouped GEMMs of compiled kernels (torch._grouped_mm's 2-D x 3-D form,
// the experts of MoE layers) through oneDNN (onednn_gemm.h).
//
// C[rows of group g] = A[rows of group g] x op(B[g]) for g < groups, the
// rows of group g being [offs[g-1], offs[g]) (offs[-1] = 0) clamped as
// Tensor.slice clamps them (GroupRows); groups run in order, so where two
// overlap the later one's product stays, as in ATen's loop of mm_out. Rows
// outside every group are left as they are (the kernel zero-fills C first).
// Only the groups' rows are multiplied: the weights of experts no token
// was routed to are not read.
//
// Kernels call rbln_grouped_gemm (kGroupedGemmSymbol, abi/kernel_abi.h) once
// per block (the block count fixed by the problem's shape). With at least
// kMinGroupsPerBlock groups a block and no two groups' rows overlapping
// (an MoE layer's experts), a block is a run of whole groups, balanced by
// their rows and weights (GroupedGemmGroupBlocks): one oneDNN GEMM per
// non-empty group over all of C's columns, so C is written in place (no
// staged column block), each weight is read by one call and there are
// `groups` calls, not groups x blocks. Otherwise (few groups, or
// overlapping ones, which must run in order) a block is a range of
// columns (GroupedGemmColumns): one GEMM per non-empty group on them.
// Either way a group's product is the same oneDNN call whatever the block
// count or the number of chiplet workers that run the blocks (SPEC A2).
// B[g] is a weight packed once per version of its bytes (packed_weights.h)
// when it is a program input.
#ifndef RBLN_COMPILER_KERNELS_GROUPED_GEMM_H_
#define RBLN_COMPILER_KERNELS_GROUPED_GEMM_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "rbln/compiler/abi/gemm_problem.h"

namespace rbln::compiler {

// One grouped GEMM as rbln_grouped_gemm receives it, row-major: A [m, k]
// (row stride lda), B [groups, k, n] (op(B[g]) stored [n, k] when trans_b;
// row stride ldb, group stride stride_b), C [m, n] f32 (row stride ldc),
// offsets [groups] int32 or int64; strides in elements.
struct GroupedGemmProblem {
  GemmOperandType type = GemmOperandType::kF32;
  bool trans_b = false;
  bool offsets_i64 = false;
  int64_t groups = 0, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0, stride_b = 0;
};

// [begin, end) of each group's rows: Tensor.slice(0, start, end) of a
// tensor of `m` rows, start the previous group's end as given (0 first).
std::vector<std::pair<int64_t, int64_t>> GroupRows(const void* offsets, bool i64,
                                                   int64_t groups, int64_t m);

// Groups a block takes at the least for the blocks to be runs of groups.
inline constexpr int64_t kMinGroupsPerBlock = 2;

// The block of each group when the blocks are runs of groups (see above),
// from the groups' rows (GroupRows) in `m` rows: contiguous runs, each
// group in the block whose equal share of the total cost holds the middle
// of its own (a non-empty group's rows plus m / groups for its weight).
// Empty when the blocks are column ranges instead: fewer than
// kMinGroupsPerBlock groups a block, or groups whose rows overlap.
std::vector<int64_t> GroupedGemmGroupBlocks(
    const std::vector<std::pair<int64_t, int64_t>>& rows, int64_t m, int64_t blocks);

// Columns [begin, end) of column block `block` of `blocks` (whole 16-float
// vectors; empty past the last column).
std::pair<int64_t, int64_t> GroupedGemmColumns(int64_t n, int64_t block, int64_t blocks);

// Runs block `block` of `blocks` of `p` (what rbln_grouped_gemm does).
void RunGroupedGemmBlock(const GroupedGemmProblem& p, const void* a, const void* b,
                         const void* offsets, float* c, int64_t block, int64_t blocks);

}  // namespace rbln::compiler

// The entry point compiled kernels call; all arguments are i64 (pointers as
// addresses): the problem in GroupedGemmProblem's order, then A, B, the
// offsets and C, then the block and block count.
extern "C" void rbln_grouped_gemm(int64_t type, int64_t trans_b, int64_t offsets_i64,
                                  int64_t groups, int64_t m, int64_t n, int64_t k,
                                  int64_t lda, int64_t ldb, int64_t ldc, int64_t stride_b,
                                  int64_t a, int64_t b, int64_t offsets, int64_t c,
                                  int64_t block, int64_t blocks);

#endif  // RBLN_COMPILER_KERNELS_GROUPED_GEMM_H_

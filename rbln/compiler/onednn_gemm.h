// GEMMs of compiled kernels through oneDNN (SPEC P5), loaded at run time.
//
// oneDNN (Debian's libdnnl 2.6.3) is dlopen()ed on first use, so the
// compiler builds and runs without it: the GEMM rewrite then targets
// OpenBLAS or the loops (blas_rewrite_pass.h). On this project's CPUs its
// matmul primitive multiplies bf16 operands with avx512_bf16 (f32
// accumulation) at about twice the f32 rate, and f32 ones at least as fast
// as OpenBLAS (docs/benchmarks.md, "GEMM library").
//
// Kernels call rbln_gemm (kOnednnGemmSymbol), which the JIT resolves to this
// library's function. One call computes one block of a GEMM problem: the
// problem is cut into `blocks` parts along one dimension chosen from its
// shape alone (GemmBlockOf), so a program computes every element with the
// same oneDNN call whether its blocks run on one worker or spread over the
// chiplet workers (bit-identical results, SPEC A2). Each call runs on the
// calling thread only: oneDNN's OpenMP thread count is 1 during the call
// and the caller's again after it (on a user's thread that count is
// torch.get_num_threads(), which Dynamo guards on).
#ifndef RBLN_COMPILER_ONEDNN_GEMM_H_
#define RBLN_COMPILER_ONEDNN_GEMM_H_

#include <cstdint>
#include <string>

namespace rbln::compiler {

inline constexpr char kOnednnGemmSymbol[] = "rbln_gemm";
inline constexpr char kOnednnLibrary[] = "libdnnl.so.2";

// Element type of the A and B operands (C is always f32).
enum class GemmOperandType : int64_t { kF32 = 0, kBF16 = 1 };

// One GEMM problem as rbln_gemm receives it, row-major:
// C[b] (+)= A[b] * op(B[b]) for b < batch, A [m, k], op(B) [k, n] (B stored
// [n, k] when trans_b), C [m, n]; ld* are row strides and stride_* batch
// strides, in elements.
struct GemmProblem {
  GemmOperandType type = GemmOperandType::kF32;
  bool trans_b = false;
  bool accumulate = true;  // C += A*B (linalg's semantics); else C = A*B
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Block `block` of `blocks` of `p`: the same problem restricted to a range
// of batch, rows or columns, with the element offsets of its first A, B and
// C elements. A block may be empty (m, n or batch 0).
struct GemmBlock {
  GemmProblem problem;
  int64_t offset_a = 0, offset_b = 0, offset_c = 0;
};
GemmBlock GemmBlockOf(const GemmProblem& p, int64_t block, int64_t blocks);

// dlopen()s oneDNN once and resolves the functions used. True if usable.
// Thread-safe; the library is never unloaded.
bool LoadOnednn();

// "oneDNN <version> (<ISA of a bf16 matmul here>)" or why it is unusable;
// for benchmarks and error messages.
std::string OnednnDescription();

// Runs one block directly (what rbln_gemm does): for tests and benchmarks.
// Aborts with a message if oneDNN is missing or rejects the problem (the
// rewrite only emits calls for problems oneDNN takes).
void RunGemmBlock(const GemmProblem& p, const void* a, const void* b, float* c,
                  int64_t block, int64_t blocks);

}  // namespace rbln::compiler

// The entry point compiled kernels call; all arguments are i64 (pointers as
// addresses), in GemmProblem's order, then the block and block count.
extern "C" void rbln_gemm(int64_t type, int64_t trans_b, int64_t accumulate,
                          int64_t batch, int64_t m, int64_t n, int64_t k,
                          int64_t lda, int64_t ldb, int64_t ldc,
                          int64_t stride_a, int64_t stride_b, int64_t stride_c,
                          int64_t a, int64_t b, int64_t c, int64_t block,
                          int64_t blocks);

#endif  // RBLN_COMPILER_ONEDNN_GEMM_H_

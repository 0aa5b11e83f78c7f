// GEMMs of compiled kernels through oneDNN (SPEC P5), loaded at run time
// (onednn_library.h).
//
// On this project's CPUs oneDNN's matmul primitive multiplies bf16 operands
// with avx512_bf16 (f32 accumulation) at about twice the f32 rate, and f32
// ones at least as fast as OpenBLAS (docs/benchmarks.md, "GEMM library").
//
// Kernels call rbln_gemm (kOnednnGemmSymbol), which the JIT resolves to this
// library's function. One call computes one block of a GEMM problem: the
// problem is cut into `blocks` parts along one dimension chosen from its
// shape alone (GemmBlockOf), so a program computes every element with the
// same oneDNN call whether its blocks run on one worker or spread over the
// chiplet workers (bit-identical results, SPEC A2). Each call runs on the
// calling thread only (onednn::OneOmpThread). RunGemmBlock may apply an
// epilogue (library_epilogue.h) as oneDNN post-ops: bias and per-column
// operands, element-wise functions, and the store as bf16. Kernels call
// rbln_gemm_problem (kOnednnGemmProblemSymbol) for problems with an
// epilogue (the rewrite emits the bf16 store: a bf16 result is rounded by
// the call, not by a pass over an f32 C), rbln_gemm (stores f32) otherwise.
#ifndef RBLN_COMPILER_ONEDNN_GEMM_H_
#define RBLN_COMPILER_ONEDNN_GEMM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rbln/compiler/library_epilogue.h"
#include "rbln/compiler/onednn_library.h"

namespace rbln::compiler {

inline constexpr char kOnednnGemmSymbol[] = "rbln_gemm";
// The entry point of GEMMs with an epilogue: the problem as Encode()d words.
inline constexpr char kOnednnGemmProblemSymbol[] = "rbln_gemm_problem";

// Element type of the A and B operands. oneDNN 2.6 has no f16 matmul on
// any CPU: kF16 (IEEE half) operands are either widened, exactly, to f32
// per block (half_convert.h; A whole, B in its stored layout a chunk of
// columns at a time) and multiplied as f32, or split into bf16 pairs and
// multiplied as one bf16 GEMM with K tripled (bf16_split.h; F16GemmRoute),
// or, B a weight, as [Ah ; Al] x Bh and Ah x Bl with Bh and Bl packed once.
enum class GemmOperandType : int64_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

// How kF16 blocks run (RBLN_COMPILER_F16_GEMM). kBf16x3 computes
// Ah*Bh + Al*Bh + Ah*Bl in bf16 with f32 accumulation: within f32-GEMM
// error (the dropped Al*Bl is at most 2^-18 of each |a*b|), and three times
// the products, so it pays only where oneDNN's bf16 matmul runs about 4x
// its f32 rate: on AMX. kAuto takes it for a block problem of 32 rows or
// more, 12 when B is a weight (fewer stream B: its tripled copy is larger
// than the f32 one, its packed Bh and Bl the same size) when oneDNN's bf16
// primitive for it runs on AMX, the f32 route otherwise (e.g. Zen 4's
// avx512_bf16, about 2x). A block whose A, or a chunk whose B, holds an
// infinity or NaN runs as f32 (inf * 0 in the cross terms would give NaN).
// The choice depends on the block's shape and operands and on whether B is
// a weight only (SPEC A2).
enum class F16GemmRoute { kAuto = 0, kWidenedF32 = 1, kBf16x3 = 2 };

// RBLN_COMPILER_F16_GEMM: "auto" (default), "f32" or "bf16x3", or an error
// naming the variable.
absl::StatusOr<F16GemmRoute> F16GemmRouteFromEnv();

// Overrides the environment's route for this process (tests, benchmarks);
// std::nullopt goes back to it.
void SetF16GemmRoute(std::optional<F16GemmRoute> route);

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

// "oneDNN <version> (<ISA of a bf16 matmul here>)" or why it is unusable;
// for benchmarks and error messages.
std::string OnednnDescription();

// Runs one block directly (what rbln_gemm does): for tests and benchmarks.
// `sides` holds the epilogue's per-column rows (may be null without them).
// Aborts with a message if oneDNN is missing or rejects the problem (the
// rewrite only emits calls for problems oneDNN takes); an epilogue oneDNN
// cannot fuse is applied after the product, with the same result.
void RunGemmBlock(const GemmProblem& p, const void* a, const void* b, void* c,
                  const float* sides, int64_t block, int64_t blocks);

// The implementation oneDNN runs for `p` (block 0 of 1), e.g.
// "brg:avx512_core_bf16", with "+ epilogue after" when the post-ops are
// applied separately; for kF16 prefixed by the route, "f16->f32 (<isa>) + "
// or "f16->bf16x3 (<isa>) + " (finite operands).
std::string GemmImplementation(const GemmProblem& p);

}  // namespace rbln::compiler

// The entry point compiled kernels call; all arguments are i64 (pointers as
// addresses), in GemmProblem's order, then the block and block count; no
// epilogue (C is f32).
extern "C" void rbln_gemm(int64_t type, int64_t trans_b, int64_t accumulate,
                          int64_t batch, int64_t m, int64_t n, int64_t k,
                          int64_t lda, int64_t ldb, int64_t ldc,
                          int64_t stride_a, int64_t stride_b, int64_t stride_c,
                          int64_t a, int64_t b, int64_t c, int64_t block,
                          int64_t blocks);

// The entry point of GEMMs with an epilogue: `problem` is the address of the
// problem's Encode()d words (a constant of the kernel), `sides` of the
// epilogue's per-column rows (0 without them), then the block and block
// count.
extern "C" void rbln_gemm_problem(int64_t problem, int64_t a, int64_t b,
                                  int64_t c, int64_t sides, int64_t block,
                                  int64_t blocks);

#endif  // RBLN_COMPILER_ONEDNN_GEMM_H_

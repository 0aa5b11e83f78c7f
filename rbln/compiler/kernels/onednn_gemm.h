// GEMMs of compiled kernels through oneDNN (SPEC P5), loaded at run time
// (onednn_library.h).
//
// On this project's CPUs oneDNN's matmul primitive multiplies bf16 operands
// with avx512_bf16 (f32 accumulation) at about twice the f32 rate, and f32
// ones at least as fast as OpenBLAS (docs/benchmarks.md, "GEMM library").
// Below avx512_core (AVX2 CPUs) oneDNN 2.6 has no bf16 kernels
// (onednn::HasBf16): bf16 blocks run on f32 copies. bf16 problems of few
// rows (decode steps) run on bf16_skinny_gemm.h's kernel, which reads B as
// stored: below avx512_core up to kSkinnyBf16MaxRows rows, and on CPUs with
// AVX-512 BF16 a Linear weight (B stored [n, k]) times up to
// kSkinnyBf16MaxRowsBesideOnednn rows (SkinnyBf16Preferred).
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
#ifndef RBLN_COMPILER_KERNELS_ONEDNN_GEMM_H_
#define RBLN_COMPILER_KERNELS_ONEDNN_GEMM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/kernels/onednn_library.h"

namespace rbln::compiler {

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
// or "f16->bf16x3 (<isa>) + " (finite operands). bf16 where oneDNN has no
// bf16 kernels: "bf16->f32 + ..." (widened to f32); where
// SkinnyBf16Preferred, "bf16 skinny (<isa>)" (bf16_skinny_gemm.h: B read as
// stored, no oneDNN call).
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

#endif  // RBLN_COMPILER_KERNELS_ONEDNN_GEMM_H_

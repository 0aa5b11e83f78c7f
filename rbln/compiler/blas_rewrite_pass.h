// BlasRewrite (SPEC P5): after bufferization, replaces f32 GEMMs on memrefs
// with calls to a GEMM library: oneDNN (onednn_gemm.h, the default where it
// loads; see below) or OpenBLAS's
//   void cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
//                    beta, c, ldc)
// declared in the module as a private func.func. Rewritten: linalg.matmul,
// linalg.matmul_transpose_b (trans_b) and linalg.batch_matmul (a loop of
// GEMMs) whose operands are f32 memrefs with static shapes and strides and
// unit inner stride, and no empty dim. A matrix pointer is the memref's
// aligned pointer plus its offset; the leading dimension is its row stride;
// alpha = beta = 1 keeps linalg's C += A * B. Everything else is left for the
// loop lowering. Whoever JIT-compiles the result must make cblas_sgemm
// resolvable (LoadOpenBlas() in blas_loader.h).
//
// With library=onednn the GEMMs become calls of rbln_gemm (onednn_gemm.h):
//  - bf16 and f16 operands go to oneDNN as they are: when the generics
//    that last wrote both f32 operand buffers (whole) yield the widening of
//    bf16 (i16 bits) or of f16 values (arith.extf), both of one format, the
//    GEMM reads the narrow source of a copy (its source not written in
//    between; a transposing copy of B as B read transposed) or the narrow
//    twin of a generic that computed the values (a layer norm's or bias
//    add's rounding fused with the widening: the same generic storing the
//    narrow value); the call's operand type is kBF16 or kF16 (which the
//    library widens per block: oneDNN has no f16 matmul); an f32 B copied
//    transposed (a permute before the
//    GEMM) is read transposed from its source; writers whose f32 values
//    nothing reads any more are dropped;
//  - a linalg.fill of +0.0 of C right before the GEMM is dropped and the
//    call overwrites C (no accumulation pass over C);
//  - a bf16 GEMM whose f32 C (a buffer of its own) is only read by the
//    frontend's rounding to bf16 right after stores bf16 itself: the call
//    becomes rbln_gemm_problem with a bf16-store epilogue (its problem words
//    a constant global), writing the rounded buffer; C and the rounding pass
//    go away (oneDNN rounds to nearest even like c10::BFloat16);
//  - a GEMM large enough is cut into blocks (at most kMaxGemmBlocks of at
//    least kMinGemmBlockWork multiply-adds), called from an scf.for marked
//    kParallelIterationsAttr that the partition pass spreads over the
//    chiplet workers; every op carries its multiply-adds in kWorkAttr.
#ifndef RBLN_COMPILER_BLAS_REWRITE_PASS_H_
#define RBLN_COMPILER_BLAS_REWRITE_PASS_H_

#include <cstdint>
#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

// The pass's name in textual pipelines (it runs on builtin.module, where it
// declares cblas_sgemm or rbln_gemm); its option `library` is openblas (the
// default) or onednn.
inline constexpr char kBlasRewritePassName[] = "rbln-blas-rewrite";
inline constexpr char kSgemmName[] = "cblas_sgemm";

inline constexpr int64_t kMaxGemmBlocks = 4;
inline constexpr int64_t kMinGemmBlockWork = int64_t{1} << 21;

enum class GemmLibrary { kOpenBlas, kOnednn };

std::unique_ptr<mlir::Pass> CreateBlasRewritePass(
    GemmLibrary library = GemmLibrary::kOpenBlas);

// Registers the pass under kBlasRewritePassName for textual pipelines.
// Idempotent and thread-safe.
void RegisterBlasRewritePass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_BLAS_REWRITE_PASS_H_

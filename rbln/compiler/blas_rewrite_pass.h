// BlasRewrite (SPEC P5): after bufferization, replaces f32 GEMMs on memrefs
// with calls to OpenBLAS's
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
#ifndef RBLN_COMPILER_BLAS_REWRITE_PASS_H_
#define RBLN_COMPILER_BLAS_REWRITE_PASS_H_

#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

// The pass's name in textual pipelines (it runs on builtin.module, where it
// declares cblas_sgemm).
inline constexpr char kBlasRewritePassName[] = "rbln-blas-rewrite";
inline constexpr char kSgemmName[] = "cblas_sgemm";

std::unique_ptr<mlir::Pass> CreateBlasRewritePass();

// Registers the pass under kBlasRewritePassName for textual pipelines.
// Idempotent and thread-safe.
void RegisterBlasRewritePass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_BLAS_REWRITE_PASS_H_

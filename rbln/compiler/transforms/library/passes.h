// The rewrites of linalg ops on buffers to calls of the GEMM and
// convolution libraries (SPEC P5; kernels/): what each rewrites is
// described at the top of its pass file. Both run after bufferization and
// before partitioning; the calls' problems are abi/gemm_problem.h and
// abi/conv_problem.h.
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_PASSES_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_PASSES_H_

#include <memory>

#include "mlir/Pass/Pass.h"
#include "rbln/compiler/abi/kernel_abi.h"

namespace rbln::compiler {

// GEMMs to OpenBLAS's cblas_sgemm or oneDNN's rbln_gemm
// (blas_rewrite_pass.cc). Its name in textual pipelines (it runs on
// builtin.module, where it declares the callee); its option `library` is
// openblas (the default) or onednn.
inline constexpr char kBlasRewritePassName[] = "rbln-blas-rewrite";
std::unique_ptr<mlir::Pass> CreateBlasRewritePass(
    GemmLibrary library = GemmLibrary::kOpenBlas);
// Registers the pass under kBlasRewritePassName for textual pipelines.
// Idempotent and thread-safe.
void RegisterBlasRewritePass();

// 2-D convolutions to oneDNN's rbln_conv (conv_rewrite_pass.cc). Its name
// in textual pipelines (it runs on builtin.module, where it declares
// rbln_conv and the problems' globals).
inline constexpr char kConvRewritePassName[] = "rbln-conv-rewrite";
std::unique_ptr<mlir::Pass> CreateConvRewritePass();
// Registers the pass under kConvRewritePassName for textual pipelines.
// Idempotent and thread-safe.
void RegisterConvRewritePass();

// The frontend's grouped GEMM loops to oneDNN's rbln_grouped_gemm
// (grouped_gemm_rewrite_pass.cc). Its name in textual pipelines (it runs on
// builtin.module, where it declares the callee).
inline constexpr char kGroupedGemmRewritePassName[] = "rbln-grouped-gemm-rewrite";
std::unique_ptr<mlir::Pass> CreateGroupedGemmRewritePass();
// Registers the pass under kGroupedGemmRewritePassName for textual
// pipelines. Idempotent and thread-safe.
void RegisterGroupedGemmRewritePass();

// The frontend's paged attention generics to rbln_paged_attention calls
// (paged_attention_rewrite_pass.cc). Its name in textual pipelines (it runs
// on builtin.module, where it declares the callee).
inline constexpr char kPagedAttentionRewritePassName[] = "rbln-paged-attention-rewrite";
std::unique_ptr<mlir::Pass> CreatePagedAttentionRewritePass();
// Registers the pass under kPagedAttentionRewritePassName for textual
// pipelines. Idempotent and thread-safe.
void RegisterPagedAttentionRewritePass();

// The frontend's masked attention generics (scaled dot-product attention)
// to rbln_masked_attention calls (masked_attention_rewrite_pass.cc); its
// name in textual pipelines (on builtin.module).
inline constexpr char kMaskedAttentionRewritePassName[] = "rbln-masked-attention-rewrite";
std::unique_ptr<mlir::Pass> CreateMaskedAttentionRewritePass();
// Registers the pass under kMaskedAttentionRewritePassName. Idempotent and
// thread-safe.
void RegisterMaskedAttentionRewritePass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_PASSES_H_

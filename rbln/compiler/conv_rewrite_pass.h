// ConvRewrite (issue 17): after bufferization, replaces f32 2-D convolutions
// on memrefs with calls of oneDNN's rbln_conv (onednn_conv.h), as the BLAS
// rewrite does for GEMMs (blas_rewrite_pass.h).
//
// Rewritten: linalg.conv_2d_nchw_fchw whose operands are f32 memrefs with
// static shapes and strides and a static offset, and whose kernel is
// contiguous (identity layout), with no empty dim. The problem goes to the
// call as a constant i64 array (ConvProblem::Encode, a private memref.global).
// An input that is a zero-padded copy of another buffer (tensor.pad:
// a fill of +0.0 and a copy into its interior, read by the convolution
// alone) is read unpadded, with the padding in the problem; the fill and
// the copy go. A linalg.fill of +0.0 of the output right before the
// convolution is dropped and the call overwrites the output instead of
// accumulating.
//
// bf16 programs (narrow_operands.h): when the input and the kernel are both
// widenings of bf16 values, the call reads those as they are stored (a
// copy's source, or the narrow twin of the generic that computed them) --
// products of bf16 values are exact in f32, so only the f32 summation
// order differs -- and, when every reader of the f32 result after the
// convolution first rounds it to bf16 (the frontend's rounding), the call
// stores bf16 into a buffer those readers read instead. f16 convolutions
// stay f32 (oneDNN 2.6 has no f16 convolution), but read the f16 kernel as
// stored: the call widens it (ConvProblem::f16_kernel), once per content
// version for a weight, instead of a pass over it per run.
//
// A convolution large enough is cut into blocks (at most kMaxGemmBlocks of
// at least kMinGemmBlockWork multiply-adds, ConvBlockOf) called from an
// scf.for marked kParallelIterationsAttr that the partition pass spreads
// over the chiplet workers; every call or loop carries its multiply-adds in
// kWorkAttr. Everything else is left to the loop lowering.
#ifndef RBLN_COMPILER_CONV_REWRITE_PASS_H_
#define RBLN_COMPILER_CONV_REWRITE_PASS_H_

#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

// The pass's name in textual pipelines (it runs on builtin.module, where it
// declares rbln_conv and the problems' globals).
inline constexpr char kConvRewritePassName[] = "rbln-conv-rewrite";

std::unique_ptr<mlir::Pass> CreateConvRewritePass();

// Registers the pass under kConvRewritePassName for textual pipelines.
// Idempotent and thread-safe.
void RegisterConvRewritePass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_CONV_REWRITE_PASS_H_

// 2-D convolutions of compiled kernels through oneDNN (issue 17), loaded at
// run time (onednn_library.h); the counterpart of onednn_gemm.h.
//
// Kernels call rbln_conv (kOnednnConvSymbol) with the problem as a constant
// array of i64 words (ConvProblem::Encode). One call computes one block of
// the problem -- a range of images, of groups, or of output channels, cut
// from the shape alone (ConvBlockOf) -- on the calling thread, so a program
// gives the same bits whether its blocks run on one worker or on all
// chiplet workers (SPEC A2).
//
// Layouts: the operands are NCHW (any strides) with an OIHW (grouped:
// GOIHW) contiguous kernel, as the frontend's linalg.conv_2d_nchw_fchw and
// grouped convolutions have them. A block with many output positions runs
// oneDNN's fastest kernels (brgconv with avx512_bf16 on this project's
// CPUs), which want blocked layouts: its source is reordered into a
// per-thread buffer and its result back; its kernel too, unless it is a
// program input whose reordered copy PackedWeightCache keeps
// (packed_weights.h: from the second run of a weight version on, warm
// forwards reorder no kernel). A block with few positions
// (a 7x7 map with 512 channels) would spend more on reordering its large
// kernel than it saves, and runs the GEMM-based kernel on the operands as
// they are (kBlockedLayoutMinPositions; docs/benchmarks.md). The epilogue
// (library_epilogue.h) becomes post-ops: bias and per-channel operands,
// element-wise functions, the store as bf16.
#ifndef RBLN_COMPILER_KERNELS_ONEDNN_CONV_H_
#define RBLN_COMPILER_KERNELS_ONEDNN_CONV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "rbln/compiler/abi/conv_problem.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/kernels/onednn_library.h"

namespace rbln::compiler {

// Output positions (images x rows x columns) of a block from which it runs
// on blocked layouts.
inline constexpr int64_t kBlockedLayoutMinPositions = 400;

// Runs one block directly (what rbln_conv does): for tests and benchmarks.
// `sides` holds the epilogue's per-channel rows (may be null without them).
// Aborts with a message if oneDNN is missing or rejects the problem; an
// epilogue oneDNN cannot fuse is applied after the convolution, with the
// same result.
void RunConvBlock(const ConvProblem& p, const void* src, const void* weights,
                  void* dst, const float* sides, int64_t block, int64_t blocks);

// The implementation oneDNN runs for block 0 of 1 of `p`, e.g.
// "brgconv:avx512_core_bf16 (blocked layouts)".
std::string ConvImplementation(const ConvProblem& p);

}  // namespace rbln::compiler

// The entry point compiled kernels call; all arguments are i64 (pointers as
// addresses): the problem's words (ConvProblem::Encode), src, weights, dst,
// the per-channel rows (0 if none), then the block and block count.
extern "C" void rbln_conv(int64_t problem, int64_t src, int64_t weights,
                          int64_t dst, int64_t sides, int64_t block,
                          int64_t blocks);

#endif  // RBLN_COMPILER_KERNELS_ONEDNN_CONV_H_

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
#ifndef RBLN_COMPILER_ONEDNN_CONV_H_
#define RBLN_COMPILER_ONEDNN_CONV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "rbln/compiler/library_epilogue.h"
#include "rbln/compiler/onednn_library.h"

namespace rbln::compiler {

inline constexpr char kOnednnConvSymbol[] = "rbln_conv";

// Output positions (images x rows x columns) of a block from which it runs
// on blocked layouts.
inline constexpr int64_t kBlockedLayoutMinPositions = 400;

// Element type of the source and the kernel (the result is f32 unless the
// epilogue stores bf16; bf16 results need bf16 operands).
enum class ConvOperandType : int64_t { kF32 = 0, kBF16 = 1 };

// One convolution as rbln_conv receives it: dst[n, oc, y, x] (+)=
// sum over c, i, j of src[n, g*ICg + c, y*sh + i*dh - pad_top,
// x*sw + j*dw - pad_left] * weights[oc, c, i, j] (zero outside src), with
// g = oc / OCg. Dilations as linalg's (1: adjacent taps). Strides in
// elements: src and dst per (n, c, h, w); the kernel is contiguous
// [groups, oc/groups, ic/groups, kh, kw]. Per-channel epilogue operands are
// per output channel (sides [rows, oc]).
struct ConvProblem {
  ConvOperandType type = ConvOperandType::kF32;
  // kF32 only: the kernel is stored as IEEE f16 and widened, exactly, by
  // the call (oneDNN 2.6 has no f16 convolution) -- once per content
  // version for a program input, kept with its blocked layout.
  bool f16_kernel = false;
  bool accumulate = true;  // dst += conv (linalg's semantics); else dst = conv
  int64_t n = 0, groups = 1, ic = 0, oc = 0;
  int64_t ih = 0, iw = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t src_strides[4] = {0, 0, 0, 0};
  int64_t dst_strides[4] = {0, 0, 0, 0};
  // Only when !accumulate.
  LibraryEpilogue epilogue;

  std::vector<int64_t> Encode() const;
  static ConvProblem Decode(const int64_t* words);
  std::string ToString() const;
  // Multiply-adds.
  int64_t Work() const;
};

// Block `block` of `blocks`: the same problem over a range of images (n >
// 1), else of groups (groups > 1), else of output channels (in multiples of
// 16), with the element offsets of its first src, weights and dst elements
// and its first output channel. A block may be empty.
struct ConvBlock {
  ConvProblem problem;
  int64_t offset_src = 0, offset_weights = 0, offset_dst = 0, channel = 0;
};
ConvBlock ConvBlockOf(const ConvProblem& p, int64_t block, int64_t blocks);
// The extent of the dimension ConvBlockOf splits (no more blocks are useful).
int64_t ConvSplitExtent(const ConvProblem& p);

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

#endif  // RBLN_COMPILER_ONEDNN_CONV_H_

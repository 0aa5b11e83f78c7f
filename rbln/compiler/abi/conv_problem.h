// A 2-D convolution as a kernel hands it to the convolution library
// (kernels/onednn_conv.h): the problem, its encoding as i64 words (a
// constant of the kernel) and how it is cut into blocks. The convolution
// rewrite (transforms/library/) writes it; rbln_conv reads it. No MLIR, no
// oneDNN.
#ifndef RBLN_COMPILER_ABI_CONV_PROBLEM_H_
#define RBLN_COMPILER_ABI_CONV_PROBLEM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "rbln/compiler/abi/library_epilogue.h"

namespace rbln::compiler {

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

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ABI_CONV_PROBLEM_H_

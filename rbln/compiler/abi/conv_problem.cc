#include "rbln/compiler/abi/conv_problem.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "rbln/compiler/abi/problem_encoding.h"

namespace rbln::compiler {
namespace {

constexpr int64_t kEncodingVersion = 2;

}  // namespace

std::vector<int64_t> ConvProblem::Encode() const {
  std::vector<int64_t> words = {
      kEncodingVersion, static_cast<int64_t>(type), f16_kernel, accumulate,
      n, groups, ic,
      oc, ih, iw, kh, kw, oh, ow, stride_h, stride_w, dilation_h, dilation_w,
      pad_top, pad_left, pad_bottom, pad_right};
  words.insert(words.end(), src_strides, src_strides + 4);
  words.insert(words.end(), dst_strides, dst_strides + 4);
  epilogue.AppendTo(words);
  return words;
}

ConvProblem ConvProblem::Decode(const int64_t* w) {
  CheckEncodingVersion("convolution", w[0], kEncodingVersion);
  ConvProblem p;
  p.type = static_cast<ConvOperandType>(w[1]);
  p.f16_kernel = w[2] != 0;
  p.accumulate = w[3] != 0;
  int i = 4;
  for (int64_t* field :
       {&p.n, &p.groups, &p.ic, &p.oc, &p.ih, &p.iw, &p.kh, &p.kw, &p.oh,
        &p.ow, &p.stride_h, &p.stride_w, &p.dilation_h, &p.dilation_w,
        &p.pad_top, &p.pad_left, &p.pad_bottom, &p.pad_right}) {
    *field = w[i++];
  }
  for (int j = 0; j < 4; ++j) p.src_strides[j] = w[i++];
  for (int j = 0; j < 4; ++j) p.dst_strides[j] = w[i++];
  const int64_t* rest = w + i;
  p.epilogue = LibraryEpilogue::Parse(rest);
  return p;
}

std::string ConvProblem::ToString() const {
  return absl::StrFormat(
      "%s%s n %d groups %d ic %d oc %d in %dx%d kernel %dx%d out %dx%d stride "
      "%dx%d dilation %dx%d padding %d,%d,%d,%d%s epilogue [%s]",
      type == ConvOperandType::kBF16 ? "bf16" : "f32",
      f16_kernel ? " (f16 kernel)" : "", n, groups, ic, oc, ih,
      iw, kh, kw, oh, ow, stride_h, stride_w, dilation_h, dilation_w, pad_top,
      pad_left, pad_bottom, pad_right, accumulate ? " accumulate" : "",
      epilogue.ToString());
}

int64_t ConvProblem::Work() const {
  return n * oc * oh * ow * (ic / std::max<int64_t>(groups, 1)) * kh * kw;
}

int64_t ConvSplitExtent(const ConvProblem& p) {
  if (p.n > 1) return p.n;
  if (p.groups > 1) return p.groups;
  return CeilDiv(p.oc, 16);
}

ConvBlock ConvBlockOf(const ConvProblem& p, int64_t block, int64_t blocks) {
  ConvBlock out{p};
  if (blocks <= 1) return out;
  auto range = [&](int64_t extent, int64_t part) {
    return BlockRange(extent, part, block);
  };
  ConvProblem& q = out.problem;
  const int64_t ocg = p.oc / p.groups, icg = p.ic / p.groups;
  if (p.n > 1) {
    auto [begin, size] = range(p.n, CeilDiv(p.n, blocks));
    q.n = size;
    out.offset_src = begin * p.src_strides[0];
    out.offset_dst = begin * p.dst_strides[0];
  } else if (p.groups > 1) {
    auto [begin, size] = range(p.groups, CeilDiv(p.groups, blocks));
    q.groups = size;
    q.ic = size * icg;
    q.oc = size * ocg;
    out.offset_src = begin * icg * p.src_strides[1];
    out.offset_weights = begin * ocg * icg * p.kh * p.kw;
    out.offset_dst = begin * ocg * p.dst_strides[1];
    out.channel = begin * ocg;
  } else {
    auto [begin, size] = range(p.oc, CeilDiv(CeilDiv(p.oc, blocks), 16) * 16);
    q.oc = size;
    out.offset_weights = begin * p.ic * p.kh * p.kw;
    out.offset_dst = begin * p.dst_strides[1];
    out.channel = begin;
  }
  return out;
}

}  // namespace rbln::compiler

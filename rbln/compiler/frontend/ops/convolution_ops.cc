// Convolutions: convolution (1-3 spatial dims; groups, stride, padding,
// dilation; transposed with output_padding) and convolution_backward.
//
// Products accumulate in f32 (half operands are converted by a generic first;
// integer convolutions, which PyTorch's CPU kernels also take, stay in their
// integer type) and the epilogue generic adds the bias and rounds once to the
// output dtype.
// Forward: the input padded with zeros (nn::Pad) goes through MLIR's named
// convolutions where MLIR 16 has one for the NC layout --
// linalg.conv_2d_nchw_fchw and the grouped 2-D op (compat::GroupedConv2DOp,
// kernel [G, F/G, C/G, KH, KW]: PyTorch's weight with its groups split off);
// a 1-D convolution is a 2-D one of height 1 -- so that a later rewrite can
// hand them to a library (SPEC P5's pattern). 3-D convolutions are a
// linalg.generic with the same indexing (MLIR 16 has no NCDHW convolution).
// A transposed convolution is the stride-1 convolution of the input dilated
// by the stride (a strided insert_slice into zeros) and padded by
// dilation * (K - 1) - padding (plus output_padding at the end), with the
// kernel flipped and its channel dims swapped.
//
// convolution_backward: grad_input is the transposed convolution of
// grad_output with the weight (for a transposed convolution, the plain one),
// grad_weight a reduction generic over batch and output positions of
// grad_output times the padded input, grad_bias the sum of grad_output over
// every dim but channels. Only the results "output_mask" asks for are
// outputs, in order.
//
// IR conventions (ATen's schema):
//   convolution(input[N, C, *I], weight, bias?) "stride", "padding",
//     "dilation", "output_padding" (one int per spatial dim, or one for all),
//     "transposed" (bool), "groups" (int); weight [F, C/G, *K], or
//     [C, F/G, *K] when transposed; bias [F].
//   convolution_backward(grad_output, input, weight) the same attributes and
//     "output_mask" ("1,1,1": grad_input, grad_weight, grad_bias); grad_bias
//     has the output channels ("bias_sizes" is not needed).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/pipelines/mlir_compat.h"

namespace rbln::compiler {
namespace {

using ::mlir::AffineExpr;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;
using namespace nn;  // NOLINT: the NN op builders.

struct ConvParams {
  int spatial = 0;
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

absl::StatusOr<ConvParams> ReadParams(const ir::Node& node, int input_rank) {
  ConvParams p;
  p.spatial = input_rank - 2;
  if (p.spatial < 1 || p.spatial > 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: the input must be [N, C, *spatial] with 1 to 3 spatial dims, "
        "got rank %d (unbatched inputs are unsqueezed by F.conv*d before "
        "they reach convolution)",
        node.op(), input_rank));
  }
  const int n = p.spatial;
  absl::StatusOr<std::vector<int64_t>> v = SpatialList(node, "stride", n, {1});
  if (!v.ok()) return v.status();
  p.stride = *v;
  if (v = SpatialList(node, "padding", n, {0}); !v.ok()) return v.status();
  p.padding = *v;
  if (v = SpatialList(node, "dilation", n, {1}); !v.ok()) return v.status();
  p.dilation = *v;
  if (v = SpatialList(node, "output_padding", n, {0}); !v.ok()) {
    return v.status();
  }
  p.output_padding = *v;
  p.transposed = BoolAttr(node, "transposed", false);
  p.groups = IntAttr(node, "groups", 1);
  for (int i = 0; i < n; ++i) {
    if (p.stride[i] < 1 || p.dilation[i] < 1 || p.padding[i] < 0 ||
        p.output_padding[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: stride and dilation must be positive, padding and "
          "output_padding non-negative (stride [%s], padding [%s], dilation "
          "[%s], output_padding [%s])",
          node.op(), absl::StrJoin(p.stride, ", "),
          absl::StrJoin(p.padding, ", "), absl::StrJoin(p.dilation, ", "),
          absl::StrJoin(p.output_padding, ", ")));
    }
    if (p.transposed && p.output_padding[i] >= std::max(p.stride[i],
                                                         p.dilation[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: output padding must be smaller than either stride or "
          "dilation, but got output_padding [%s], stride [%s], dilation [%s]",
          node.op(), absl::StrJoin(p.output_padding, ", "),
          absl::StrJoin(p.stride, ", "), absl::StrJoin(p.dilation, ", ")));
    }
  }
  if (p.groups < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: non-positive groups is not supported (groups %d)", node.op(),
        p.groups));
  }
  return p;
}

// The shapes of one convolution, in its forward direction.
struct ConvShapes {
  int64_t n = 0, in_channels = 0, out_channels = 0;
  Shape in, kernel, out;  // spatial sizes
};

// Checks input/weight against the parameters and computes the output size.
absl::StatusOr<ConvShapes> InferShapes(const ir::Node& node, const Shape& x,
                                       const Shape& w, const ConvParams& p) {
  ConvShapes s;
  const int n = p.spatial;
  if (w.size() != x.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: Expected %d-dimensional weight for %d-dimensional input [%s], "
        "but got weight of size [%s]",
        node.op(), x.size(), x.size(), absl::StrJoin(x, ", "),
        absl::StrJoin(w, ", ")));
  }
  s.n = x[0];
  s.in_channels = x[1];
  s.in.assign(x.begin() + 2, x.end());
  s.kernel.assign(w.begin() + 2, w.end());
  const int64_t g = p.groups;
  if (!p.transposed) {
    s.out_channels = w[0];
    if (w[0] % g != 0 || w[1] * g != x[1]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Given groups=%d, weight of size [%s], expected input[%s] to "
          "have %d channels (and the weight's out channels %d divisible by "
          "groups)",
          node.op(), g, absl::StrJoin(w, ", "), absl::StrJoin(x, ", "),
          w[1] * g, w[0]));
    }
  } else {
    s.out_channels = w[1] * g;
    if (w[0] != x[1] || x[1] % g != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Given transposed=1, groups=%d, weight of size [%s], "
          "expected input[%s] to have %d channels (divisible by groups)",
          node.op(), g, absl::StrJoin(w, ", "), absl::StrJoin(x, ", "), w[0]));
    }
  }
  for (int i = 0; i < n; ++i) {
    const int64_t span = p.dilation[i] * (s.kernel[i] - 1) + 1;
    int64_t o;
    if (!p.transposed) {
      const int64_t padded = s.in[i] + 2 * p.padding[i];
      if (padded < span) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "op %s: Calculated padded input size per channel: (%s). Kernel "
            "size: (%s). Kernel size can't be greater than actual input size",
            node.op(), absl::StrJoin(s.in, " x "),
            absl::StrJoin(s.kernel, " x ")));
      }
      o = (padded - span) / p.stride[i] + 1;
    } else {
      o = (s.in[i] - 1) * p.stride[i] - 2 * p.padding[i] + span - 1 +
          p.output_padding[i] + 1;
      if (o <= 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "op %s: the transposed convolution's output size %d is too small "
            "(input [%s], weight [%s])",
            node.op(), o, absl::StrJoin(x, ", "), absl::StrJoin(w, ", ")));
      }
    }
    s.out.push_back(o);
  }
  return s;
}

Shape FullShape(int64_t n, int64_t c, const Shape& spatial) {
  Shape s = {n, c};
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

mlir::DenseIntElementsAttr I64Vector(OpBuilder& b,
                                     const std::vector<int64_t>& v) {
  return mlir::DenseIntElementsAttr::get(
      mlir::RankedTensorType::get({static_cast<int64_t>(v.size())},
                                  b.getI64Type()),
      llvm::ArrayRef<int64_t>(v));
}

// The stride-`stride`, dilation-`dilation` convolution of `xpad` ([N, G*CG,
// *P], already padded) with `wexp` ([G, FG, CG, *K]), both in the compute
// type: [N, G*FG, *O] in the compute type.
Value ConvCore(GraphImporter& im, Value xpad, Value wexp,
               const std::vector<int64_t>& stride,
               const std::vector<int64_t>& dilation) {
  OpBuilder& b = im.builder();
  const Shape xs = ShapeOf(xpad), ws = ShapeOf(wexp);
  const int spatial = xs.size() - 2;
  const int64_t n = xs[0], g = ws[0], fg = ws[1];
  Shape out;
  for (int i = 0; i < spatial; ++i) {
    out.push_back((xs[2 + i] - dilation[i] * (ws[3 + i] - 1) - 1) / stride[i] +
                  1);
  }
  const Type acc_type = ElementType(xpad);
  if (spatial <= 2) {
    // 1-D as 2-D of height 1.
    Value x = xpad, w = wexp;
    std::vector<int64_t> s = stride, d = dilation;
    Shape o = out;
    if (spatial == 1) {
      x = ExpandDim(im, x, 2, {1, xs[2]});
      w = ExpandDim(im, w, 3, {1, ws[3]});
      s.insert(s.begin(), 1);
      d.insert(d.begin(), 1);
      o.insert(o.begin(), 1);
    }
    llvm::SmallVector<mlir::NamedAttribute> attrs = {
        b.getNamedAttr("strides", I64Vector(b, s)),
        b.getNamedAttr("dilations", I64Vector(b, d))};
    Value acc;
    if (g == 1) {
      Value init = Filled(im, FullShape(n, fg, o), acc_type, 0.0);
      acc = b.create<mlir::linalg::Conv2DNchwFchwOp>(
                 im.loc(), mlir::TypeRange{init.getType()},
                 ValueRange{x, CollapseDims(im, w, 0, 2)}, ValueRange{init},
                 attrs)
                .getResult(0);
    } else {
      Shape grouped = {n, g, fg};
      grouped.insert(grouped.end(), o.begin(), o.end());
      Value init = Filled(im, grouped, acc_type, 0.0);
      Value xg = ExpandDim(im, x, 1, {g, ShapeOf(x)[1] / g});
      acc = CollapseDims(
          im,
          b.create<compat::GroupedConv2DOp>(
               im.loc(), mlir::TypeRange{init.getType()}, ValueRange{xg, w},
               ValueRange{init}, attrs)
              .getResult(0),
          1, 2);
    }
    return spatial == 1 ? CollapseDims(im, acc, 2, 2) : acc;
  }
  // 3-D: loops (n, g, fg, o0..o2, c, k0..k2).
  const int loops = 4 + 2 * spatial;
  Value xg = ExpandDim(im, xpad, 1, {g, xs[1] / g});
  auto dim = [&](int i) { return mlir::getAffineDimExpr(i, im.context()); };
  std::vector<AffineExpr> x_exprs = {dim(0), dim(1), dim(3 + spatial)};
  std::vector<AffineExpr> w_exprs = {dim(1), dim(2), dim(3 + spatial)};
  std::vector<AffineExpr> o_exprs = {dim(0), dim(1), dim(2)};
  for (int i = 0; i < spatial; ++i) {
    AffineExpr o = dim(3 + i), k = dim(4 + spatial + i);
    x_exprs.push_back(o * stride[i] + k * dilation[i]);
    w_exprs.push_back(k);
    o_exprs.push_back(o);
  }
  std::vector<IteratorType> iterators(loops, IteratorType::parallel);
  for (int i = 3 + spatial; i < loops; ++i) {
    iterators[i] = IteratorType::reduction;
  }
  Shape grouped = {n, g, fg};
  grouped.insert(grouped.end(), out.begin(), out.end());
  Value acc = Generic(
      im, {xg, wexp}, Filled(im, grouped, acc_type, 0.0),
      {AffineMap::get(loops, 0, x_exprs, im.context()),
       AffineMap::get(loops, 0, w_exprs, im.context()),
       AffineMap::get(loops, 0, o_exprs, im.context())},
      iterators, [](OpBuilder& b, Location l, ValueRange args) {
        return llvm::SmallVector<Value>{AddScalars(
            b, l, args[2], MulScalars(b, l, args[0], args[1]))};
      })[0];
  return CollapseDims(im, acc, 1, 2);
}

// A plain convolution of `x` [N, C, *I] with `w` [F, C/G, *K] (compute
// type).
Value Conv(GraphImporter& im, Value x, Value w, const ConvParams& p) {
  Shape pad = {0, 0};
  pad.insert(pad.end(), p.padding.begin(), p.padding.end());
  const Shape ws = ShapeOf(w);
  Value wexp = ExpandDim(im, w, 0, {p.groups, ws[0] / p.groups});
  return ConvCore(im, Pad(im, x, pad, pad, 0.0), wexp, p.stride, p.dilation);
}

// `x` dilated by `stride` (zeros between elements) and padded by `low` and
// `high` per spatial dim; negative padding crops.
Value DilateAndPad(GraphImporter& im, Value x,
                   const std::vector<int64_t>& stride, const Shape& low,
                   const Shape& high) {
  OpBuilder& b = im.builder();
  const Shape xs = ShapeOf(x);
  const int spatial = xs.size() - 2;
  // The elements of x that land in the output (cropping drops the others).
  Shape first = {0, 0}, count = {xs[0], xs[1]};
  Shape full = {xs[0], xs[1]}, offsets = {0, 0}, strides = {1, 1};
  bool crop = false;
  for (int i = 0; i < spatial; ++i) {
    const int64_t s = stride[i], in = xs[2 + i];
    const int64_t dilated = (in - 1) * s + 1;
    const int64_t size = dilated + low[i] + high[i];
    // Input element j sits at j * s + low[i]; keep those in [0, size).
    const int64_t lo_j = low[i] >= 0 ? 0 : (-low[i] + s - 1) / s;
    int64_t hi_j = in - 1;
    while (hi_j >= lo_j && hi_j * s + low[i] >= size) --hi_j;
    first.push_back(lo_j);
    count.push_back(std::max<int64_t>(hi_j - lo_j + 1, 0));
    crop |= lo_j != 0 || count.back() != in;
    full.push_back(size);
    offsets.push_back(lo_j * s + low[i]);
    strides.push_back(s);
  }
  Value kept = x;
  if (crop) {
    std::vector<mlir::OpFoldResult> o, n, one;
    for (size_t d = 0; d < xs.size(); ++d) {
      o.push_back(b.getIndexAttr(first[d]));
      n.push_back(b.getIndexAttr(count[d]));
      one.push_back(b.getIndexAttr(1));
    }
    kept = b.create<mlir::tensor::ExtractSliceOp>(
        im.loc(), mlir::RankedTensorType::get(count, ElementType(x)), x, o, n,
        one);
  }
  Value zeros = Filled(im, full, ElementType(x), 0.0);
  if (NumElements(count) == 0) return zeros;
  return Embed(im, kept, zeros, offsets, strides);
}

// A transposed convolution of `x` [N, C, *I] (compute type) with `w` [C,
// F/G, *K] (`w_dtype` is the storage dtype of `w_storage`, which the flipped
// kernel is read from).
Value ConvTransposed(GraphImporter& im, Value x, Value w_storage,
                     ir::DType w_dtype, const ConvParams& p) {
  const Shape ws = ShapeOf(w_storage);
  const int spatial = p.spatial;
  const int64_t g = p.groups, cg = ws[0] / g, fg = ws[1];
  // wexp[g, fg, c, k] = w[g * CG + c, fg, K - 1 - k].
  Shape wexp_shape = {g, fg, cg};
  wexp_shape.insert(wexp_shape.end(), ws.begin() + 2, ws.end());
  const int rank = wexp_shape.size();
  auto dim = [&](int i) { return mlir::getAffineDimExpr(i, im.context()); };
  std::vector<AffineExpr> exprs = {dim(0) * cg + dim(2), dim(1)};
  for (int i = 0; i < spatial; ++i) exprs.push_back(ws[2 + i] - 1 - dim(3 + i));
  Value wexp = Parallel(
      im, w_storage, {AffineMap::get(rank, 0, exprs, im.context())},
      wexp_shape, im.ComputeType(w_dtype),
      [&](OpBuilder& b, Location, ValueRange args) {
        return im.ToCompute(b, args[0], w_dtype);
      });
  Shape low, high;
  for (int i = 0; i < spatial; ++i) {
    const int64_t edge = p.dilation[i] * (ws[2 + i] - 1) - p.padding[i];
    low.push_back(edge);
    high.push_back(edge + p.output_padding[i]);
  }
  return ConvCore(im, DilateAndPad(im, x, p.stride, low, high), wexp,
                  std::vector<int64_t>(spatial, 1), p.dilation);
}

// out[n, c, *o] = round(acc[n, c, *o] (+ bias[c])) in dtype `t`.
Value Epilogue(GraphImporter& im, Value acc, const std::string* bias,
               ir::DType t) {
  const Shape shape = ShapeOf(acc);
  const int rank = shape.size();
  std::vector<Value> inputs = {acc};
  std::vector<AffineMap> maps = {IdentityMap(im, rank)};
  ir::DType bias_dtype = t;
  if (bias != nullptr) {
    inputs.push_back(im.ValueOf(*bias));
    maps.push_back(DimsMap(im, rank, {1}));
    bias_dtype = im.TypeOf(*bias).dtype();
  }
  return Parallel(im, inputs, maps, shape, im.StorageType(t),
                  [&](OpBuilder& b, Location l, ValueRange args) {
                    Value v = args[0];
                    if (bias != nullptr) {
                      v = AddScalars(b, l, v,
                                     im.ToCompute(b, args[1], bias_dtype));
                    }
                    return im.FromCompute(b, v, t);
                  });
}

absl::Status CheckSameDTypes(GraphImporter& im, const ir::Node& node) {
  const ir::DType t = im.TypeOf(node.inputs(0)).dtype();
  if (t == ir::BOOL) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: input %%%s is bool; PyTorch's CPU convolution takes float "
        "and integer tensors",
        node.op(), node.inputs(0)));
  }
  for (int i = 0; i < node.inputs_size(); ++i) {
    if (im.TypeOf(node.inputs(i)).dtype() != t) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Input type (%s) and weight/bias type (%s) should be the "
          "same; cast them to one dtype first",
          node.op(), ir::TypeToText(im.TypeOf(node.inputs(0))),
          ir::TypeToText(im.TypeOf(node.inputs(i)))));
    }
  }
  return absl::OkStatus();
}

absl::Status ConvertConvolution(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() < 2 || node.inputs_size() > 3 ||
      node.outputs_size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes 2 or 3 inputs (input, weight, bias) and 1 output, got "
        "%d and %d",
        node.op(), node.inputs_size(), node.outputs_size()));
  }
  if (absl::Status s = CheckSameDTypes(im, node); !s.ok()) return s;
  const std::string &x = node.inputs(0), &w = node.inputs(1);
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape xs = ShapeOf(im.TypeOf(x)), ws = ShapeOf(im.TypeOf(w));
  absl::StatusOr<ConvParams> p = ReadParams(node, xs.size());
  if (!p.ok()) return p.status();
  absl::StatusOr<ConvShapes> s = InferShapes(node, xs, ws, *p);
  if (!s.ok()) return s.status();
  const std::string* bias = HasInput(node, 2) ? &node.inputs(2) : nullptr;
  if (bias && ShapeOf(im.TypeOf(*bias)) != Shape{s->out_channels}) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: Given weight of size [%s], expected bias to be 1-dimensional "
        "with %d elements, but got bias of size %s",
        node.op(), absl::StrJoin(ws, ", "), s->out_channels,
        ir::TypeToText(im.TypeOf(*bias))));
  }
  const Shape out = FullShape(s->n, s->out_channels, s->out);
  if (absl::Status st = CheckOutput(node, 0, out, t); !st.ok()) return st;
  Value acc;
  if (NumElements(xs) == 0 || NumElements(ws) == 0) {
    // Nothing is read: the output is the bias (or zeros).
    acc = Filled(im, out, im.ComputeType(t), 0.0);
  } else if (!p->transposed) {
    acc = Conv(im, ToComputeTensor(im, im.ValueOf(x), t),
               ToComputeTensor(im, im.ValueOf(w), t), *p);
  } else {
    acc = ConvTransposed(im, ToComputeTensor(im, im.ValueOf(x), t),
                         im.ValueOf(w), t, *p);
  }
  im.Define(node.outputs(0), Epilogue(im, acc, bias, t));
  return absl::OkStatus();
}

// Sums of a[n, g*AG + ag, *o] * bpad[n, g*BG + bg, o * stride + k *
// dilation] over n and o, shaped [A, B/G, *K] (compute type): grad_weight.
Value WeightGrad(GraphImporter& im, Value a, Value bpad,
                 const std::vector<int64_t>& stride,
                 const std::vector<int64_t>& dilation, int64_t groups,
                 const Shape& kernel) {
  const Shape as = ShapeOf(a), bs = ShapeOf(bpad);
  const int spatial = as.size() - 2;
  const int64_t ag = as[1] / groups, bg = bs[1] / groups;
  // Loops: (g, ag, bg, k..., n, o...).
  const int loops = 4 + 2 * spatial;
  auto dim = [&](int i) { return mlir::getAffineDimExpr(i, im.context()); };
  const int n_dim = 3 + spatial;
  std::vector<AffineExpr> a_exprs = {dim(n_dim), dim(0) * ag + dim(1)};
  std::vector<AffineExpr> b_exprs = {dim(n_dim), dim(0) * bg + dim(2)};
  std::vector<AffineExpr> o_exprs = {dim(0), dim(1), dim(2)};
  for (int i = 0; i < spatial; ++i) {
    AffineExpr k = dim(3 + i), o = dim(n_dim + 1 + i);
    a_exprs.push_back(o);
    b_exprs.push_back(o * stride[i] + k * dilation[i]);
    o_exprs.push_back(k);
  }
  std::vector<IteratorType> iterators(loops, IteratorType::parallel);
  for (int i = n_dim; i < loops; ++i) iterators[i] = IteratorType::reduction;
  Shape out = {groups, ag, bg};
  out.insert(out.end(), kernel.begin(), kernel.end());
  Value grad = Generic(
      im, {a, bpad}, Filled(im, out, ElementType(a), 0.0),
      {AffineMap::get(loops, 0, a_exprs, im.context()),
       AffineMap::get(loops, 0, b_exprs, im.context()),
       AffineMap::get(loops, 0, o_exprs, im.context())},
      iterators, [](OpBuilder& b, Location l, ValueRange args) {
        return llvm::SmallVector<Value>{AddScalars(
            b, l, args[2], MulScalars(b, l, args[0], args[1]))};
      })[0];
  return CollapseDims(im, grad, 0, 2);
}

absl::Status ConvertConvolutionBackward(GraphImporter& im,
                                        const ir::Node& node) {
  if (node.inputs_size() != 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes 3 inputs (grad_output, input, weight), got %d", node.op(),
        node.inputs_size()));
  }
  if (absl::Status s = CheckSameDTypes(im, node); !s.ok()) return s;
  const std::string &go = node.inputs(0), &x = node.inputs(1),
                    &w = node.inputs(2);
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape gos = ShapeOf(im.TypeOf(go)), xs = ShapeOf(im.TypeOf(x)),
              ws = ShapeOf(im.TypeOf(w));
  absl::StatusOr<ConvParams> p = ReadParams(node, xs.size());
  if (!p.ok()) return p.status();
  absl::StatusOr<ConvShapes> s = InferShapes(node, xs, ws, *p);
  if (!s.ok()) return s.status();
  if (gos != FullShape(s->n, s->out_channels, s->out)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: grad_output %%%s is [%s], but the convolution's output is "
        "[%s]",
        node.op(), go, absl::StrJoin(gos, ", "),
        absl::StrJoin(FullShape(s->n, s->out_channels, s->out), ", ")));
  }
  absl::StatusOr<std::vector<int64_t>> mask =
      SpatialList(node, "output_mask", 3, {1, 1, 1});
  if (!mask.ok()) return mask.status();
  const int wanted = std::count_if(mask->begin(), mask->end(),
                                   [](int64_t m) { return m != 0; });
  if (node.outputs_size() != wanted) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: output_mask [%s] asks for %d result(s), but the node has %d "
        "output(s)",
        node.op(), absl::StrJoin(*mask, ", "), wanted, node.outputs_size()));
  }
  const Type compute = im.ComputeType(t);
  const bool empty = NumElements(gos) == 0 || NumElements(xs) == 0 ||
                     NumElements(ws) == 0;
  Value go_c = ToComputeTensor(im, im.ValueOf(go), t);
  int next = 0;
  if ((*mask)[0]) {
    if (absl::Status st = CheckOutput(node, next, xs, t); !st.ok()) return st;
    Value grad;
    if (empty) {
      grad = Filled(im, xs, compute, 0.0);
    } else if (!p->transposed) {
      // The transposed convolution of grad_output, with the output padding
      // that gives back the input's size.
      ConvParams tp = *p;
      tp.transposed = true;
      for (int i = 0; i < p->spatial; ++i) {
        tp.output_padding[i] =
            s->in[i] - ((s->out[i] - 1) * p->stride[i] - 2 * p->padding[i] +
                        p->dilation[i] * (s->kernel[i] - 1) + 1);
      }
      grad = ConvTransposed(im, go_c, im.ValueOf(w), t, tp);
    } else {
      ConvParams cp = *p;
      cp.transposed = false;
      grad = Conv(im, go_c, ToComputeTensor(im, im.ValueOf(w), t), cp);
    }
    im.Define(node.outputs(next++), ToStorageTensor(im, grad, t));
  }
  if ((*mask)[1]) {
    if (absl::Status st = CheckOutput(node, next, ws, t); !st.ok()) return st;
    Value grad;
    if (empty) {
      grad = Filled(im, ws, compute, 0.0);
    } else {
      Shape pad = {0, 0};
      pad.insert(pad.end(), p->padding.begin(), p->padding.end());
      Value x_c = ToComputeTensor(im, im.ValueOf(x), t);
      grad = p->transposed
                 ? WeightGrad(im, x_c, Pad(im, go_c, pad, pad, 0.0), p->stride,
                              p->dilation, p->groups, s->kernel)
                 : WeightGrad(im, go_c, Pad(im, x_c, pad, pad, 0.0), p->stride,
                              p->dilation, p->groups, s->kernel);
    }
    im.Define(node.outputs(next++), ToStorageTensor(im, grad, t));
  }
  if ((*mask)[2]) {
    const Shape bias = {s->out_channels};
    if (absl::Status st = CheckOutput(node, next, bias, t); !st.ok()) {
      return st;
    }
    const int rank = gos.size();
    std::vector<IteratorType> iterators(rank, IteratorType::reduction);
    iterators[1] = IteratorType::parallel;
    Value sum = Generic(im, go_c, Filled(im, bias, compute, 0.0),
                        {IdentityMap(im, rank), DimsMap(im, rank, {1})},
                        iterators, [](OpBuilder& b, Location l, ValueRange a) {
                          return llvm::SmallVector<Value>{
                              AddScalars(b, l, a[1], a[0])};
                        })[0];
    im.Define(node.outputs(next++), ToStorageTensor(im, sum, t));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterConvolutionOps(OpConverterTable& table) {
  table["convolution"] = &ConvertConvolution;
  table["convolution_backward"] = &ConvertConvolutionBackward;
}

}  // namespace rbln::compiler

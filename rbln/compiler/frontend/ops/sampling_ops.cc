// Sampling: grid_sampler_2d (bilinear, nearest, bicubic) and
// grid_sampler_3d (trilinear, nearest), with zeros, border and reflection
// padding and align_corners, as ATen's CPU kernels compute them
// (aten/src/ATen/native/GridSampler.h): a grid coordinate in [-1, 1] is
// unnormalized to a pixel position, moved by the padding mode, and the
// neighbouring pixels are read with bounds checks (outside pixels are 0).
//
// One parallel linalg.generic over the output [N, C, *out]: the grid's
// coordinates are read by affine maps, the input by tensor.extract at
// clamped indices, in f32, rounded once to the output dtype.
//
// upsample_nearest2d and upsample_bilinear2d (align_corners, scales) read
// the input at ATen's source indices (UpSample.h: nearest_idx,
// area_pixel_compute_source_index) in one parallel generic; Dynamo graphs
// carry their decompositions (index with computed indices), these serve
// graphs that keep the ops.
//
// IR conventions (ATen's schema):
//   upsample_nearest2d(x[N, C, H, W]) and upsample_bilinear2d(x)
//     "align_corners" (bilinear), the output size from the node, optional
//     "scale_factors" ("2.0,2.0", the .vec overload) or "scales_h",
//     "scales_w": a positive scale s maps an output index to index / s
//     instead of in / out.
//   grid_sampler_2d(input[N, C, H, W], grid[N, Ho, Wo, 2])
//     "interpolation_mode" (0 bilinear, 1 nearest, 2 bicubic),
//     "padding_mode" (0 zeros, 1 border, 2 reflection), "align_corners"
//   grid_sampler_3d(input[N, C, D, H, W], grid[N, Do, Ho, Wo, 3]): the same
//     without bicubic.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
namespace math = ::mlir::math;
using ::mlir::AffineExpr;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using namespace nn;  // NOLINT: the NN op builders.

enum class Interpolation { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

// f32 scalar arithmetic for the bodies.
struct F {
  OpBuilder& b;
  Location l;

  Value c(double v) const { return F32Const(b, l, v); }
  Value add(Value x, Value y) const { return b.create<arith::AddFOp>(l, x, y); }
  Value sub(Value x, Value y) const { return b.create<arith::SubFOp>(l, x, y); }
  Value mul(Value x, Value y) const { return b.create<arith::MulFOp>(l, x, y); }
  Value div(Value x, Value y) const { return b.create<arith::DivFOp>(l, x, y); }
  Value floor(Value x) const { return b.create<math::FloorOp>(l, x); }
  Value min(Value x, Value y) const {
    return b.create<arith::SelectOp>(
        l, b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OLT, x, y), x, y);
  }
  Value max(Value x, Value y) const {
    return b.create<arith::SelectOp>(
        l, b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OGT, x, y), x, y);
  }
};

// ATen's grid_sampler_unnormalize.
Value Unnormalize(const F& f, Value coord, int64_t size, bool align_corners) {
  if (align_corners) {
    return f.mul(f.div(f.add(coord, f.c(1)), f.c(2)), f.c(size - 1));
  }
  return f.div(f.sub(f.mul(f.add(coord, f.c(1)), f.c(size)), f.c(1)),
               f.c(2));
}

// clip_coordinates: min(size - 1, max(x, 0)), NaN staying NaN in neither
// comparison as std::min/std::max give it.
Value Clip(const F& f, Value x, int64_t size) {
  // std::max(in, 0) returns `in` unless in < 0; std::min(limit, v) returns
  // v unless v < limit... i.e. limit when !(v < limit).
  Value lower = f.b.create<arith::SelectOp>(
      f.l, f.b.create<arith::CmpFOp>(f.l, arith::CmpFPredicate::OLT, x, f.c(0)),
      f.c(0), x);
  return f.b.create<arith::SelectOp>(
      f.l,
      f.b.create<arith::CmpFOp>(f.l, arith::CmpFPredicate::OLT, lower,
                                f.c(size - 1)),
      lower, f.c(size - 1));
}

// reflect_coordinates(in, twice_low, twice_high).
Value Reflect(const F& f, Value in, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return f.c(0);
  const double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  Value x = f.b.create<math::AbsFOp>(f.l, f.sub(in, f.c(lo)));
  Value extra = f.b.create<arith::RemFOp>(f.l, x, f.c(span));
  Value flips = f.floor(f.div(x, f.c(span)));
  // flips % 2 == 0 <=> flips - 2 * floor(flips / 2) == 0.
  Value even = f.b.create<arith::CmpFOp>(
      f.l, arith::CmpFPredicate::OEQ,
      f.sub(flips, f.mul(f.c(2), f.floor(f.div(flips, f.c(2))))), f.c(0));
  return f.b.create<arith::SelectOp>(f.l, even, f.add(extra, f.c(lo)),
                                     f.add(f.sub(f.c(span), extra), f.c(lo)));
}

// compute_coordinates: the padding mode applied to a pixel position.
Value ApplyPadding(const F& f, Value coord, int64_t size, Padding padding,
                   bool align_corners) {
  if (padding == Padding::kBorder) return Clip(f, coord, size);
  if (padding == Padding::kReflection) {
    coord = align_corners ? Reflect(f, coord, 0, 2 * (size - 1))
                          : Reflect(f, coord, -1, 2 * size - 1);
    return Clip(f, coord, size);
  }
  return coord;
}

// The input reader of one output element: in[n, c, pos...] at f32 integer
// positions, 0 outside the input.
struct Reader {
  GraphImporter& im;
  Value input;
  ir::DType dtype;
  Shape spatial;  // input sizes
  Value n, c;     // loop indices

  Value At(const F& f, const std::vector<Value>& pos) const {
    OpBuilder& b = f.b;
    Location l = f.l;
    Value inside = b.create<arith::ConstantIntOp>(l, 1, 1);
    std::vector<Value> coords = {n, c};
    for (size_t d = 0; d < pos.size(); ++d) {
      // Positions are whole numbers here; out-of-range (and NaN) ones read
      // nothing.
      Value ok = b.create<arith::AndIOp>(
          l,
          b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OGE, pos[d],
                                  f.c(0)),
          b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OLT, pos[d],
                                  f.c(spatial[d])));
      inside = b.create<arith::AndIOp>(l, inside, ok);
      Value safe = b.create<arith::SelectOp>(l, ok, pos[d], f.c(0));
      coords.push_back(b.create<arith::IndexCastOp>(
          l, b.getIndexType(),
          b.create<arith::FPToSIOp>(l, b.getI64Type(), safe)));
    }
    Value v = im.ToCompute(b, b.create<mlir::tensor::ExtractOp>(l, input, coords),
                           dtype);
    return b.create<arith::SelectOp>(l, inside, v, f.c(0));
  }
};

// ATen's cubic convolution coefficients (A = -0.75) for the offset t.
std::vector<Value> CubicCoefficients(const F& f, Value t) {
  const double a = -0.75;
  auto conv1 = [&](Value x) {  // ((A + 2) * x - (A + 3)) * x * x + 1
    return f.add(
        f.mul(f.mul(f.sub(f.mul(f.c(a + 2), x), f.c(a + 3)), x), x), f.c(1));
  };
  auto conv2 = [&](Value x) {  // ((A * x - 5A) * x + 8A) * x - 4A
    return f.sub(
        f.mul(f.add(f.mul(f.sub(f.mul(f.c(a), x), f.c(5 * a)), x), f.c(8 * a)),
              x),
        f.c(4 * a));
  };
  Value t2 = f.sub(f.c(1), t);
  return {conv2(f.add(t, f.c(1))), conv1(t), conv1(t2),
          conv2(f.add(t2, f.c(1)))};
}

absl::Status ConvertGridSampler(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const std::string &input = node.inputs(0), &grid = node.inputs(1);
  const int spatial = node.op() == "grid_sampler_3d" ? 3 : 2;
  const ir::DType t = im.TypeOf(input).dtype();
  if (absl::Status s = CheckFloatTensor(im, node, input, "input"); !s.ok()) {
    return s;
  }
  const Shape xs = ShapeOf(im.TypeOf(input)), gs = ShapeOf(im.TypeOf(grid));
  if (static_cast<int>(xs.size()) != spatial + 2 ||
      static_cast<int>(gs.size()) != spatial + 2 || gs[0] != xs[0] ||
      gs.back() != spatial || im.TypeOf(grid).dtype() != t) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: expected input [N, C, *%d spatial dims] and grid [N, *out, "
        "%d] of the input's dtype, got input %s and grid %s",
        node.op(), spatial, spatial, ir::TypeToText(im.TypeOf(input)),
        ir::TypeToText(im.TypeOf(grid))));
  }
  const auto interpolation =
      static_cast<Interpolation>(IntAttr(node, "interpolation_mode", 0));
  const auto padding = static_cast<Padding>(IntAttr(node, "padding_mode", 0));
  const bool align_corners = BoolAttr(node, "align_corners", false);
  if (static_cast<int>(interpolation) < 0 ||
      static_cast<int>(interpolation) > (spatial == 2 ? 2 : 1) ||
      static_cast<int>(padding) < 0 || static_cast<int>(padding) > 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: interpolation_mode %d / padding_mode %d is not one of "
        "bilinear (0), nearest (1)%s / zeros (0), border (1), reflection (2)",
        node.op(), static_cast<int>(interpolation), static_cast<int>(padding),
        spatial == 2 ? ", bicubic (2)" : ""));
  }
  Shape out = {xs[0], xs[1]};
  out.insert(out.end(), gs.begin() + 1, gs.end() - 1);
  if (absl::Status s = CheckOutput(node, 0, out, t); !s.ok()) return s;
  if (NumElements(out) == 0) {
    im.Define(node.outputs(0), Empty(im, out, im.StorageType(t)));
    return absl::OkStatus();
  }
  if (NumElements(xs) == 0) {
    im.Define(node.outputs(0), Filled(im, out, im.StorageType(t), 0.0));
    return absl::OkStatus();
  }
  const int rank = out.size();
  // grid[n, o..., k] for the coordinate k (x is the last spatial dim).
  std::vector<AffineMap> maps;
  for (int k = 0; k < spatial; ++k) {
    std::vector<AffineExpr> e = {mlir::getAffineDimExpr(0, im.context())};
    for (int d = 2; d < rank; ++d) {
      e.push_back(mlir::getAffineDimExpr(d, im.context()));
    }
    e.push_back(mlir::getAffineConstantExpr(k, im.context()));
    maps.push_back(AffineMap::get(rank, 0, e, im.context()));
  }
  Value g = im.ValueOf(grid);
  std::vector<Value> grids(spatial, g);
  const Shape in_spatial(xs.begin() + 2, xs.end());
  Value result = Parallel(
      im, grids, maps, out, im.StorageType(t),
      [&](OpBuilder& b, Location l, ValueRange args) {
        F f{b, l};
        Reader read{im, im.ValueOf(input), t, in_spatial, LoopIndex(b, l, 0),
                    LoopIndex(b, l, 1)};
        // Coordinates per spatial dim, outermost first: grid holds
        // (x, y[, z]), the last dim first.
        std::vector<Value> coord(spatial);
        for (int d = 0; d < spatial; ++d) {
          const int k = spatial - 1 - d;
          coord[d] = Unnormalize(f, im.ToCompute(b, args[k], t),
                                 in_spatial[d], align_corners);
        }
        Value v;
        if (interpolation == Interpolation::kBicubic) {
          // Taps at floor(x) - 1 .. floor(x) + 2, each padded on its own.
          Value iy = f.floor(coord[0]), ix = f.floor(coord[1]);
          std::vector<Value> cx = CubicCoefficients(f, f.sub(coord[1], ix));
          std::vector<Value> cy = CubicCoefficients(f, f.sub(coord[0], iy));
          auto tap = [&](Value pos, int64_t size) {
            // get_value_bounded: padding, then truncation toward zero.
            Value p = ApplyPadding(f, pos, size, padding, align_corners);
            Value truncated = b.create<arith::SIToFPOp>(
                l, b.getF32Type(),
                b.create<arith::FPToSIOp>(
                    l, b.getI64Type(),
                    b.create<arith::SelectOp>(
                        l,
                        b.create<arith::CmpFOp>(l, arith::CmpFPredicate::UNO,
                                                p, p),
                        f.c(-1), f.max(f.min(p, f.c(1e9)), f.c(-1e9)))));
            return truncated;
          };
          v = f.c(0);
          for (int i = 0; i < 4; ++i) {
            Value row = f.c(0);
            Value y = tap(f.add(iy, f.c(i - 1)), in_spatial[0]);
            for (int j = 0; j < 4; ++j) {
              Value x = tap(f.add(ix, f.c(j - 1)), in_spatial[1]);
              row = f.add(row, f.mul(read.At(f, {y, x}), cx[j]));
            }
            v = f.add(v, f.mul(row, cy[i]));
          }
        } else {
          for (int d = 0; d < spatial; ++d) {
            coord[d] = ApplyPadding(f, coord[d], in_spatial[d], padding,
                                    align_corners);
          }
          if (interpolation == Interpolation::kNearest) {
            std::vector<Value> pos;
            for (Value c : coord) pos.push_back(b.create<math::RoundEvenOp>(l, c));
            v = read.At(f, pos);
          } else {
            // (Bi/tri)linear: the 2^spatial corners, weighted by the
            // opposite corner's distances.
            std::vector<Value> lo, frac;
            for (Value c : coord) {
              lo.push_back(f.floor(c));
              frac.push_back(f.sub(c, lo.back()));
            }
            v = f.c(0);
            for (int corner = 0; corner < (1 << spatial); ++corner) {
              std::vector<Value> pos;
              Value w = f.c(1);
              for (int d = 0; d < spatial; ++d) {
                const bool high = corner & (1 << (spatial - 1 - d));
                pos.push_back(high ? f.add(lo[d], f.c(1)) : lo[d]);
                w = f.mul(w, high ? frac[d] : f.sub(f.add(lo[d], f.c(1)),
                                                    coord[d]));
              }
              v = f.add(v, f.mul(read.At(f, pos), w));
            }
          }
        }
        return im.FromCompute(b, v, t);
      });
  im.Define(node.outputs(0), result);
  return absl::OkStatus();
}

// The scales of an upsample node per spatial dim (0: none).
absl::StatusOr<std::vector<double>> UpsampleScales(const ir::Node& node) {
  std::vector<double> scales(2, 0.0);
  auto it = node.attrs().find("scale_factors");
  if (it != node.attrs().end()) {
    std::vector<double> v;
    if (it->second.value_case() == ir::Attribute::kS) {
      for (absl::string_view part :
           absl::StrSplit(it->second.s(), ',', absl::SkipWhitespace())) {
        double d;
        if (!absl::SimpleAtod(part, &d)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "op %s: scale_factors must be floats like \"2.0,2.0\", got '%s'",
              node.op(), it->second.s()));
        }
        v.push_back(d);
      }
    } else {
      v.push_back(FloatAttr(node, "scale_factors", 0.0));
    }
    if (v.size() == 1) v.push_back(v[0]);
    if (v.size() != 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: scale_factors must have 2 values, got '%s'", node.op(),
          it->second.s()));
    }
    return v;
  }
  scales[0] = FloatAttr(node, "scales_h", 0.0);
  scales[1] = FloatAttr(node, "scales_w", 0.0);
  return scales;
}

// compute_scales_value: 1 / scale when given, else in / out (as float).
float ScaleValue(double scale, int64_t in, int64_t out) {
  return scale > 0 ? static_cast<float>(1.0 / scale)
                   : static_cast<float>(in) / static_cast<float>(out);
}

absl::Status ConvertUpsample(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  const bool bilinear = node.op() == "upsample_bilinear2d";
  const ir::DType t = im.TypeOf(x).dtype();
  if (bilinear) {
    if (absl::Status s = CheckFloatTensor(im, node, x, "input"); !s.ok()) {
      return s;
    }
  }
  const Shape xs = ShapeOf(im.TypeOf(x));
  const Shape out = ShapeOf(node.outputs(0).type());
  if (xs.size() != 4 || out.size() != 4 || out[0] != xs[0] ||
      out[1] != xs[1] || node.outputs(0).type().dtype() != t) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: expected a [N, C, H, W] input and an output of its dtype with "
        "the same N and C, got %s -> %s",
        node.op(), ir::TypeToText(im.TypeOf(x)),
        ir::TypeToText(node.outputs(0).type())));
  }
  absl::StatusOr<std::vector<double>> scales = UpsampleScales(node);
  if (!scales.ok()) return scales.status();
  const bool align = BoolAttr(node, "align_corners", false);
  if (NumElements(out) == 0 || NumElements(xs) == 0) {
    im.Define(node.outputs(0), Filled(im, out, im.StorageType(t), 0.0));
    return absl::OkStatus();
  }
  Value input = im.ValueOf(x);
  Value result = Parallel(
      im, {}, {}, out, im.StorageType(t),
      [&](OpBuilder& b, Location l, ValueRange) {
        F f{b, l};
        auto to_index = [&](Value v) {
          return b.create<arith::IndexCastOp>(
              l, b.getIndexType(),
              b.create<arith::FPToSIOp>(l, b.getI64Type(), v));
        };
        auto as_float = [&](Value index) {
          return b.create<arith::SIToFPOp>(
              l, b.getF32Type(),
              b.create<arith::IndexCastOp>(l, b.getI64Type(), index));
        };
        Value n = LoopIndex(b, l, 0), c = LoopIndex(b, l, 1);
        if (!bilinear) {
          std::vector<Value> src;
          for (int d = 0; d < 2; ++d) {
            const int64_t in_size = xs[2 + d], out_size = out[2 + d];
            Value o = LoopIndex(b, l, 2 + d);
            if (out_size == in_size) {
              src.push_back(o);
            } else if (out_size == 2 * in_size) {
              src.push_back(b.create<arith::DivUIOp>(l, o, IndexConst(b, l, 2)));
            } else {
              // min(floor(o * scale), in - 1)
              Value v = f.floor(f.mul(
                  as_float(o), f.c(ScaleValue((*scales)[d], in_size, out_size))));
              src.push_back(b.create<arith::MinSIOp>(
                  l, to_index(v), IndexConst(b, l, in_size - 1)));
            }
          }
          return b
              .create<mlir::tensor::ExtractOp>(l, input,
                                               ValueRange{n, c, src[0], src[1]})
              .getResult();
        }
        // Per dim: the two source rows and their weights (ATen's
        // compute_indices_weights_linear).
        Value lo[2], hi[2], w0[2], w1[2];
        for (int d = 0; d < 2; ++d) {
          const int64_t in_size = xs[2 + d], out_size = out[2 + d];
          const float scale =
              align ? (out_size > 1 ? static_cast<float>(in_size - 1) /
                                          static_cast<float>(out_size - 1)
                                    : 0.0f)
                    : ScaleValue((*scales)[d], in_size, out_size);
          Value o = as_float(LoopIndex(b, l, 2 + d));
          Value real = align ? f.mul(f.c(scale), o)
                             : f.max(f.sub(f.mul(f.c(scale), f.add(o, f.c(0.5))),
                                           f.c(0.5)),
                                     f.c(0));
          Value floor = f.min(f.floor(real), f.c(in_size - 1));
          Value lambda = f.min(f.max(f.sub(real, floor), f.c(0)), f.c(1));
          lo[d] = to_index(floor);
          hi[d] = b.create<arith::MinSIOp>(
              l, b.create<arith::AddIOp>(l, lo[d], IndexConst(b, l, 1)),
              IndexConst(b, l, in_size - 1));
          w0[d] = f.sub(f.c(1), lambda);
          w1[d] = lambda;
        }
        auto at = [&](Value h, Value w) {
          return im.ToCompute(
              b,
              b.create<mlir::tensor::ExtractOp>(l, input, ValueRange{n, c, h, w}),
              t);
        };
        Value top = f.add(f.mul(w0[1], at(lo[0], lo[1])),
                          f.mul(w1[1], at(lo[0], hi[1])));
        Value bottom = f.add(f.mul(w0[1], at(hi[0], lo[1])),
                             f.mul(w1[1], at(hi[0], hi[1])));
        return im.FromCompute(b, f.add(f.mul(w0[0], top), f.mul(w1[0], bottom)),
                              t);
      });
  im.Define(node.outputs(0), result);
  return absl::OkStatus();
}

}  // namespace

void RegisterSamplingOps(OpConverterTable& table) {
  table["grid_sampler_2d"] = &ConvertGridSampler;
  table["grid_sampler_3d"] = &ConvertGridSampler;
  table["upsample_nearest2d"] = &ConvertUpsample;
  table["upsample_bilinear2d"] = &ConvertUpsample;
}

}  // namespace rbln::compiler

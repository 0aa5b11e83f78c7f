// Vector norms: linalg_vector_norm and dist.
//
// One reduction generic in f32 (PyTorch's opmath for every float dtype) per
// ord, as ATen's norm kernels: 0 counts x != 0 (NaN counts), 1 sums |x|,
// 2 sums x^2 then takes sqrt, inf / -inf take max / min of |x| (NaN
// propagates), any other p sums |x|^p then takes the 1/p-th power (p < 0
// included: a zero makes the sum inf and the norm 0). The result is rounded
// once to the output dtype.
//
// IR conventions (output dtype and shape come from the node):
//   linalg_vector_norm(x)  "ord" (default 2; inf and -inf as floats), "dim"
//     (reduced dims as the reductions; absent: all), "keepdim", "dtype"
//     (implied by the output: x is converted to it first, as ATen does).
//   dist(x, y)  "p" (default 2): the norm of x - y over every element,
//     x and y broadcast; the difference is rounded to the output dtype
//     first, as ATen's norm(self - other, p).
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/reduction_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::utils::IteratorType;

// How ATen computes a norm of order `ord`.
enum class NormKind { kZero, kOne, kTwo, kInf, kNegInf, kPower };

NormKind KindOf(double ord) {
  if (ord == 0) return NormKind::kZero;
  if (ord == 1) return NormKind::kOne;
  if (ord == 2) return NormKind::kTwo;
  if (std::isinf(ord)) return ord > 0 ? NormKind::kInf : NormKind::kNegInf;
  return NormKind::kPower;
}

// The element of the reduction: `args` are the inputs read at the current
// point of the loops, converted to f32.
using ElementFn =
    std::function<Value(OpBuilder&, Location, ValueRange computed)>;

// The norm of order `ord` of `element` over the `reduced` dims of the loop
// space `loop_shape` (inputs read through `maps`), rounded to the node's
// output 0.
Value EmitNorm(GraphImporter& im, const ir::Node& node,
               const std::vector<Value>& inputs,
               const std::vector<ir::DType>& dtypes,
               const std::vector<AffineMap>& maps, const Shape& loop_shape,
               const std::vector<bool>& reduced, bool keepdim, double ord,
               const ElementFn& element) {
  const NormKind kind = KindOf(ord);
  const Shape acc_shape = ReducedShape(loop_shape, reduced, keepdim);
  const double init = kind == NormKind::kNegInf ? INFINITY : 0.0;
  std::vector<AffineMap> all_maps = maps;
  all_maps.push_back(ReducedMap(im, reduced, keepdim));
  Value acc = Generic(
      im, inputs, Filled(im, acc_shape, F32(im, init)), all_maps,
      Iterators(reduced), [&](OpBuilder& b, Location l, ValueRange args) {
        std::vector<Value> computed;
        for (size_t i = 0; i < dtypes.size(); ++i) {
          computed.push_back(im.ToCompute(b, args[i], dtypes[i]));
        }
        Value v = element(b, l, computed);
        Value a = args[dtypes.size()];
        Value abs = b.create<mlir::math::AbsFOp>(l, v);
        Value r;
        switch (kind) {
          case NormKind::kZero: {
            Value nonzero = b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::UNE,
                                                          v, F32Const(b, 0.0));
            r = b.create<mlir::arith::AddFOp>(
                l, a,
                b.create<mlir::arith::UIToFPOp>(l, b.getF32Type(), nonzero));
            break;
          }
          case NormKind::kOne:
            r = b.create<mlir::arith::AddFOp>(l, a, abs);
            break;
          case NormKind::kTwo:
            r = b.create<mlir::arith::AddFOp>(
                l, a, b.create<mlir::arith::MulFOp>(l, v, v));
            break;
          case NormKind::kInf:
            r = MaxOrMin(b, l, abs, a, /*max=*/true);
            break;
          case NormKind::kNegInf:
            r = MaxOrMin(b, l, abs, a, /*max=*/false);
            break;
          case NormKind::kPower:
            r = b.create<mlir::arith::AddFOp>(
                l, a, b.create<mlir::math::PowFOp>(l, abs, F32Const(b, ord)));
            break;
        }
        return llvm::SmallVector<Value>{r};
      })[0];
  std::function<Value(OpBuilder&, Location, Value)> project;
  if (kind == NormKind::kTwo) {
    project = [](OpBuilder& b, Location l, Value s) -> Value {
      return b.create<mlir::math::SqrtOp>(l, s);
    };
  } else if (kind == NormKind::kPower) {
    project = [ord](OpBuilder& b, Location l, Value s) -> Value {
      return b.create<mlir::math::PowFOp>(l, s, F32Const(b, 1.0 / ord));
    };
  }
  return Finalize(im, node, 0, acc, project);
}

// ATen raises for norms without an identity over empty dims.
absl::Status CheckIdentity(const ir::Node& node, const Shape& shape,
                           const std::vector<bool>& reduced, double ord) {
  if (ord >= 0 && !std::isinf(ord)) return absl::OkStatus();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d] && shape[d] == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: linalg.vector_norm cannot compute the %g norm on an empty "
          "tensor because the operation does not have an identity",
          node.op(), ord));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFloatInput(const ir::Node& node, const ir::TensorType& t,
                             const std::string& name) {
  if (!IsFloat(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: linalg.vector_norm: Expected a floating point or complex "
        "tensor as input. Got %s (input %%%s)",
        node.op(), ScalarTypeName(t.dtype()), name));
  }
  return absl::OkStatus();
}

absl::Status ConvertLinalgVectorNorm(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  if (absl::Status s = CheckFloatInput(node, in, node.inputs(0)); !s.ok()) {
    return s;
  }
  const ir::DType out_dtype = node.outputs(0).type().dtype();
  if (absl::Status s = CheckFloat(node, out_dtype); !s.ok()) return s;
  const Shape shape = ShapeOf(in);
  const int rank = shape.size();
  absl::StatusOr<std::vector<bool>> reduced = ReducedDims(node, rank);
  if (!reduced.ok()) return reduced.status();
  const bool keepdim = BoolAttr(node, "keepdim", false);
  if (absl::Status s =
          CheckOutputShape(node, 0, ReducedShape(shape, *reduced, keepdim));
      !s.ok()) {
    return s;
  }
  const double ord = FloatAttr(node, "ord", 2.0);
  if (absl::Status s = CheckIdentity(node, shape, *reduced, ord); !s.ok()) {
    return s;
  }
  const ir::DType in_dtype = in.dtype();
  im.Define(node.outputs(0),
            EmitNorm(im, node, {im.ValueOf(node.inputs(0))}, {in_dtype},
                     {Identity(im, rank)}, shape, *reduced, keepdim, ord,
                     [&](OpBuilder& b, Location, ValueRange x) -> Value {
                       if (in_dtype == out_dtype) return x[0];
                       // dtype=: x converted to the output dtype first.
                       return im.ToCompute(
                           b, im.FromCompute(b, x[0], out_dtype), out_dtype);
                     }));
  return absl::OkStatus();
}

// dist(x, y): the norm of the broadcast difference over all its elements.
absl::Status ConvertDist(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const ir::TensorType& x = im.TypeOf(node.inputs(0));
  const ir::TensorType& y = im.TypeOf(node.inputs(1));
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s =
            CheckFloatInput(node, im.TypeOf(node.inputs(i)), node.inputs(i));
        !s.ok()) {
      return s;
    }
  }
  const ir::DType out_dtype = node.outputs(0).type().dtype();
  if (absl::Status s = CheckFloat(node, out_dtype); !s.ok()) return s;
  if (absl::Status s = CheckOutputShape(node, 0, {}); !s.ok()) return s;
  // The broadcast shape of x - y.
  const Shape xs = ShapeOf(x), ys = ShapeOf(y);
  const int rank = std::max(xs.size(), ys.size());
  Shape shape(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int xi = i - (rank - static_cast<int>(xs.size()));
    const int yi = i - (rank - static_cast<int>(ys.size()));
    const int64_t a = xi >= 0 ? xs[xi] : 1, c = yi >= 0 ? ys[yi] : 1;
    if (a != c && a != 1 && c != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op dist: the shapes of %%%s %s and %%%s %s do not broadcast",
          node.inputs(0), ir::TypeToText(x), node.inputs(1),
          ir::TypeToText(y)));
    }
    shape[i] = a == 1 ? c : a;
  }
  auto broadcast_map = [&](const Shape& s) {
    std::vector<mlir::AffineExpr> exprs;
    for (size_t i = 0; i < s.size(); ++i) {
      const int d = i + rank - s.size();
      exprs.push_back(s[i] == shape[d]
                          ? mlir::getAffineDimExpr(d, im.context())
                          : mlir::getAffineConstantExpr(0, im.context()));
    }
    return AffineMap::get(rank, 0, exprs, im.context());
  };
  const double p = FloatAttr(node, "p", 2.0);
  const std::vector<bool> all(rank, true);
  if (absl::Status s = CheckIdentity(node, shape, all, p); !s.ok()) return s;
  const ir::DType xd = x.dtype(), yd = y.dtype();
  im.Define(
      node.outputs(0),
      EmitNorm(
          im, node, {im.ValueOf(node.inputs(0)), im.ValueOf(node.inputs(1))},
          {xd, yd}, {broadcast_map(xs), broadcast_map(ys)}, shape, all,
          /*keepdim=*/false, p,
          [&](OpBuilder& b, Location l, ValueRange v) -> Value {
            Value d = b.create<mlir::arith::SubFOp>(l, v[0], v[1]);
            if (out_dtype == ir::FLOAT32) return d;
            return im.ToCompute(b, im.FromCompute(b, d, out_dtype), out_dtype);
          }));
  return absl::OkStatus();
}

}  // namespace

void RegisterVectorNormOps(OpConverterTable& table) {
  table["linalg_vector_norm"] = &ConvertLinalgVectorNorm;
  table["dist"] = &ConvertDist;
}

}  // namespace rbln::compiler

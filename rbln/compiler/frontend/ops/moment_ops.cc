// Moments: var, var_mean, std, std_mean.
//
// Two passes in f64, as accurate as ATen's Welford with a double
// accumulator: the sum (for the mean), then the sum of squared deviations
// from that mean; var = m2 / max(N - correction, 0), so N <= correction gives
// inf (or NaN when m2 is 0) and an empty reduction NaN, as in PyTorch. std
// is the f64 square root of that, taken before rounding (as ATen does: the
// decomposition sqrt(var) would round var first, which overflows float32
// for values above 1.8e19 whose std is finite). Each output is rounded once
// to its dtype.
//
// IR conventions (output dtypes and shapes come from the node):
//   var(x) -> var, var_mean(x) -> (var, mean), std(x) -> std,
//   std_mean(x) -> (std, mean)
//     "dim"         reduced dims, as the reductions (absent: all);
//     "correction"  int or float, default 1 (Bessel's correction);
//     "keepdim"     bool, default false.
#include <cstdint>
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

namespace rbln::compiler {
namespace {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;

Value F64Const(OpBuilder& b, Location l, double v) {
  return b.create<mlir::arith::ConstantOp>(l, b.getF64FloatAttr(v));
}

absl::Status ConvertVar(GraphImporter& im, const ir::Node& node) {
  const bool with_mean = node.op() == "var_mean" || node.op() == "std_mean";
  const bool root = node.op() == "std" || node.op() == "std_mean";
  if (absl::Status s = CheckArity(node, 1, with_mean ? 2 : 1); !s.ok()) {
    return s;
  }
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::DType dtype = in.dtype();
  if (!IsFloat(dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: std and var only support floating point and complex dtypes, "
        "got %s (input %%%s)",
        node.op(), ScalarTypeName(dtype), node.inputs(0)));
  }
  const Shape shape = ShapeOf(in);
  const int rank = shape.size();
  absl::StatusOr<std::vector<bool>> dims = ReducedDims(node, rank);
  if (!dims.ok()) return dims.status();
  const std::vector<bool>& reduced = *dims;
  const bool keepdim = BoolAttr(node, "keepdim", false);
  const Shape out_shape = ReducedShape(shape, reduced, keepdim);
  for (int i = 0; i < node.outputs_size(); ++i) {
    if (absl::Status s = CheckOutputShape(node, i, out_shape); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckFloat(node, node.outputs(i).type().dtype());
        !s.ok()) {
      return s;
    }
  }
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) count *= shape[d];
  }
  const double correction = FloatAttr(node, "correction", 1.0);
  const double divisor = count > correction ? count - correction : 0.0;

  OpBuilder& builder = im.builder();
  const mlir::TypedAttr zero = builder.getF64FloatAttr(0.0);
  const AffineMap id = Identity(im, rank);
  const AffineMap to_acc = ReducedMap(im, reduced, keepdim);
  Value x = im.ValueOf(node.inputs(0));
  auto widen = [&](OpBuilder& b, Location l, Value v) -> Value {
    return b.create<mlir::arith::ExtFOp>(l, b.getF64Type(),
                                         im.ToCompute(b, v, dtype));
  };
  Value sum = Generic(
      im, x, Filled(im, out_shape, zero), {id, to_acc}, Iterators(reduced),
      [&](OpBuilder& b, Location l, ValueRange args) {
        return llvm::SmallVector<Value>{
            b.create<mlir::arith::AddFOp>(l, args[1], widen(b, l, args[0]))};
      })[0];
  auto mean = [&](OpBuilder& b, Location l, Value s) -> Value {
    return b.create<mlir::arith::DivFOp>(
        l, s, F64Const(b, l, static_cast<double>(count)));
  };
  Value m2 = Generic(im, {x, sum}, Filled(im, out_shape, zero),
                     {id, to_acc, to_acc}, Iterators(reduced),
                     [&](OpBuilder& b, Location l, ValueRange args) {
                       Value d = b.create<mlir::arith::SubFOp>(
                           l, widen(b, l, args[0]), mean(b, l, args[1]));
                       Value d2 = b.create<mlir::arith::MulFOp>(l, d, d);
                       return llvm::SmallVector<Value>{
                           b.create<mlir::arith::AddFOp>(l, args[2], d2)};
                     })[0];
  const int out_rank = out_shape.size();
  const AffineMap out_id = Identity(im, out_rank);
  const std::vector<IteratorType> parallel(out_rank, IteratorType::parallel);
  // f64 -> f32 -> the output dtype (half types round from f32 as ATen's
  // float opmath result does).
  auto narrow = [&](OpBuilder& b, Location l, Value v, ir::DType t) -> Value {
    Value f = b.create<mlir::arith::TruncFOp>(l, b.getF32Type(), v);
    return im.FromCompute(b, f, t);
  };
  const ir::DType var_dtype = node.outputs(0).type().dtype();
  Value var = Generic(
      im, m2, Empty(im, out_shape, im.StorageType(var_dtype)), {out_id, out_id},
      parallel, [&](OpBuilder& b, Location l, ValueRange args) {
        Value v =
            b.create<mlir::arith::DivFOp>(l, args[0], F64Const(b, l, divisor));
        if (root) v = b.create<mlir::math::SqrtOp>(l, v);
        return llvm::SmallVector<Value>{narrow(b, l, v, var_dtype)};
      })[0];
  im.Define(node.outputs(0), var);
  if (with_mean) {
    const ir::DType mean_dtype = node.outputs(1).type().dtype();
    Value m = Generic(im, sum, Empty(im, out_shape, im.StorageType(mean_dtype)),
                      {out_id, out_id}, parallel,
                      [&](OpBuilder& b, Location l, ValueRange args) {
                        return llvm::SmallVector<Value>{
                            narrow(b, l, mean(b, l, args[0]), mean_dtype)};
                      })[0];
    im.Define(node.outputs(1), m);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterMomentOps(OpConverterTable& table) {
  table["var"] = &ConvertVar;
  table["var_mean"] = &ConvertVar;
  table["std"] = &ConvertVar;
  table["std_mean"] = &ConvertVar;
}

}  // namespace rbln::compiler

// Reductions, softmax and normalizations.
//
// Every reduction is its own linalg.generic with reduction iterators writing
// into an accumulator set by linalg.fill; element-wise fusion only fuses
// all-parallel producers, so it never merges across a reduction (SPEC P3).
// Accumulators are in the compute type (f32 for half types); a final
// element-wise generic rounds once to the storage type.
//
// IR conventions (output dtypes and shapes come from the node):
//   sum, mean, amax, amin, max, min, argmax, argmin, prod, any, all
//   (one input)
//     "dim"     int (one dim) or string of comma-separated ints ("0,-1");
//               absent or "" reduces every dim. Negative dims wrap.
//     "keepdim" bool, default false.
//     max/min with two outputs return (values, indices) like max(x, dim);
//     with one output they are amax/amin. argmax/argmin output INT64 and
//     index the flattened reduced dims (the whole tensor without "dim").
//     prod multiplies in the compute type in index order (f32 for half
//     types, opmath as CUDA's prod; int64 for integers and bool) and rounds
//     once; any/all test x != 0 (NaN counts as true) into a bool output.
//   softmax, log_softmax (x)           "dim": one dim, required.
//   _softmax, _log_softmax: the same (ATen's inner names; "half_to_float"
//     is implied by the output dtype).
//   layer_norm(x[, weight[, bias]])    "normalized_shape" ("2,4", ATen's
//     argument) or "normalized_ndim" int (default: the weight's rank),
//     "eps" (default 1e-5); with two inputs the second is the bias (no
//     weight) when bool "has_weight" is false or "has_bias" is true.
//   native_layer_norm: the same with outputs (y, mean, rstd); mean and rstd
//     have x's shape with the normalized dims 1.
//   rms_norm(x[, weight])              "normalized_shape" or
//     "normalized_ndim" (default: the weight's rank, else 1), "eps"
//     (default FLT_EPSILON, as PyTorch's opmath epsilon).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "llvm/ADT/APInt.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/reduction_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::arith::CmpIPredicate;
using ::mlir::utils::IteratorType;

// The trailing `ndim` of `rank` dims reduced.
std::vector<bool> TrailingDims(int rank, int ndim) {
  std::vector<bool> reduced(rank, false);
  for (int d = rank - ndim; d < rank; ++d) reduced[d] = true;
  return reduced;
}

// Reads `ndim` trailing dims of the loops (a weight over the normalized
// shape).
AffineMap TrailingMap(GraphImporter& im, int rank, int ndim) {
  std::vector<mlir::AffineExpr> exprs;
  for (int d = rank - ndim; d < rank; ++d) {
    exprs.push_back(mlir::getAffineDimExpr(d, im.context()));
  }
  return AffineMap::get(rank, 0, exprs, im.context());
}

// --- sum, mean, amax, amin, prod, any, all. ----------------------------------

enum class ReduceKind { kSum, kMean, kMax, kMin, kProd, kAny, kAll };

absl::Status ConvertReduce(GraphImporter& im, const ir::Node& node,
                           ReduceKind kind) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::DType out_dtype = node.outputs(0).type().dtype();
  const Shape in_shape = ShapeOf(in);
  absl::StatusOr<std::vector<bool>> reduced =
      ReducedDims(node, in.shape_size());
  if (!reduced.ok()) return reduced.status();
  const bool keepdim = BoolAttr(node, "keepdim", false);
  if (absl::Status s =
          CheckOutputShape(node, 0, ReducedShape(in_shape, *reduced, keepdim));
      !s.ok()) {
    return s;
  }
  const bool is_max_min = kind == ReduceKind::kMax || kind == ReduceKind::kMin;
  if (is_max_min) {
    if (out_dtype != in.dtype()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: output dtype must be the input's", node.op()));
    }
    if (absl::Status s = CheckNonEmptyReduction(node, in_shape, *reduced);
        !s.ok()) {
      return s;
    }
  }
  // mean(int_tensor) raises in PyTorch; mean(int_tensor, dtype=float32) is
  // a float output here and fine.
  if (kind == ReduceKind::kMean && !IsFloat(out_dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "mean(): could not infer output dtype. Input dtype must be either a "
        "floating point or complex dtype. Got: %s (op %s, output %%%s)",
        ScalarTypeName(in.dtype()), node.op(), node.outputs(0).name()));
  }
  const bool is_any_all = kind == ReduceKind::kAny || kind == ReduceKind::kAll;
  // any/all of uint8 give uint8 0/1 in PyTorch (the same bytes as bool's).
  const bool byte_result = out_dtype == ir::UINT8 && in.dtype() == ir::UINT8;
  if (is_any_all && out_dtype != ir::BOOL && !byte_result) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: output %%%s must be bool (uint8 for a uint8 input)", node.op(),
        node.outputs(0).name()));
  }
  // Bool max/min (any/all of 0/1 bytes) reduce like integers.
  if (out_dtype == ir::BOOL && !is_max_min && !is_any_all) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op %s: bool output is not supported", node.op()));
  }

  Value acc;
  if (is_any_all) {
    // x != 0 (NaN included) or'ed (any) or and'ed (all) into a 0/1 byte.
    const bool any = kind == ReduceKind::kAny;
    acc = Reduce(im, im.ValueOf(node.inputs(0)), in.dtype(), in.dtype(),
                 *reduced, keepdim, im.builder().getI8IntegerAttr(any ? 0 : 1),
                 [&](OpBuilder& b, Location l, Value x, Value a) -> Value {
                   Value nonzero;
                   if (x.getType().isa<mlir::FloatType>()) {
                     nonzero = b.create<mlir::arith::CmpFOp>(
                         l, CmpFPredicate::UNE, x,
                         b.create<mlir::arith::ConstantOp>(
                             l, b.getFloatAttr(x.getType(), 0.0)));
                   } else {
                     nonzero = b.create<mlir::arith::CmpIOp>(
                         l, CmpIPredicate::ne, x,
                         b.create<mlir::arith::ConstantOp>(
                             l, b.getIntegerAttr(x.getType(), 0)));
                   }
                   Value bit = b.create<mlir::arith::ExtUIOp>(l, b.getI8Type(),
                                                              nonzero);
                   if (any) return b.create<mlir::arith::OrIOp>(l, a, bit);
                   return b.create<mlir::arith::AndIOp>(l, a, bit);
                 });
  } else if (kind == ReduceKind::kProd) {
    // In f32 for half types, rounded once (issue 28: opmath, as CUDA's prod
    // and acc_type; ATen's CPU kernel multiplies half values in half, in a
    // vectorized order, so it loses up to a few percent over 64 factors).
    mlir::TypedAttr one =
        IsFloat(out_dtype)
            ? F32(im, 1.0)
            : im.builder().getIntegerAttr(im.ComputeType(out_dtype), 1);
    acc = Reduce(
        im, im.ValueOf(node.inputs(0)), in.dtype(), out_dtype, *reduced,
        keepdim, one, [&](OpBuilder& b, Location l, Value x, Value a) -> Value {
          return Mul(b, l, a, x);
        });
  } else if (is_max_min) {
    const bool max = kind == ReduceKind::kMax;
    acc = Reduce(im, im.ValueOf(node.inputs(0)), in.dtype(), out_dtype,
                 *reduced, keepdim, MaxOrMinInit(im, out_dtype, max),
                 [&](OpBuilder& b, Location l, Value x, Value a) {
                   return MaxOrMin(b, l, x, a, max);
                 });
  } else {
    acc = Reduce(im, im.ValueOf(node.inputs(0)), in.dtype(), out_dtype,
                 *reduced, keepdim, Zero(im, out_dtype), Add);
  }
  std::function<Value(OpBuilder&, Location, Value)> fn;
  if (kind == ReduceKind::kMean) {
    // PyTorch: sum in f32, then divide by the element count, round once.
    int64_t count = 1;
    for (size_t d = 0; d < in_shape.size(); ++d) {
      if ((*reduced)[d]) count *= in_shape[d];
    }
    fn = [count](OpBuilder& b, Location l, Value sum) -> Value {
      return b.create<mlir::arith::DivFOp>(
          l, sum, F32Const(b, static_cast<double>(count)));
    };
  }
  im.Define(node.outputs(0), Finalize(im, node, 0, acc, fn));
  return absl::OkStatus();
}

// --- argmax, argmin, max/min with indices. ---------------------------------

// Lanes of the partial results an innermost-dim arg reduction keeps (a
// vector of f32): element i of a row goes to lane i % kArgLanes.
constexpr int64_t kArgLanes = 16;
// Rows shorter than this reduce in one pass.
constexpr int64_t kMinArgLaneElements = 256;

// Whether x (index `index`) beats the accumulated (acc, acc_index) of an
// arg reduction: the first index of the max (min); NaN counts as the max
// (min), as in PyTorch. Ties go to the lower index explicitly, so the
// result does not depend on the order the elements are combined in.
Value ArgBeats(OpBuilder& b, Location l, ir::DType dtype, bool max, Value x,
               Value index, Value acc, Value acc_index) {
  Value earlier = b.create<mlir::arith::CmpIOp>(l, CmpIPredicate::slt, index,
                                                acc_index);
  if (!IsFloat(dtype)) {
    Value gt = b.create<mlir::arith::CmpIOp>(
        l, max ? CmpIPredicate::sgt : CmpIPredicate::slt, x, acc);
    Value eq = b.create<mlir::arith::CmpIOp>(l, CmpIPredicate::eq, x, acc);
    return b.create<mlir::arith::OrIOp>(
        l, gt, b.create<mlir::arith::AndIOp>(l, eq, earlier));
  }
  Value gt = b.create<mlir::arith::CmpFOp>(
      l, max ? CmpFPredicate::OGT : CmpFPredicate::OLT, x, acc);
  Value eq = b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::OEQ, x, acc);
  Value x_nan = IsNan(b, l, x), acc_nan = IsNan(b, l, acc);
  Value t = b.create<mlir::arith::ConstantIntOp>(l, 1, 1);
  // NaN beats numbers; among NaNs the first wins.
  Value nan_wins = b.create<mlir::arith::AndIOp>(
      l, x_nan,
      b.create<mlir::arith::OrIOp>(
          l, b.create<mlir::arith::XOrIOp>(l, acc_nan, t), earlier));
  Value number_wins = b.create<mlir::arith::OrIOp>(
      l, gt, b.create<mlir::arith::AndIOp>(l, eq, earlier));
  return b.create<mlir::arith::OrIOp>(l, nan_wins, number_wins);
}

// The (value, index) a combining step yields.
llvm::SmallVector<Value> ArgCombine(OpBuilder& b, Location l, ir::DType dtype,
                                    bool max, Value x, Value index, Value acc,
                                    Value acc_index) {
  Value better = ArgBeats(b, l, dtype, max, x, index, acc, acc_index);
  return {b.create<mlir::arith::SelectOp>(l, better, x, acc),
          b.create<mlir::arith::SelectOp>(l, better, index, acc_index)};
}

// An arg reduction over the innermost dim only, of a row long enough and a
// multiple of kArgLanes: the row's element i goes to lane i % kArgLanes
// of a [rows..., kArgLanes] partial result -- the lanes are the innermost
// loop, independent, so the loop vectorizes instead of carrying one
// (value, index) pair through a chain of compares -- and a second generic
// reduces the lanes. ArgBeats does not depend on the order, so the result
// is the one-pass one.
bool ArgLanesApply(const Shape& in_shape, const std::vector<bool>& reduced) {
  const int rank = in_shape.size();
  if (rank == 0 || !reduced[rank - 1]) return false;
  for (int d = 0; d + 1 < rank; ++d) {
    if (reduced[d]) return false;
  }
  const int64_t n = in_shape[rank - 1];
  return n >= kMinArgLaneElements && n % kArgLanes == 0;
}

// ConvertArgReduce's (values, indices) by ArgLanesApply's two generics.
mlir::ResultRange ArgReduceByLanes(GraphImporter& im, Value input,
                                   ir::DType dtype, bool max,
                                   const Shape& in_shape,
                                   const std::vector<bool>& reduced,
                                   bool keepdim) {
  OpBuilder& builder = im.builder();
  const int rank = in_shape.size();
  const int64_t n = in_shape[rank - 1];
  Shape lanes_shape(in_shape.begin(), in_shape.end() - 1);
  lanes_shape.push_back(kArgLanes);
  // Loops (rows..., j, lane): element j * kArgLanes + lane of the row.
  Value split = nn::ExpandDim(im, input, rank - 1, {n / kArgLanes, kArgLanes});
  std::vector<bool> split_reduced(rank + 1, false);
  split_reduced[rank - 1] = true;
  std::vector<int> lane_dims;
  for (int d = 0; d <= rank; ++d) {
    if (d != rank - 1) lane_dims.push_back(d);
  }
  AffineMap lane_map = nn::DimsMap(im, rank + 1, lane_dims);
  Value lane_values = Filled(im, lanes_shape, MaxOrMinInit(im, dtype, max));
  Value lane_indices =
      Filled(im, lanes_shape, builder.getI64IntegerAttr(INT64_MAX));
  mlir::ResultRange lanes = Generic(
      im, split, {lane_values, lane_indices},
      {Identity(im, rank + 1), lane_map, lane_map}, Iterators(split_reduced),
      [&](OpBuilder& b, Location l, ValueRange args) {
        auto index_of = [&](int d) {
          return b.create<mlir::arith::IndexCastOp>(
              l, b.getI64Type(), b.create<mlir::linalg::IndexOp>(l, d));
        };
        Value index = b.create<mlir::arith::AddIOp>(
            l,
            b.create<mlir::arith::MulIOp>(
                l, index_of(rank - 1),
                b.create<mlir::arith::ConstantIntOp>(l, kArgLanes, 64)),
            index_of(rank));
        return ArgCombine(b, l, dtype, max, im.ToCompute(b, args[0], dtype),
                          index, args[1], args[2]);
      });
  const Shape out_shape = ReducedShape(in_shape, reduced, keepdim);
  AffineMap out_map = ReducedMap(im, reduced, keepdim);
  Value values = Filled(im, out_shape, MaxOrMinInit(im, dtype, max));
  Value indices = Filled(im, out_shape, builder.getI64IntegerAttr(INT64_MAX));
  return Generic(im, {lanes[0], lanes[1]}, {values, indices},
                 {Identity(im, rank), Identity(im, rank), out_map, out_map},
                 Iterators(reduced),
                 [&](OpBuilder& b, Location l, ValueRange args) {
                   return ArgCombine(b, l, dtype, max, args[0], args[1],
                                     args[2], args[3]);
                 });
}

// The first index of the max (min); NaN counts as the max (min), as in
// PyTorch (ArgBeats).
absl::Status ConvertArgReduce(GraphImporter& im, const ir::Node& node, bool max,
                              bool with_values) {
  if (absl::Status s = CheckArity(node, 1, with_values ? 2 : 1); !s.ok()) {
    return s;
  }
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const Shape in_shape = ShapeOf(in);
  const int rank = in_shape.size();
  if (in.dtype() == ir::BOOL) {
    return absl::UnimplementedError(absl::StrFormat(
        "The following operators are not implemented: ['%s' on bool]",
        node.op()));
  }
  absl::StatusOr<std::vector<bool>> reduced = ReducedDims(node, rank);
  if (!reduced.ok()) return reduced.status();
  const bool keepdim = BoolAttr(node, "keepdim", false);
  const Shape out_shape = ReducedShape(in_shape, *reduced, keepdim);
  const int index_output = with_values ? 1 : 0;
  for (int i = 0; i < node.outputs_size(); ++i) {
    if (absl::Status s = CheckOutputShape(node, i, out_shape); !s.ok()) {
      return s;
    }
  }
  if (node.outputs(index_output).type().dtype() != ir::INT64 ||
      (with_values && node.outputs(0).type().dtype() != in.dtype())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: indices must be int64 (and values of the input's dtype)",
        node.op()));
  }
  if (absl::Status s = CheckNonEmptyReduction(node, in_shape, *reduced);
      !s.ok()) {
    return s;
  }

  const ir::DType dtype = in.dtype();
  auto define = [&](mlir::ResultRange results) {
    if (with_values) {
      im.Define(node.outputs(0), Finalize(im, node, 0, results[0]));
    }
    im.Define(node.outputs(index_output), results[1]);
    return absl::OkStatus();
  };
  if (ArgLanesApply(in_shape, *reduced)) {
    return define(ArgReduceByLanes(im, im.ValueOf(node.inputs(0)), dtype, max,
                                   in_shape, *reduced, keepdim));
  }
  OpBuilder& builder = im.builder();
  Value values = Filled(im, out_shape, MaxOrMinInit(im, dtype, max));
  // Any real index wins over the initial one.
  Value indices = Filled(im, out_shape, builder.getI64IntegerAttr(INT64_MAX));
  AffineMap out_map = ReducedMap(im, *reduced, keepdim);
  return define(Generic(
      im, im.ValueOf(node.inputs(0)), {values, indices},
      {Identity(im, rank), out_map, out_map}, Iterators(*reduced),
      [&](OpBuilder& b, Location l, ValueRange args) {
        // Row-major index over the reduced dims.
        Value index = b.create<mlir::arith::ConstantIntOp>(l, 0, 64);
        for (int d = 0; d < rank; ++d) {
          if (!(*reduced)[d]) continue;
          Value i = b.create<mlir::arith::IndexCastOp>(
              l, b.getI64Type(), b.create<mlir::linalg::IndexOp>(l, d));
          Value extent =
              b.create<mlir::arith::ConstantIntOp>(l, in_shape[d], 64);
          index = b.create<mlir::arith::AddIOp>(
              l, b.create<mlir::arith::MulIOp>(l, index, extent), i);
        }
        return ArgCombine(b, l, dtype, max, im.ToCompute(b, args[0], dtype),
                          index, args[1], args[2]);
      }));
}

// max/min: amax/amin with one output, (values, indices) with two.
template <bool kMax>
absl::Status ConvertMaxMin(GraphImporter& im, const ir::Node& node) {
  if (node.outputs_size() == 2) return ConvertArgReduce(im, node, kMax, true);
  return ConvertReduce(im, node, kMax ? ReduceKind::kMax : ReduceKind::kMin);
}

template <ReduceKind kKind>
absl::Status ConvertReduceOp(GraphImporter& im, const ir::Node& node) {
  return ConvertReduce(im, node, kKind);
}

template <bool kMax>
absl::Status ConvertArgOp(GraphImporter& im, const ir::Node& node) {
  return ConvertArgReduce(im, node, kMax, false);
}

// --- softmax, log_softmax. -------------------------------------------------

// max, then exp(x - max), its sum, and the quotient, as separate generics:
// exp(x - max) has two consumers, so fusion keeps it materialized instead of
// recomputing it (SPEC P3). A row of -inf gives NaN (-inf - -inf), as in
// PyTorch.
absl::Status ConvertSoftmax(GraphImporter& im, const ir::Node& node, bool log) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::DType out_dtype = node.outputs(0).type().dtype();
  if (absl::Status s = CheckFloat(node, in.dtype()); !s.ok()) return s;
  if (absl::Status s = CheckFloat(node, out_dtype); !s.ok()) return s;
  const Shape shape = ShapeOf(in);
  if (absl::Status s = CheckOutputShape(node, 0, shape); !s.ok()) return s;
  if (!node.attrs().contains("dim")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op %s needs attr dim", node.op()));
  }
  const int rank = shape.size();
  absl::StatusOr<std::vector<bool>> dims = ReducedDims(node, rank);
  if (!dims.ok()) return dims.status();
  const std::vector<bool>& reduced = *dims;
  if (rank > 0 && std::count(reduced.begin(), reduced.end(), true) != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op %s takes exactly one dim", node.op()));
  }

  const ir::DType dtype = in.dtype();
  Value x = im.ValueOf(node.inputs(0));
  Value row_max =
      Reduce(im, x, dtype, ir::FLOAT32, reduced, false, F32(im, -INFINITY),
             [](OpBuilder& b, Location l, Value v, Value a) {
               return MaxOrMin(b, l, v, a, /*max=*/true);
             });
  const AffineMap id = Identity(im, rank);
  const AffineMap row = ReducedMap(im, reduced, false);
  const std::vector<IteratorType> parallel(rank, IteratorType::parallel);
  const Type f32 = im.builder().getF32Type();
  Value out_init = Empty(im, shape, im.StorageType(out_dtype));
  auto shifted = [&](OpBuilder& b, Location l, ValueRange args) -> Value {
    return b.create<mlir::arith::SubFOp>(l, im.ToCompute(b, args[0], dtype),
                                         args[1]);
  };
  Value result;
  if (!log) {
    Value e =
        Generic(im, {x, row_max}, Empty(im, shape, f32), {id, row, id},
                parallel, [&](OpBuilder& b, Location l, ValueRange args) {
                  return llvm::SmallVector<Value>{
                      b.create<mlir::math::ExpOp>(l, shifted(b, l, args))};
                })[0];
    Value sum = Reduce(im, e, ir::FLOAT32, ir::FLOAT32, reduced, false,
                       F32(im, 0.0), Add);
    result = Generic(
        im, {e, sum}, out_init, {id, row, id}, parallel,
        [&](OpBuilder& b, Location l, ValueRange args) {
          Value q = b.create<mlir::arith::DivFOp>(l, args[0], args[1]);
          return llvm::SmallVector<Value>{im.FromCompute(b, q, out_dtype)};
        })[0];
  } else {
    // log_softmax = (x - max) - log(sum(exp(x - max))), as PyTorch's kernel.
    Value sum =
        Generic(im, {x, row_max},
                Filled(im, ReducedShape(shape, reduced, false), F32(im, 0.0)),
                {id, row, row}, Iterators(reduced),
                [&](OpBuilder& b, Location l, ValueRange args) {
                  Value e = b.create<mlir::math::ExpOp>(l, shifted(b, l, args));
                  return llvm::SmallVector<Value>{
                      b.create<mlir::arith::AddFOp>(l, args[2], e)};
                })[0];
    result = Generic(
        im, {x, row_max, sum}, out_init, {id, row, row, id}, parallel,
        [&](OpBuilder& b, Location l, ValueRange args) {
          Value y = b.create<mlir::arith::SubFOp>(
              l, shifted(b, l, args), b.create<mlir::math::LogOp>(l, args[2]));
          return llvm::SmallVector<Value>{im.FromCompute(b, y, out_dtype)};
        })[0];
  }
  im.Define(node.outputs(0), result);
  return absl::OkStatus();
}

template <bool kLog>
absl::Status ConvertSoftmaxOp(GraphImporter& im, const ir::Node& node) {
  return ConvertSoftmax(im, node, kLog);
}

// --- layer_norm, rms_norm. ---------------------------------------------------

// Checks that `affine` (a weight or bias) has the normalized shape.
absl::Status CheckNormalizedShape(const ir::Node& node, const Shape& x,
                                  int ndim, const ir::TensorType& affine) {
  const Shape want(x.end() - ndim, x.end());
  if (ShapeOf(affine) != want || !IsFloat(affine.dtype())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: weight and bias must be float tensors of the normalized "
        "shape [%s], got %s",
        node.op(), absl::StrJoin(want, ","), ir::TypeToText(affine)));
  }
  return absl::OkStatus();
}

// How many trailing dims a norm normalizes: attr "normalized_shape" (ATen's
// argument, "2,4"; must equal the input's trailing dims), else
// "normalized_ndim", else `dflt`.
absl::StatusOr<int64_t> NormalizedNdim(const ir::Node& node, const Shape& x,
                                       int64_t dflt) {
  const int rank = x.size();
  int64_t ndim = IntAttr(node, "normalized_ndim", dflt);
  if (HasAttr(node, "normalized_shape")) {
    absl::StatusOr<std::vector<int64_t>> ns =
        IntListAttr(node, "normalized_shape");
    if (!ns.ok()) return ns.status();
    ndim = ns->size();
    if (ndim > rank || !std::equal(ns->begin(), ns->end(), x.end() - ndim)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Given normalized_shape=[%s], expected input with shape "
          "[*, %s], but got input of size [%s]",
          node.op(), absl::StrJoin(*ns, ", "), absl::StrJoin(*ns, ", "),
          absl::StrJoin(x, ", ")));
    }
  }
  if (ndim < 0 || ndim > rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: normalized_ndim %d is not in [0, %d]", node.op(), ndim, rank));
  }
  return ndim;
}

// Two-pass statistics in f32 (mean, then the mean of squared deviations),
// the biased variance PyTorch uses; y = (x - mean) / sqrt(var + eps) * w + b.
absl::Status ConvertLayerNorm(GraphImporter& im, const ir::Node& node) {
  // native_layer_norm also returns mean and rstd (the input's shape with the
  // normalized dims kept as 1).
  const int num_outputs = node.op() == "native_layer_norm" ? 3 : 1;
  if (node.inputs_size() < 1 || node.inputs_size() > 3 ||
      node.outputs_size() != num_outputs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes 1 to 3 inputs (x, weight, bias) and %d output(s)",
        node.op(), num_outputs));
  }
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::DType dtype = in.dtype(),
                  out_dtype = node.outputs(0).type().dtype();
  if (absl::Status s = CheckFloat(node, dtype); !s.ok()) return s;
  if (absl::Status s = CheckFloat(node, out_dtype); !s.ok()) return s;
  const Shape shape = ShapeOf(in);
  const int rank = shape.size();
  if (absl::Status s = CheckOutputShape(node, 0, shape); !s.ok()) return s;
  // One optional input is the weight unless "has_weight" is false (an
  // absent optional tensor, as fx_to_ir names it) or "has_bias" is true.
  const bool second_is_bias = !BoolAttr(node, "has_weight", true) ||
                              BoolAttr(node, "has_bias", false);
  const bool has_bias =
      node.inputs_size() == 3 || (node.inputs_size() == 2 && second_is_bias);
  const bool has_weight =
      node.inputs_size() == 3 || (node.inputs_size() == 2 && !has_bias);
  absl::StatusOr<int64_t> normalized = NormalizedNdim(
      node, shape,
      node.inputs_size() > 1 ? im.TypeOf(node.inputs(1)).shape_size() : -1);
  if (!normalized.ok()) return normalized.status();
  const int64_t ndim = *normalized;
  for (int i = 1; i < node.inputs_size(); ++i) {
    if (absl::Status s =
            CheckNormalizedShape(node, shape, ndim, im.TypeOf(node.inputs(i)));
        !s.ok()) {
      return s;
    }
  }
  Shape stats_shape = shape;
  for (int d = rank - ndim; d < rank; ++d) stats_shape[d] = 1;
  for (int i = 1; i < num_outputs; ++i) {
    if (absl::Status s = CheckOutputShape(node, i, stats_shape); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckFloat(node, node.outputs(i).type().dtype());
        !s.ok()) {
      return s;
    }
  }
  const double eps = FloatAttr(node, "eps", 1e-5);
  int64_t count = 1;
  for (int d = rank - ndim; d < rank; ++d) count *= shape[d];

  const std::vector<bool> reduced = TrailingDims(rank, ndim);
  Value x = im.ValueOf(node.inputs(0));
  Value sum =
      Reduce(im, x, dtype, ir::FLOAT32, reduced, false, F32(im, 0.0), Add);
  const AffineMap id = Identity(im, rank);
  const AffineMap row = ReducedMap(im, reduced, false);
  auto mean = [count](OpBuilder& b, Location l, Value s) -> Value {
    return b.create<mlir::arith::DivFOp>(l, s, F32Const(b, count));
  };
  Value sq_dev =
      Generic(im, {x, sum},
              Filled(im, ReducedShape(shape, reduced, false), F32(im, 0.0)),
              {id, row, row}, Iterators(reduced),
              [&](OpBuilder& b, Location l, ValueRange args) {
                Value d = b.create<mlir::arith::SubFOp>(
                    l, im.ToCompute(b, args[0], dtype), mean(b, l, args[1]));
                Value d2 = b.create<mlir::arith::MulFOp>(l, d, d);
                return llvm::SmallVector<Value>{
                    b.create<mlir::arith::AddFOp>(l, args[2], d2)};
              })[0];

  std::vector<Value> inputs = {x, sum, sq_dev};
  std::vector<AffineMap> maps = {id, row, row};
  std::vector<ir::DType> affine_dtypes;
  for (int i = 1; i < node.inputs_size(); ++i) {
    inputs.push_back(im.ValueOf(node.inputs(i)));
    maps.push_back(TrailingMap(im, rank, ndim));
    affine_dtypes.push_back(im.TypeOf(node.inputs(i)).dtype());
  }
  maps.push_back(id);
  Value y = Generic(
      im, inputs, Empty(im, shape, im.StorageType(out_dtype)), maps,
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value var = mean(b, l, args[2]);
        Value rstd = b.create<mlir::arith::DivFOp>(
            l, F32Const(b, 1.0),
            b.create<mlir::math::SqrtOp>(
                l, b.create<mlir::arith::AddFOp>(l, var, F32Const(b, eps))));
        Value v = b.create<mlir::arith::MulFOp>(
            l,
            b.create<mlir::arith::SubFOp>(l, im.ToCompute(b, args[0], dtype),
                                          mean(b, l, args[1])),
            rstd);
        int next = 3;
        if (has_weight) {
          v = b.create<mlir::arith::MulFOp>(
              l, v, im.ToCompute(b, args[next], affine_dtypes[next - 3]));
          ++next;
        }
        if (has_bias) {
          v = b.create<mlir::arith::AddFOp>(
              l, v, im.ToCompute(b, args[next], affine_dtypes[next - 3]));
        }
        return llvm::SmallVector<Value>{im.FromCompute(b, v, out_dtype)};
      })[0];
  im.Define(node.outputs(0), y);
  if (num_outputs == 3) {
    // mean and rstd, from the same sums (leading dims; trailing ones are 1).
    std::vector<mlir::AffineExpr> lead;
    for (int d = 0; d < rank - ndim; ++d) {
      lead.push_back(mlir::getAffineDimExpr(d, im.context()));
    }
    const AffineMap stats_map = AffineMap::get(rank, 0, lead, im.context());
    for (int i = 1; i < 3; ++i) {
      const ir::DType t = node.outputs(i).type().dtype();
      Value stat = Generic(
          im, {sum, sq_dev}, Empty(im, stats_shape, im.StorageType(t)),
          {stats_map, stats_map, id},
          std::vector<IteratorType>(rank, IteratorType::parallel),
          [&](OpBuilder& b, Location l, ValueRange args) {
            Value v = mean(b, l, args[0]);
            if (i == 2) {
              v = b.create<mlir::arith::DivFOp>(
                  l, F32Const(b, 1.0),
                  b.create<mlir::math::SqrtOp>(
                      l, b.create<mlir::arith::AddFOp>(l, mean(b, l, args[1]),
                                                       F32Const(b, eps))));
            }
            return llvm::SmallVector<Value>{im.FromCompute(b, v, t)};
          })[0];
      im.Define(node.outputs(i), stat);
    }
  }
  return absl::OkStatus();
}

// y = x * rsqrt(mean(x^2) + eps) * weight in f32, rounded once (PyTorch's
// CPU rms_norm rounds once too).
absl::Status ConvertRmsNorm(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() < 1 || node.inputs_size() > 2 ||
      node.outputs_size() != 1) {
    return absl::InvalidArgumentError(
        "op rms_norm takes 1 or 2 inputs (x, weight) and 1 output");
  }
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::DType dtype = in.dtype(),
                  out_dtype = node.outputs(0).type().dtype();
  if (absl::Status s = CheckFloat(node, dtype); !s.ok()) return s;
  if (absl::Status s = CheckFloat(node, out_dtype); !s.ok()) return s;
  const Shape shape = ShapeOf(in);
  const int rank = shape.size();
  if (absl::Status s = CheckOutputShape(node, 0, shape); !s.ok()) return s;
  const bool has_weight = node.inputs_size() == 2;
  absl::StatusOr<int64_t> normalized = NormalizedNdim(
      node, shape, has_weight ? im.TypeOf(node.inputs(1)).shape_size() : 1);
  if (!normalized.ok()) return normalized.status();
  const int64_t ndim = *normalized;
  if (has_weight) {
    if (absl::Status s =
            CheckNormalizedShape(node, shape, ndim, im.TypeOf(node.inputs(1)));
        !s.ok()) {
      return s;
    }
  }
  const double eps = FloatAttr(node, "eps", FLT_EPSILON);
  int64_t count = 1;
  for (int d = rank - ndim; d < rank; ++d) count *= shape[d];

  const std::vector<bool> reduced = TrailingDims(rank, ndim);
  Value x = im.ValueOf(node.inputs(0));
  Value sum_sq =
      Reduce(im, x, dtype, ir::FLOAT32, reduced, false, F32(im, 0.0),
             [](OpBuilder& b, Location l, Value v, Value a) -> Value {
               return b.create<mlir::arith::AddFOp>(
                   l, a, b.create<mlir::arith::MulFOp>(l, v, v));
             });
  const AffineMap id = Identity(im, rank);
  std::vector<Value> inputs = {x, sum_sq};
  std::vector<AffineMap> maps = {id, ReducedMap(im, reduced, false)};
  if (has_weight) {
    inputs.push_back(im.ValueOf(node.inputs(1)));
    maps.push_back(TrailingMap(im, rank, ndim));
  }
  maps.push_back(id);
  const ir::DType w_dtype =
      has_weight ? im.TypeOf(node.inputs(1)).dtype() : dtype;
  Value y = Generic(
      im, inputs, Empty(im, shape, im.StorageType(out_dtype)), maps,
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value ms =
            b.create<mlir::arith::DivFOp>(l, args[1], F32Const(b, count));
        Value rstd = b.create<mlir::arith::DivFOp>(
            l, F32Const(b, 1.0),
            b.create<mlir::math::SqrtOp>(
                l, b.create<mlir::arith::AddFOp>(l, ms, F32Const(b, eps))));
        Value v = b.create<mlir::arith::MulFOp>(
            l, im.ToCompute(b, args[0], dtype), rstd);
        if (has_weight) {
          v = b.create<mlir::arith::MulFOp>(l, v,
                                            im.ToCompute(b, args[2], w_dtype));
        }
        return llvm::SmallVector<Value>{im.FromCompute(b, v, out_dtype)};
      })[0];
  im.Define(node.outputs(0), y);
  return absl::OkStatus();
}

}  // namespace

void RegisterReductionOps(OpConverterTable& table) {
  table["sum"] = &ConvertReduceOp<ReduceKind::kSum>;
  table["mean"] = &ConvertReduceOp<ReduceKind::kMean>;
  table["amax"] = &ConvertReduceOp<ReduceKind::kMax>;
  table["amin"] = &ConvertReduceOp<ReduceKind::kMin>;
  table["prod"] = &ConvertReduceOp<ReduceKind::kProd>;
  table["any"] = &ConvertReduceOp<ReduceKind::kAny>;
  table["all"] = &ConvertReduceOp<ReduceKind::kAll>;
  table["max"] = &ConvertMaxMin<true>;
  table["min"] = &ConvertMaxMin<false>;
  table["argmax"] = &ConvertArgOp<true>;
  table["argmin"] = &ConvertArgOp<false>;
  table["softmax"] = &ConvertSoftmaxOp<false>;
  table["log_softmax"] = &ConvertSoftmaxOp<true>;
  table["layer_norm"] = &ConvertLayerNorm;
  table["native_layer_norm"] = &ConvertLayerNorm;
  // ATen's inner names (what decompositions produce); "half_to_float" is
  // implied by the output dtype.
  table["_softmax"] = &ConvertSoftmaxOp<false>;
  table["_log_softmax"] = &ConvertSoftmaxOp<true>;
  table["rms_norm"] = &ConvertRmsNorm;
}

}  // namespace rbln::compiler

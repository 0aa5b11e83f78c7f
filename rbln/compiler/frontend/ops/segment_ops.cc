// segment_reduce: reductions over data-dependent segments of one axis.
//
// A parallel linalg.generic over the output (segment s of each row of the
// axis) whose body finds the segment's range from the lengths (the sum of
// the lengths before s) or offsets (offsets[s], offsets[s + 1]) and reduces
// it with an scf.for, in order and in the data's dtype as ATen's CPU kernel
// (half types round after every step): max/min propagate NaN, mean divides
// by the length, an empty segment gives the initial value (NaN for mean
// without one). Every data index is range-checked (SPEC P8), so lengths
// that overrun the axis raise instead of reading out of bounds.
//
// Differences from ATen: its !unsafe checks that the lengths are
// non-negative and sum to the axis size are data-dependent; here a negative
// length is an empty segment and a short sum leaves data unread.
//
// IR conventions: segment_reduce(data, lengths or offsets) "reduce" (sum,
// mean, max, min, prod), "axis" (the last dim of lengths/offsets, default
// 0), "initial" (optional), "unsafe" (ignored). Which of lengths and
// offsets was given follows from its size along the axis: the output's
// segment count (lengths) or one more (offsets).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/reduction_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::arith::CmpIPredicate;
using ::mlir::utils::IteratorType;

enum class SegmentReduction { kSum, kMean, kMax, kMin, kProd };

absl::StatusOr<SegmentReduction> ParseReduction(const ir::Node& node) {
  auto it = node.attrs().find("reduce");
  const std::string reduce =
      it == node.attrs().end() ? "" : std::string(it->second.s());
  if (reduce == "sum") return SegmentReduction::kSum;
  if (reduce == "mean") return SegmentReduction::kMean;
  if (reduce == "max") return SegmentReduction::kMax;
  if (reduce == "min") return SegmentReduction::kMin;
  if (reduce == "prod") return SegmentReduction::kProd;
  return absl::InvalidArgumentError(absl::StrFormat(
      "op segment_reduce: reduce argument must be either sum, prod, max, min "
      "or mean, got '%s'",
      reduce));
}

absl::Status ConvertSegmentReduce(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  absl::StatusOr<SegmentReduction> kind = ParseReduction(node);
  if (!kind.ok()) return kind.status();
  const ir::TensorType& data = im.TypeOf(node.inputs(0));
  const ir::TensorType& bounds = im.TypeOf(node.inputs(1));
  const ir::DType dtype = data.dtype();
  if (!IsFloat(dtype) || node.outputs(0).type().dtype() != dtype) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op segment_reduce: \"_segment_reduce_cpu\" not implemented for '%s' "
        "(data must be a floating point tensor, the output of its dtype)",
        ScalarTypeName(dtype)));
  }
  if (bounds.dtype() != ir::INT64 && bounds.dtype() != ir::INT32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op segment_reduce: lengths/offsets %%%s must be int32 or int64",
        node.inputs(1)));
  }
  const Shape data_shape = ShapeOf(data), bounds_shape = ShapeOf(bounds);
  const Shape out_shape = ShapeOf(node.outputs(0).type());
  const int rank = data_shape.size();
  absl::StatusOr<int> axis = WrapDim(node, IntAttr(node, "axis", 0), rank);
  if (!axis.ok()) return axis.status();
  const int a = *axis;
  if (rank == 0 || static_cast<int>(bounds_shape.size()) != a + 1 ||
      !std::equal(bounds_shape.begin(), bounds_shape.end() - 1,
                  data_shape.begin())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op segment_reduce: Expected axis %d to be the last dimension of "
        "lengths/offsets %s, whose leading dims are data %s's",
        a, ir::TypeToText(bounds), ir::TypeToText(data)));
  }
  Shape expected = data_shape;
  const int64_t segments =
      out_shape.size() == data_shape.size() ? out_shape[a] : -1;
  expected[a] = segments;
  if (absl::Status s = CheckOutputShape(node, 0, expected); !s.ok()) return s;
  const bool offsets = bounds_shape.back() == segments + 1;
  if (!offsets && bounds_shape.back() != segments) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op segment_reduce: %%%s has %d entries along the axis for %d "
        "segments (lengths have one per segment, offsets one more)",
        node.inputs(1), bounds_shape.back(), segments));
  }
  const bool has_initial = HasAttr(node, "initial");
  const double initial = FloatAttr(node, "initial", 0);
  const int64_t axis_size = data_shape[a];
  const SegmentReduction reduction = *kind;
  if (NumElements(out_shape) == 0) {
    im.Define(node.outputs(0), Empty(im, out_shape, im.StorageType(dtype)));
    return absl::OkStatus();
  }
  Value data_v = im.ValueOf(node.inputs(0));
  Value bounds_v = im.ValueOf(node.inputs(1));
  const bool half = dtype == ir::FLOAT16 || dtype == ir::BFLOAT16;
  Value result = Generic(
      im, {}, Empty(im, out_shape, im.StorageType(dtype)), {Identity(im, rank)},
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange) {
        std::vector<Value> coords;
        for (int d = 0; d < rank; ++d) {
          coords.push_back(b.create<mlir::linalg::IndexOp>(l, d));
        }
        Value seg = coords[a];
        auto bound_at = [&](OpBuilder& bb, Location bl, Value i) -> Value {
          std::vector<Value> at(coords.begin(), coords.begin() + a);
          at.push_back(i);
          Value v = bb.create<mlir::tensor::ExtractOp>(bl, bounds_v, at);
          return bb.create<mlir::arith::IndexCastOp>(bl, bb.getIndexType(), v);
        };
        Value start, end;
        if (offsets) {
          start = bound_at(b, l, seg);
          end = bound_at(
              b, l, b.create<mlir::arith::AddIOp>(l, seg, IndexConst(b, l, 1)));
        } else {
          auto sum = b.create<mlir::scf::ForOp>(
              l, IndexConst(b, l, 0), seg, IndexConst(b, l, 1),
              ValueRange{IndexConst(b, l, 0)},
              [&](OpBuilder& fb, Location fl, Value i, ValueRange it) {
                fb.create<mlir::scf::YieldOp>(
                    fl, ValueRange{fb.create<mlir::arith::AddIOp>(
                            fl, it[0], bound_at(fb, fl, i))});
              });
          start = sum.getResult(0);
          end = b.create<mlir::arith::AddIOp>(l, start, bound_at(b, l, seg));
        }
        // An empty axis has nothing to read (ATen's checks reject any
        // segment that is not empty).
        if (axis_size == 0) end = start;
        double init = initial;
        if (!has_initial) {
          switch (reduction) {
            case SegmentReduction::kMax:
              init = -INFINITY;
              break;
            case SegmentReduction::kMin:
              init = INFINITY;
              break;
            case SegmentReduction::kProd:
              init = 1;
              break;
            default:
              init = 0;
          }
        }
        // The initial value in the data's dtype.
        Value acc0 =
            im.ToCompute(b, im.FromCompute(b, F32Const(b, init), dtype), dtype);
        auto loop = b.create<mlir::scf::ForOp>(
            l, start, end, IndexConst(b, l, 1), ValueRange{acc0},
            [&](OpBuilder& fb, Location fl, Value j, ValueRange it) {
              std::vector<Value> at = coords;
              at[a] = im.CheckedIndex(
                  fb,
                  fb.create<mlir::arith::IndexCastOp>(fl, fb.getI64Type(), j),
                  std::max<int64_t>(axis_size, 1));
              Value v = im.ToCompute(
                  fb, fb.create<mlir::tensor::ExtractOp>(fl, data_v, at),
                  dtype);
              Value acc = it[0], next;
              switch (reduction) {
                case SegmentReduction::kMax:
                case SegmentReduction::kMin: {
                  // at::_isnan(val) ? val : std::max(acc, val).
                  Value better = fb.create<mlir::arith::CmpFOp>(
                      fl,
                      reduction == SegmentReduction::kMax ? CmpFPredicate::OGT
                                                          : CmpFPredicate::OLT,
                      v, acc);
                  next = fb.create<mlir::arith::SelectOp>(
                      fl,
                      fb.create<mlir::arith::OrIOp>(fl, IsNan(fb, fl, v),
                                                    better),
                      v, acc);
                  break;
                }
                case SegmentReduction::kProd:
                  next = fb.create<mlir::arith::MulFOp>(fl, acc, v);
                  break;
                default:
                  next = fb.create<mlir::arith::AddFOp>(fl, acc, v);
              }
              if (half) {
                next = im.ToCompute(fb, im.FromCompute(fb, next, dtype), dtype);
              }
              fb.create<mlir::scf::YieldOp>(fl, ValueRange{next});
            });
        Value acc = loop.getResult(0);
        if (reduction == SegmentReduction::kMean) {
          Value length = b.create<mlir::arith::SubIOp>(l, end, start);
          Value positive = b.create<mlir::arith::CmpIOp>(
              l, CmpIPredicate::sgt, length, IndexConst(b, l, 0));
          Value count = b.create<mlir::arith::SIToFPOp>(
              l, b.getF32Type(),
              b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(), length));
          Value mean = b.create<mlir::arith::DivFOp>(
              l, acc, im.ToCompute(b, im.FromCompute(b, count, dtype), dtype));
          Value divide = b.create<mlir::arith::AndIOp>(
              l, positive,
              b.create<mlir::arith::XOrIOp>(
                  l, IsNan(b, l, acc),
                  b.create<mlir::arith::ConstantIntOp>(l, 1, 1)));
          acc = b.create<mlir::arith::SelectOp>(l, divide, mean, acc);
          if (!has_initial) {
            Value empty = b.create<mlir::arith::CmpIOp>(
                l, CmpIPredicate::eq, length, IndexConst(b, l, 0));
            acc = b.create<mlir::arith::SelectOp>(l, empty, F32Const(b, NAN),
                                                  acc);
          }
        }
        return llvm::SmallVector<Value>{im.FromCompute(b, acc, dtype)};
      })[0];
  im.Define(node.outputs(0), result);
  return absl::OkStatus();
}

}  // namespace

void RegisterSegmentOps(OpConverterTable& table) {
  table["segment_reduce"] = &ConvertSegmentReduce;
}

}  // namespace rbln::compiler

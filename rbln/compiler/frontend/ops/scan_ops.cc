// Scans: cumsum, cumprod, cummax, cummin, logcumsumexp.
//
// One scf.for over the scanned dim carries an accumulator slice (the input
// without that dim) and the output tensor(s): step k combines slice k of
// the input into the accumulator (a parallel linalg.generic over the other
// dims) and writes the accumulator, rounded, into slice k of the output
// (tensor.insert_slice; one-shot bufferization does both in place). So the
// order of operations is ATen's sequential one and the results match its CPU
// kernels: the accumulator has ATen's acc_type (double for float32, float for
// half types, int64 for integers), cummax/cummin keep the last index of the
// running max/min (ties and NaN move it forward, a NaN stays), logcumsumexp
// combines with ATen's _log_add_exp_helper.
//
// IR conventions (output dtypes come from the node; shapes equal x's):
//   cumsum(x), cumprod(x)   "dim"; "dtype" implied by the output (x is
//                           converted to it first; integers and bool give
//                           int64 by default)
//   cummax(x), cummin(x)    "dim" -> (values, indices int64)
//   logcumsumexp(x)         "dim"; floats only
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "llvm/ADT/APInt.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
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
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::arith::CmpIPredicate;
using ::mlir::utils::IteratorType;

enum class ScanKind { kSum, kProd, kMax, kMin, kLogSumExp };

// Slices of a tensor along `dim`, with that dim dropped.
class DimSlicer {
 public:
  DimSlicer(const Shape& shape, int dim) : shape_(shape), dim_(dim) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (static_cast<int>(d) != dim) slice_shape_.push_back(shape[d]);
    }
  }
  const Shape& slice_shape() const { return slice_shape_; }

  Value Extract(OpBuilder& b, Location l, Value t, Value k) const {
    auto [offsets, sizes, strides] = Box(b, k);
    return b.create<mlir::tensor::ExtractSliceOp>(l, SliceType(t), t, offsets,
                                                  sizes, strides);
  }
  Value Insert(OpBuilder& b, Location l, Value slice, Value into,
               Value k) const {
    auto [offsets, sizes, strides] = Box(b, k);
    return b.create<mlir::tensor::InsertSliceOp>(l, slice, into, offsets, sizes,
                                                 strides);
  }

 private:
  using Folds = llvm::SmallVector<mlir::OpFoldResult>;
  std::tuple<Folds, Folds, Folds> Box(OpBuilder& b, Value k) const {
    Folds offsets(shape_.size(), b.getIndexAttr(0)), sizes,
        strides(shape_.size(), b.getIndexAttr(1));
    offsets[dim_] = k;
    for (size_t d = 0; d < shape_.size(); ++d) {
      sizes.push_back(
          b.getIndexAttr(static_cast<int>(d) == dim_ ? 1 : shape_[d]));
    }
    return {offsets, sizes, strides};
  }
  mlir::RankedTensorType SliceType(Value t) const {
    return mlir::RankedTensorType::get(
        slice_shape_,
        t.getType().cast<mlir::RankedTensorType>().getElementType());
  }

  Shape shape_;
  int dim_;
  Shape slice_shape_;
};

// ATen's at::acc_type<scalar_t, /*is_cuda=*/false> of a scan's output.
Type AccType(OpBuilder& b, ir::DType out) {
  switch (out) {
    case ir::FLOAT32:
      return b.getF64Type();
    case ir::FLOAT16:
    case ir::BFLOAT16:
      return b.getF32Type();
    default:
      return b.getI64Type();
  }
}

mlir::TypedAttr ScalarAttr(OpBuilder& b, Type t, double v) {
  if (t.isa<mlir::FloatType>()) return b.getFloatAttr(t, v);
  return b.getIntegerAttr(t, static_cast<int64_t>(v));
}

// The running max/min's start: the lowest (highest) value of the type.
mlir::TypedAttr ExtremeAttr(OpBuilder& b, Type t, ir::DType dtype, bool max) {
  if (t.isa<mlir::FloatType>()) {
    return b.getFloatAttr(t, max ? -INFINITY : INFINITY);
  }
  if (dtype == ir::BOOL) return b.getIntegerAttr(t, max ? 0 : 1);
  const unsigned w = t.getIntOrFloatBitWidth();
  return b.getIntegerAttr(t, max ? llvm::APInt::getSignedMinValue(w)
                                 : llvm::APInt::getSignedMaxValue(w));
}

// ATen's _log_add_exp_helper(x, y): log(exp(x) + exp(y)), NaN in y kept,
// equal infinities give x.
Value LogAddExp(OpBuilder& b, Location l, Value x, Value y) {
  Value y_nan = IsNan(b, l, y);
  // std::min(x, y) / std::max(x, y) return x unless y is strictly better.
  Value y_lt_x = b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::OLT, y, x);
  Value x_lt_y = b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::OLT, x, y);
  Value lo = b.create<mlir::arith::SelectOp>(
      l, y_nan, y, b.create<mlir::arith::SelectOp>(l, y_lt_x, y, x));
  Value hi = b.create<mlir::arith::SelectOp>(
      l, y_nan, y, b.create<mlir::arith::SelectOp>(l, x_lt_y, y, x));
  Value differ = b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::UNE, lo, hi);
  Value abs = b.create<mlir::math::AbsFOp>(l, lo);
  Value inf = b.create<mlir::arith::ConstantOp>(
      l, b.getFloatAttr(lo.getType(), INFINITY));
  Value finite = b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::OLT, abs, inf);
  Value general = b.create<mlir::arith::OrIOp>(l, differ, finite);
  Value sum = b.create<mlir::arith::AddFOp>(
      l,
      b.create<mlir::math::Log1pOp>(
          l, b.create<mlir::math::ExpOp>(
                 l, b.create<mlir::arith::SubFOp>(l, lo, hi))),
      hi);
  return b.create<mlir::arith::SelectOp>(l, general, sum, x);
}

// A compute value of dtype `from` (f32 for floats) in the accumulator type
// `acc` of output dtype `out`: converted to `out` first, as ATen converts
// the input to the result dtype.
Value ToAcc(GraphImporter& im, OpBuilder& b, Location l, Value v,
            ir::DType from, ir::DType out, Type acc) {
  Value c = im.CastCompute(b, v, from, out);
  if ((IsIntegral(from) || from == ir::BOOL) &&
      (out == ir::FLOAT16 || out == ir::BFLOAT16)) {
    c = im.ToCompute(b, im.FromCompute(b, c, out), out);
  }
  if (c.getType() == acc) return c;
  if (acc.isa<mlir::FloatType>())
    return b.create<mlir::arith::ExtFOp>(l, acc, c);
  return b.create<mlir::arith::ExtSIOp>(l, acc, c);
}

// The accumulator (type `acc`) as the storage type of `out`.
Value FromAcc(GraphImporter& im, OpBuilder& b, Location l, Value v,
              ir::DType out) {
  Type compute = im.ComputeType(out);
  if (v.getType() != compute) {
    if (compute.isa<mlir::FloatType>()) {
      v = b.create<mlir::arith::TruncFOp>(l, compute, v);
    } else {
      v = b.create<mlir::arith::TruncIOp>(l, compute, v);
    }
  }
  return im.FromCompute(b, v, out);
}

absl::Status CheckScan(GraphImporter& im, const ir::Node& node, ScanKind kind,
                       const ir::TensorType& in) {
  const bool with_indices = kind == ScanKind::kMax || kind == ScanKind::kMin;
  if (absl::Status s = CheckArity(node, 1, with_indices ? 2 : 1); !s.ok()) {
    return s;
  }
  const Shape shape = ShapeOf(in);
  for (int i = 0; i < node.outputs_size(); ++i) {
    if (absl::Status s = CheckOutputShape(node, i, shape); !s.ok()) return s;
  }
  const ir::DType out = node.outputs(0).type().dtype();
  if (with_indices) {
    if (out != in.dtype() || node.outputs(1).type().dtype() != ir::INT64) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: outputs must be (values of the input's dtype, int64 "
          "indices)",
          node.op()));
    }
  } else if (kind == ScanKind::kLogSumExp) {
    if (!IsFloat(in.dtype()) || out != in.dtype()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: logcumsumexp takes a floating point tensor and returns its "
          "dtype, got %s -> %s",
          node.op(), ScalarTypeName(in.dtype()), ScalarTypeName(out)));
    }
  } else if (out == ir::BOOL) {
    return absl::UnimplementedError(absl::StrFormat(
        "The following operators are not implemented: ['%s' with a bool "
        "result]",
        node.op()));
  }
  return absl::OkStatus();
}

// A 0-d scan is the element itself (cummax/cummin: index 0).
void EmitScalarScan(GraphImporter& im, const ir::Node& node, ir::DType in) {
  for (int i = 0; i < node.outputs_size(); ++i) {
    const ir::DType out = node.outputs(i).type().dtype();
    const bool index = i == 1;
    im.Define(
        node.outputs(i),
        Generic(im, im.ValueOf(node.inputs(0)),
                Empty(im, {}, im.StorageType(out)),
                {Identity(im, 0), Identity(im, 0)}, {},
                [&](OpBuilder& b, Location l, ValueRange args) {
                  if (index) {
                    return llvm::SmallVector<Value>{I64Const(b, l, 0)};
                  }
                  Value v =
                      im.CastCompute(b, im.ToCompute(b, args[0], in), in, out);
                  return llvm::SmallVector<Value>{im.FromCompute(b, v, out)};
                })[0]);
  }
}

absl::Status ConvertScan(GraphImporter& im, const ir::Node& node,
                         ScanKind kind) {
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  if (absl::Status s = CheckScan(im, node, kind, in); !s.ok()) return s;
  const Shape shape = ShapeOf(in);
  const int rank = shape.size();
  absl::StatusOr<int> wrapped = WrapDim(node, IntAttr(node, "dim", 0), rank);
  if (!wrapped.ok()) return wrapped.status();
  const ir::DType in_dtype = in.dtype();
  if (rank == 0) {
    EmitScalarScan(im, node, in_dtype);
    return absl::OkStatus();
  }
  const int dim = *wrapped;
  if (NumElements(shape) == 0) {
    for (int i = 0; i < node.outputs_size(); ++i) {
      mlir::RankedTensorType t = im.TensorTypeOf(node.outputs(i).type());
      im.Define(node.outputs(i), Empty(im, shape, t.getElementType()));
    }
    return absl::OkStatus();
  }
  const bool with_indices = kind == ScanKind::kMax || kind == ScanKind::kMin;
  const ir::DType out_dtype = node.outputs(0).type().dtype();
  OpBuilder& builder = im.builder();
  const Location loc = im.loc();
  const DimSlicer slicer(shape, dim);
  const Shape& slice_shape = slicer.slice_shape();
  const int slice_rank = slice_shape.size();

  // Accumulators: the running value (and index).
  std::vector<Value> accs;
  Type acc_type;
  switch (kind) {
    case ScanKind::kSum:
      acc_type = AccType(builder, out_dtype);
      accs.push_back(Filled(im, slice_shape, ScalarAttr(builder, acc_type, 0)));
      break;
    case ScanKind::kProd:
      acc_type = AccType(builder, out_dtype);
      accs.push_back(Filled(im, slice_shape, ScalarAttr(builder, acc_type, 1)));
      break;
    case ScanKind::kLogSumExp:
      acc_type = AccType(builder, out_dtype);
      accs.push_back(
          Filled(im, slice_shape, ScalarAttr(builder, acc_type, -INFINITY)));
      break;
    case ScanKind::kMax:
    case ScanKind::kMin:
      acc_type = im.ComputeType(in_dtype);
      accs.push_back(Filled(
          im, slice_shape,
          ExtremeAttr(builder, acc_type, in_dtype, kind == ScanKind::kMax)));
      accs.push_back(Filled(im, slice_shape, builder.getI64IntegerAttr(0)));
      break;
  }
  std::vector<Value> outs;
  for (int i = 0; i < node.outputs_size(); ++i) {
    mlir::RankedTensorType t = im.TensorTypeOf(node.outputs(i).type());
    outs.push_back(Empty(im, shape, t.getElementType()));
  }
  std::vector<Value> carried = accs;
  carried.insert(carried.end(), outs.begin(), outs.end());
  const int num_accs = accs.size();
  const AffineMap id = Identity(im, slice_rank);
  const std::vector<IteratorType> parallel(slice_rank, IteratorType::parallel);

  auto loop = builder.create<mlir::scf::ForOp>(
      loc, IndexConst(builder, loc, 0), IndexConst(builder, loc, shape[dim]),
      IndexConst(builder, loc, 1), carried,
      [&](OpBuilder& b, Location l, Value k, ValueRange iter) {
        Value x = slicer.Extract(b, l, im.ValueOf(node.inputs(0)), k);
        Value k64 = b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(), k);
        std::vector<Value> state(iter.begin(), iter.begin() + num_accs);
        std::vector<mlir::AffineMap> maps(1 + num_accs, id);
        auto step = b.create<mlir::linalg::GenericOp>(
            l, mlir::TypeRange(ValueRange(state)), ValueRange{x}, state, maps,
            parallel, [&](OpBuilder& nb, Location nl, ValueRange args) {
              Value v = im.ToCompute(nb, args[0], in_dtype);
              Value a = args[1];
              llvm::SmallVector<Value> next;
              switch (kind) {
                case ScanKind::kSum:
                  next.push_back(
                      Add(nb, nl, a,
                          ToAcc(im, nb, nl, v, in_dtype, out_dtype, acc_type)));
                  break;
                case ScanKind::kProd:
                  next.push_back(
                      Mul(nb, nl, a,
                          ToAcc(im, nb, nl, v, in_dtype, out_dtype, acc_type)));
                  break;
                case ScanKind::kLogSumExp:
                  next.push_back(LogAddExp(
                      nb, nl,
                      ToAcc(im, nb, nl, v, in_dtype, out_dtype, acc_type), a));
                  break;
                case ScanKind::kMax:
                case ScanKind::kMin: {
                  const bool max = kind == ScanKind::kMax;
                  Value take;
                  if (v.getType().isa<mlir::FloatType>()) {
                    Value better = nb.create<mlir::arith::CmpFOp>(
                        nl, max ? CmpFPredicate::OGE : CmpFPredicate::OLE, v,
                        a);
                    Value a_nan = IsNan(nb, nl, a);
                    Value not_nan = nb.create<mlir::arith::XOrIOp>(
                        nl, a_nan,
                        nb.create<mlir::arith::ConstantIntOp>(nl, 1, 1));
                    take = nb.create<mlir::arith::OrIOp>(
                        nl, IsNan(nb, nl, v),
                        nb.create<mlir::arith::AndIOp>(nl, not_nan, better));
                  } else {
                    take = nb.create<mlir::arith::CmpIOp>(
                        nl, max ? CmpIPredicate::sge : CmpIPredicate::sle, v,
                        a);
                  }
                  next.push_back(
                      nb.create<mlir::arith::SelectOp>(nl, take, v, a));
                  next.push_back(
                      nb.create<mlir::arith::SelectOp>(nl, take, k64, args[2]));
                  break;
                }
              }
              nb.create<mlir::linalg::YieldOp>(nl, next);
            });
        // The accumulator, rounded, into slice k of the output(s): a fresh
        // slice, then a named copy into the destination (fusion would turn
        // a generic's unread destination into a temporary, copied back with
        // memref.copy, which needs a runtime library).
        std::vector<mlir::Type> out_types;
        std::vector<Value> out_inits;
        for (size_t i = 0; i < outs.size(); ++i) {
          auto type = outs[i].getType().cast<mlir::RankedTensorType>();
          out_inits.push_back(b.create<mlir::tensor::EmptyOp>(
              l, slice_shape, type.getElementType()));
          out_types.push_back(out_inits.back().getType());
        }
        std::vector<mlir::AffineMap> out_maps(num_accs + outs.size(), id);
        auto written = b.create<mlir::linalg::GenericOp>(
            l, out_types, step.getResults(), out_inits, out_maps, parallel,
            [&](OpBuilder& nb, Location nl, ValueRange args) {
              llvm::SmallVector<Value> values;
              if (with_indices) {
                values.push_back(im.FromCompute(nb, args[0], out_dtype));
                values.push_back(args[1]);
              } else {
                values.push_back(FromAcc(im, nb, nl, args[0], out_dtype));
              }
              nb.create<mlir::linalg::YieldOp>(nl, values);
            });
        llvm::SmallVector<Value> yielded(step.getResults().begin(),
                                         step.getResults().end());
        for (size_t i = 0; i < outs.size(); ++i) {
          Value dest = slicer.Extract(b, l, iter[num_accs + i], k);
          Value copied =
              b.create<mlir::linalg::CopyOp>(
                   l, ValueRange{written.getResult(i)}, ValueRange{dest})
                  .getResult(0);
          yielded.push_back(slicer.Insert(b, l, copied, iter[num_accs + i], k));
        }
        b.create<mlir::scf::YieldOp>(l, yielded);
      });
  for (int i = 0; i < node.outputs_size(); ++i) {
    im.Define(node.outputs(i), loop.getResult(num_accs + i));
  }
  return absl::OkStatus();
}

template <ScanKind kKind>
absl::Status ConvertScanOp(GraphImporter& im, const ir::Node& node) {
  return ConvertScan(im, node, kKind);
}

}  // namespace

void RegisterScanOps(OpConverterTable& table) {
  table["cumsum"] = &ConvertScanOp<ScanKind::kSum>;
  table["cumprod"] = &ConvertScanOp<ScanKind::kProd>;
  table["cummax"] = &ConvertScanOp<ScanKind::kMax>;
  table["cummin"] = &ConvertScanOp<ScanKind::kMin>;
  table["logcumsumexp"] = &ConvertScanOp<ScanKind::kLogSumExp>;
}

}  // namespace rbln::compiler

// Histograms: histc with a static number of bins.
//
// As ATen's histc (histogramdd with linear interpolation): the range is
// [min, max], or the data's [amin, amax] when min == max (widened by 1 on
// both sides when that is empty), rounded to the input dtype; an element e
// outside the range (NaN included) is skipped, otherwise its bin is
// int((e - left) * bins / (right - left)) computed step by step in the input
// dtype (each step rounded for half types, as c10::Half arithmetic), and
// e == right falls into the last bin. A parallel generic computes each
// element's bin; an scf.for over the elements then counts them in order into
// the histogram in the output dtype (a count rounds like ATen's accumulation
// in that dtype).
//
// Differences from ATen: a data range that is not finite (an inf or NaN
// element with min == max) raises in ATen and counts nothing here.
//
// IR conventions: histc(x) "bins" (default 100), "min", "max" (default 0);
// output [bins] of x's float dtype.
#include <cmath>
#include <cstdint>
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

absl::Status ConvertHistc(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::DType dtype = in.dtype();
  if (!IsFloat(dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op histc: \"histogram_histc\" not implemented for '%s'",
        ScalarTypeName(dtype)));
  }
  const int64_t bins = IntAttr(node, "bins", 100);
  if (bins <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op histc: torch.histc(): bins must be > 0, but got %d", bins));
  }
  if (absl::Status s = CheckOutputShape(node, 0, {bins}); !s.ok()) return s;
  if (node.outputs(0).type().dtype() != dtype) {
    return absl::InvalidArgumentError(
        "op histc: the output must have the input's dtype");
  }
  const double lo = FloatAttr(node, "min", 0), hi = FloatAttr(node, "max", 0);
  const Shape shape = ShapeOf(in);
  const int64_t numel = NumElements(shape);
  const bool from_data = lo == hi && numel > 0;
  if (!from_data) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op histc: torch.histc: range of [%g, %g] is not finite", lo, hi));
    }
    if (lo > hi) {
      return absl::InvalidArgumentError(
          "op histc: torch.histc: max must be larger than min");
    }
  }
  OpBuilder& builder = im.builder();
  const mlir::Type storage = im.StorageType(dtype);
  Value zero = builder.create<mlir::arith::ConstantOp>(
      im.loc(), builder.getZeroAttr(storage));
  Value hist =
      builder
          .create<mlir::linalg::FillOp>(im.loc(), ValueRange{zero},
                                        ValueRange{Empty(im, {bins}, storage)})
          .getResult(0);
  if (numel == 0) {
    im.Define(node.outputs(0), hist);
    return absl::OkStatus();
  }
  const int rank = shape.size();
  Value x = im.ValueOf(node.inputs(0));
  // The data's range as two 0-d f32 tensors (amin, amax; NaN propagates).
  Value data_lo, data_hi;
  if (from_data) {
    std::vector<bool> all(rank, true);
    data_lo = Reduce(im, x, dtype, ir::FLOAT32, all, false, F32(im, INFINITY),
                     [](OpBuilder& b, Location l, Value v, Value a) {
                       return MaxOrMin(b, l, v, a, /*max=*/false);
                     });
    data_hi = Reduce(im, x, dtype, ir::FLOAT32, all, false, F32(im, -INFINITY),
                     [](OpBuilder& b, Location l, Value v, Value a) {
                       return MaxOrMin(b, l, v, a, /*max=*/true);
                     });
  }
  auto round = [&](OpBuilder& b, Value v) {
    return im.ToCompute(b, im.FromCompute(b, v, dtype), dtype);
  };
  // Each element's bin, -1 for skipped ones.
  Value positions = Generic(
      im, x, Empty(im, shape, builder.getI64Type()),
      {Identity(im, rank), Identity(im, rank)},
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value left, right;
        if (from_data) {
          left = b.create<mlir::tensor::ExtractOp>(l, data_lo, ValueRange{});
          right = b.create<mlir::tensor::ExtractOp>(l, data_hi, ValueRange{});
          // An empty range widens by 1 on each side (in double, then
          // rounded to the dtype with the edges).
          Value same =
              b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::OEQ, left, right);
          left = b.create<mlir::arith::SelectOp>(
              l, same, b.create<mlir::arith::SubFOp>(l, left, F32Const(b, 1.0)),
              left);
          right = b.create<mlir::arith::SelectOp>(
              l, same,
              b.create<mlir::arith::AddFOp>(l, right, F32Const(b, 1.0)), right);
          left = round(b, left);
          right = round(b, right);
        } else {
          const bool widen = lo == hi;
          left = round(b, F32Const(b, widen ? lo - 1 : lo));
          right = round(b, F32Const(b, widen ? hi + 1 : hi));
        }
        Value e = im.ToCompute(b, args[0], dtype);
        Value inside = b.create<mlir::arith::AndIOp>(
            l, b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::OGE, e, left),
            b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::OLE, e, right));
        Value t = round(b, b.create<mlir::arith::SubFOp>(l, e, left));
        t = round(b, b.create<mlir::arith::MulFOp>(
                         l, t, round(b, F32Const(b, bins))));
        t = round(
            b,
            b.create<mlir::arith::DivFOp>(
                l, t, round(b, b.create<mlir::arith::SubFOp>(l, right, left))));
        Value pos = b.create<mlir::arith::FPToSIOp>(l, b.getI64Type(), t);
        pos = b.create<mlir::arith::MinSIOp>(l, pos, I64Const(b, l, bins - 1));
        return llvm::SmallVector<Value>{b.create<mlir::arith::SelectOp>(
            l, inside, pos, I64Const(b, l, -1))};
      })[0];
  // Count in element order into the histogram.
  if (rank != 1) {
    auto flat = mlir::RankedTensorType::get({numel}, builder.getI64Type());
    if (rank == 0) {
      positions = builder.create<mlir::tensor::ExpandShapeOp>(
          im.loc(), flat, positions, std::vector<mlir::ReassociationIndices>{});
    } else {
      std::vector<mlir::ReassociationIndices> groups(1);
      for (int d = 0; d < rank; ++d) groups[0].push_back(d);
      positions = builder.create<mlir::tensor::CollapseShapeOp>(
          im.loc(), flat, positions, groups);
    }
  }
  auto loop = builder.create<mlir::scf::ForOp>(
      im.loc(), IndexConst(builder, im.loc(), 0),
      IndexConst(builder, im.loc(), numel), IndexConst(builder, im.loc(), 1),
      ValueRange{hist}, [&](OpBuilder& b, Location l, Value i, ValueRange it) {
        Value pos = b.create<mlir::tensor::ExtractOp>(l, positions, i);
        Value counted = b.create<mlir::arith::CmpIOp>(l, CmpIPredicate::sge,
                                                      pos, I64Const(b, l, 0));
        Value at = b.create<mlir::arith::IndexCastOp>(
            l, b.getIndexType(),
            b.create<mlir::arith::MaxSIOp>(l, pos, I64Const(b, l, 0)));
        Value old = b.create<mlir::tensor::ExtractOp>(l, it[0], at);
        Value inc = im.FromCompute(
            b,
            b.create<mlir::arith::AddFOp>(l, im.ToCompute(b, old, dtype),
                                          F32Const(b, 1.0)),
            dtype);
        Value updated = b.create<mlir::tensor::InsertOp>(
            l, b.create<mlir::arith::SelectOp>(l, counted, inc, old), it[0],
            at);
        b.create<mlir::scf::YieldOp>(l, ValueRange{updated});
      });
  im.Define(node.outputs(0), loop.getResult(0));
  return absl::OkStatus();
}

}  // namespace

void RegisterHistogramOps(OpConverterTable& table) {
  table["histc"] = &ConvertHistc;
}

}  // namespace rbln::compiler

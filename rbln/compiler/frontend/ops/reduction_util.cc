#include "rbln/compiler/frontend/ops/reduction_util.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "llvm/ADT/APInt.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::utils::IteratorType;

Value Empty(GraphImporter& im, const Shape& shape, Type element) {
  return im.builder().create<mlir::tensor::EmptyOp>(im.loc(), shape, element);
}

Value Filled(GraphImporter& im, const Shape& shape, mlir::TypedAttr value) {
  OpBuilder& b = im.builder();
  Value init = b.create<mlir::arith::ConstantOp>(im.loc(), value);
  return b
      .create<mlir::linalg::FillOp>(
          im.loc(), ValueRange{init},
          ValueRange{Empty(im, shape, value.getType())})
      .getResult(0);
}

using BodyFn = llvm::function_ref<llvm::SmallVector<Value>(OpBuilder&, Location,
                                                           ValueRange)>;

mlir::ResultRange Generic(GraphImporter& im, ValueRange inputs,
                          ValueRange inits, llvm::ArrayRef<AffineMap> maps,
                          llvm::ArrayRef<IteratorType> iterators, BodyFn body) {
  auto op = im.builder().create<mlir::linalg::GenericOp>(
      im.loc(), mlir::TypeRange(inits), inputs, inits, maps, iterators,
      [&](OpBuilder& b, Location l, ValueRange args) {
        b.create<mlir::linalg::YieldOp>(l, body(b, l, args));
      });
  return op.getResults();
}

AffineMap Identity(GraphImporter& im, int rank) {
  return AffineMap::getMultiDimIdentityMap(rank, im.context());
}

AffineMap ReducedMap(GraphImporter& im, const std::vector<bool>& reduced,
                     bool keepdim) {
  std::vector<mlir::AffineExpr> exprs;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d]) {
      exprs.push_back(mlir::getAffineDimExpr(d, im.context()));
    } else if (keepdim) {
      exprs.push_back(mlir::getAffineConstantExpr(0, im.context()));
    }
  }
  return AffineMap::get(reduced.size(), 0, exprs, im.context());
}

Shape ReducedShape(const Shape& in, const std::vector<bool>& reduced,
                   bool keepdim) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(in[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

std::vector<IteratorType> Iterators(const std::vector<bool>& reduced) {
  std::vector<IteratorType> it;
  for (bool r : reduced) {
    it.push_back(r ? IteratorType::reduction : IteratorType::parallel);
  }
  return it;
}

mlir::TypedAttr F32(GraphImporter& im, double v) {
  return im.builder().getF32FloatAttr(static_cast<float>(v));
}

Value F32Const(OpBuilder& b, double v) {
  return b.create<mlir::arith::ConstantOp>(
      b.getUnknownLoc(), b.getF32FloatAttr(static_cast<float>(v)));
}

Value I64Const(OpBuilder& b, Location l, int64_t v) {
  return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
}

// --- Checks. ---------------------------------------------------------------

absl::Status CheckOutputShape(const ir::Node& node, int output,
                              const Shape& expected) {
  if (ShapeOf(node.outputs(output).type()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op %s: output %%%s has shape %s, expected [%s]",
                        node.op(), node.outputs(output).name(),
                        ir::TypeToText(node.outputs(output).type()),
                        absl::StrJoin(expected, ",")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<bool>> ReducedDims(const ir::Node& node, int rank) {
  std::vector<int64_t> dims;
  auto it = node.attrs().find("dim");
  if (it != node.attrs().end()) {
    if (it->second.value_case() == ir::Attribute::kS) {
      for (absl::string_view part :
           absl::StrSplit(it->second.s(), ',', absl::SkipWhitespace())) {
        int64_t d;
        if (!absl::SimpleAtoi(part, &d)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "op %s: attr dim must be an int or comma-separated ints, got "
              "'%s'",
              node.op(), it->second.s()));
        }
        dims.push_back(d);
      }
    } else {
      dims.push_back(IntAttr(node, "dim", 0));
    }
  }
  std::vector<bool> reduced(rank, dims.empty());
  std::vector<bool> seen(rank == 0 ? 1 : rank, false);
  for (int64_t d : dims) {
    absl::StatusOr<int> w = WrapDim(node, d, rank);
    if (!w.ok()) return w.status();
    if (seen[*w]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: dim %d appears multiple times in the list of dims", node.op(),
          *w));
    }
    seen[*w] = true;
    if (rank > 0) reduced[*w] = true;
  }
  return reduced;
}

absl::Status CheckFloat(const ir::Node& node, ir::DType t) {
  if (!IsFloat(t)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op %s: expected a floating point tensor", node.op()));
  }
  return absl::OkStatus();
}

const char* ScalarTypeName(ir::DType t) {
  switch (t) {
    case ir::FLOAT16:
      return "Half";
    case ir::BFLOAT16:
      return "BFloat16";
    case ir::FLOAT32:
      return "Float";
    case ir::INT32:
      return "Int";
    case ir::INT64:
      return "Long";
    case ir::BOOL:
      return "Bool";
    case ir::INT8:
      return "Char";
    case ir::INT16:
      return "Short";
    case ir::UINT8:
      return "Byte";
    default:
      return "unknown";
  }
}

absl::Status CheckNonEmptyReduction(const ir::Node& node, const Shape& shape,
                                    const std::vector<bool>& reduced) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d] && shape[d] == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Expected reduction dim %d to have non-zero size", node.op(),
          d));
    }
  }
  return absl::OkStatus();
}

// --- Scalar combiners (compute type). ----------------------------------------

Value Add(OpBuilder& b, Location l, Value x, Value y) {
  if (x.getType().isa<mlir::FloatType>()) {
    return b.create<mlir::arith::AddFOp>(l, x, y);
  }
  return b.create<mlir::arith::AddIOp>(l, x, y);
}

Value Mul(OpBuilder& b, Location l, Value x, Value y) {
  if (x.getType().isa<mlir::FloatType>()) {
    return b.create<mlir::arith::MulFOp>(l, x, y);
  }
  return b.create<mlir::arith::MulIOp>(l, x, y);
}

Value IsNan(OpBuilder& b, Location l, Value x) {
  return b.create<mlir::arith::CmpFOp>(l, CmpFPredicate::UNO, x, x);
}

Value MaxOrMin(OpBuilder& b, Location l, Value x, Value acc, bool max) {
  if (x.getType().isa<mlir::FloatType>()) {
    Value better = b.create<mlir::arith::CmpFOp>(
        l, max ? CmpFPredicate::OGT : CmpFPredicate::OLT, x, acc);
    better = b.create<mlir::arith::OrIOp>(l, better, IsNan(b, l, x));
    return b.create<mlir::arith::SelectOp>(l, better, x, acc);
  }
  if (max) return b.create<mlir::arith::MaxSIOp>(l, x, acc);
  return b.create<mlir::arith::MinSIOp>(l, x, acc);
}

mlir::TypedAttr MaxOrMinInit(GraphImporter& im, ir::DType t, bool max) {
  Type type = im.ComputeType(t);
  if (IsFloat(t)) return F32(im, max ? -INFINITY : INFINITY);
  const unsigned w = type.getIntOrFloatBitWidth();
  return im.builder().getIntegerAttr(type,
                                     max ? llvm::APInt::getSignedMinValue(w)
                                         : llvm::APInt::getSignedMaxValue(w));
}

mlir::TypedAttr Zero(GraphImporter& im, ir::DType t) {
  Type type = im.ComputeType(t);
  if (IsFloat(t)) return F32(im, 0.0);
  return im.builder().getIntegerAttr(type, 0);
}

Value Finalize(GraphImporter& im, const ir::Node& node, int output, Value acc,
               std::function<Value(OpBuilder&, Location, Value)> fn) {
  const ir::TensorType& out = node.outputs(output).type();
  mlir::RankedTensorType out_type = im.TensorTypeOf(out);
  auto acc_type = acc.getType().cast<mlir::RankedTensorType>();
  if (!fn && acc_type.getElementType() == out_type.getElementType()) return acc;
  const int rank = out.shape_size();
  return Generic(
      im, acc, Empty(im, ShapeOf(out), out_type.getElementType()),
      {Identity(im, rank), Identity(im, rank)},
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value v = fn ? fn(b, l, args[0]) : args[0];
        return llvm::SmallVector<Value>{im.FromCompute(b, v, out.dtype())};
      })[0];
}

Value Reduce(
    GraphImporter& im, Value x, ir::DType in, ir::DType acc_dtype,
    const std::vector<bool>& reduced, bool keepdim, mlir::TypedAttr init,
    llvm::function_ref<Value(OpBuilder&, Location, Value, Value)> combine) {
  const Shape in_shape =
      x.getType().cast<mlir::RankedTensorType>().getShape().vec();
  const int rank = in_shape.size();
  return Generic(
      im, x, Filled(im, ReducedShape(in_shape, reduced, keepdim), init),
      {Identity(im, rank), ReducedMap(im, reduced, keepdim)},
      Iterators(reduced), [&](OpBuilder& b, Location l, ValueRange args) {
        Value v =
            im.CastCompute(b, im.ToCompute(b, args[0], in), in, acc_dtype);
        return llvm::SmallVector<Value>{combine(b, l, v, args[1])};
      })[0];
}

}  // namespace rbln::compiler

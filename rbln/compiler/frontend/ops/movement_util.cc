#include "rbln/compiler/frontend/ops/movement_util.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {

namespace arith = ::mlir::arith;
using ::mlir::AffineExpr;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;

std::string ShapeText(const Shape& s) {
  return absl::StrFormat("[%s]", absl::StrJoin(s, ", "));
}

const ir::TensorType& OutType(const ir::Node& node, int output) {
  return node.outputs(output).type();
}

absl::Status ShapeMismatch(const ir::Node& node, const Shape& expected) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "op %s: output %%%s is %s, but the inputs and attributes give shape %s",
      node.op(), node.outputs(0).name(), ir::TypeToText(OutType(node)),
      ShapeText(expected)));
}

absl::Status CheckOutputShape(const ir::Node& node, const Shape& expected) {
  if (ShapeOf(OutType(node)) != expected) return ShapeMismatch(node, expected);
  return absl::OkStatus();
}

absl::Status CheckSameDType(GraphImporter& im, const ir::Node& node,
                            const std::string& input) {
  if (im.TypeOf(input).dtype() != OutType(node).dtype()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: input %%%s is %s but output %%%s is %s; a data movement op "
        "keeps the dtype (cast with _to_copy first)",
        node.op(), input, ir::TypeToText(im.TypeOf(input)),
        node.outputs(0).name(), ir::TypeToText(OutType(node))));
  }
  return absl::OkStatus();
}

absl::Status CheckIndexDType(GraphImporter& im, const ir::Node& node,
                             const std::string& index) {
  const ir::DType t = im.TypeOf(index).dtype();
  if (t != ir::INT32 && t != ir::INT64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: index %%%s must be int32 or int64, got %s", node.op(), index,
        ir::TypeToText(im.TypeOf(index))));
  }
  return absl::OkStatus();
}

Value ZeroOf(OpBuilder& b, Location l, Type element) {
  if (element.isa<mlir::FloatType>()) {
    return b.create<arith::ConstantOp>(l, b.getFloatAttr(element, 0.0));
  }
  return b.create<arith::ConstantOp>(l, b.getIntegerAttr(element, 0));
}

void DefineEmpty(GraphImporter& im, const ir::Node& node, int output) {
  OpBuilder& b = im.builder();
  mlir::RankedTensorType type = im.TensorTypeOf(OutType(node, output));
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), type.getShape(),
                                               type.getElementType());
  Value zero = ZeroOf(b, im.loc(), type.getElementType());
  im.Define(node.outputs(output),
            b.create<mlir::linalg::FillOp>(im.loc(), zero, init).getResult(0));
}

Value OutputGeneric(GraphImporter& im, const ir::Node& node, ValueRange inputs,
                    llvm::ArrayRef<AffineMap> maps, const GenericBody& body,
                    int output) {
  OpBuilder& b = im.builder();
  mlir::RankedTensorType type = im.TensorTypeOf(OutType(node, output));
  const int rank = type.getRank();
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), type.getShape(),
                                               type.getElementType());
  std::vector<AffineMap> all(maps.begin(), maps.end());
  all.push_back(b.getMultiDimIdentityMap(rank));
  auto op = b.create<mlir::linalg::GenericOp>(
      im.loc(), mlir::TypeRange{type}, inputs, ValueRange{init}, all,
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& nested, Location l, ValueRange args) {
        nested.create<mlir::linalg::YieldOp>(
            l, body(nested, l, args.drop_back()));
      });
  return op.getResult(0);
}

std::vector<Value> LoopIndices(OpBuilder& b, Location l, int rank) {
  std::vector<Value> idx;
  for (int d = 0; d < rank; ++d) idx.push_back(b.create<mlir::linalg::IndexOp>(l, d));
  return idx;
}

absl::Status EmitAffineCopy(GraphImporter& im, const ir::Node& node,
                            const std::vector<AffineExpr>& exprs) {
  const std::string& x = node.inputs(0);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (NumElements(ShapeOf(OutType(node))) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  AffineMap map = AffineMap::get(OutType(node).shape_size(), 0, exprs,
                                 im.context());
  im.Define(node.outputs(0),
            OutputGeneric(im, node, im.ValueOf(x), map,
                          [](OpBuilder&, Location, ValueRange e) { return e[0]; }));
  return absl::OkStatus();
}

Value CastElement(GraphImporter& im, OpBuilder& b, Location l, Value v,
                  ir::DType from, ir::DType to) {
  if (from == to) return v;
  Value c = im.ToCompute(b, v, from);
  if (to == ir::BOOL) {
    Value nz = c.getType().isa<mlir::FloatType>()
                   ? b.create<arith::CmpFOp>(l, arith::CmpFPredicate::UNE, c,
                                             b.create<arith::ConstantOp>(
                                                 l, b.getFloatAttr(c.getType(), 0.0)))
                         .getResult()
                   : b.create<arith::CmpIOp>(
                          l, arith::CmpIPredicate::ne, c,
                          b.create<arith::ConstantOp>(
                              l, b.getIntegerAttr(c.getType(), 0)))
                         .getResult();
    return b.create<arith::ExtUIOp>(l, b.getI8Type(), nz);
  }
  return im.FromCompute(b, im.CastCompute(b, c, from, to), to);
}

Value ScalarInDType(GraphImporter& im, OpBuilder& b, Location l,
                    const ir::Attribute& a, ir::DType t) {
  Type type = im.ComputeType(t);
  if (IsFloat(t)) {
    double v = a.value_case() == ir::Attribute::kI   ? static_cast<double>(a.i())
               : a.value_case() == ir::Attribute::kB ? (a.b() ? 1.0 : 0.0)
                                                     : a.f();
    return b.create<arith::ConstantOp>(l, b.getF32FloatAttr(static_cast<float>(v)));
  }
  int64_t v;
  switch (a.value_case()) {
    case ir::Attribute::kI:
      v = a.i();
      break;
    case ir::Attribute::kB:
      v = a.b();
      break;
    default:
      v = t == ir::BOOL ? a.f() != 0 : static_cast<int64_t>(a.f());
  }
  if (t == ir::BOOL) v = v != 0;
  return b.create<arith::ConstantOp>(l, b.getIntegerAttr(type, v));
}

Value Reshape(GraphImporter& im, Value v, const Shape& to) {
  OpBuilder& b = im.builder();
  auto type = v.getType().cast<mlir::RankedTensorType>();
  if (type.getShape().vec() == to) return v;
  const int64_t n = type.getNumElements();
  auto flat_type = mlir::RankedTensorType::get({n}, type.getElementType());
  Value flat = v;
  if (type.getRank() == 0) {
    flat = b.create<mlir::tensor::ExpandShapeOp>(
        im.loc(), flat_type, v, llvm::ArrayRef<mlir::ReassociationIndices>{});
  } else if (type.getRank() > 1) {
    mlir::ReassociationIndices all;
    for (int64_t d = 0; d < type.getRank(); ++d) all.push_back(d);
    flat = b.create<mlir::tensor::CollapseShapeOp>(
        im.loc(), flat_type, v, llvm::ArrayRef<mlir::ReassociationIndices>{all});
  }
  auto to_type = mlir::RankedTensorType::get(to, type.getElementType());
  if (to.empty()) {
    return b.create<mlir::tensor::CollapseShapeOp>(
        im.loc(), to_type, flat, llvm::ArrayRef<mlir::ReassociationIndices>{});
  }
  if (to.size() == 1) return flat;
  mlir::ReassociationIndices all;
  for (size_t d = 0; d < to.size(); ++d) all.push_back(d);
  return b.create<mlir::tensor::ExpandShapeOp>(
      im.loc(), to_type, flat, llvm::ArrayRef<mlir::ReassociationIndices>{all});
}

Value CopyOf(GraphImporter& im, Value v) {
  OpBuilder& b = im.builder();
  auto type = v.getType().cast<mlir::RankedTensorType>();
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), type.getShape(),
                                               type.getElementType());
  return b.create<mlir::linalg::CopyOp>(im.loc(), ValueRange{v}, ValueRange{init})
      .getResult(0);
}

std::vector<Value> SerialLoop(GraphImporter& im, const Shape& shape,
                              ValueRange carried, const SerialBody& body) {
  OpBuilder& b = im.builder();
  Location l = im.loc();
  std::vector<Value> lower, upper, steps;
  for (int64_t n : shape) {
    lower.push_back(IndexConst(b, l, 0));
    upper.push_back(IndexConst(b, l, n));
    steps.push_back(IndexConst(b, l, 1));
  }
  if (shape.empty()) {
    // scf::buildLoopNest needs a loop; a 0-d shape is its one element.
    return body(b, l, ValueRange{}, carried);
  }
  mlir::scf::LoopNest nest = mlir::scf::buildLoopNest(
      b, l, lower, upper, steps, carried,
      [&](OpBuilder& nb, Location nl, ValueRange ivs, ValueRange iter) {
        std::vector<Value> next = body(nb, nl, ivs, iter);
        return mlir::scf::ValueVector(next.begin(), next.end());
      });
  return std::vector<Value>(nest.results.begin(), nest.results.end());
}

}  // namespace rbln::compiler

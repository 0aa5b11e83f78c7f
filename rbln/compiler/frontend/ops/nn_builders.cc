#include "rbln/compiler/frontend/ops/nn_builders.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler::nn {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Type ElementType(Value ranked_tensor) {
  return ranked_tensor.getType().cast<mlir::RankedTensorType>().getElementType();
}

Value Empty(GraphImporter& im, const Shape& shape, Type element) {
  return im.builder().create<mlir::tensor::EmptyOp>(im.loc(), shape, element);
}

Value Filled(GraphImporter& im, const Shape& shape, Type element,
             double value) {
  OpBuilder& b = im.builder();
  mlir::TypedAttr attr;
  if (element.isa<mlir::FloatType>()) {
    attr = b.getFloatAttr(element, value);
  } else {
    attr = b.getIntegerAttr(element, static_cast<int64_t>(value));
  }
  Value init = b.create<mlir::arith::ConstantOp>(im.loc(), attr);
  return b
      .create<mlir::linalg::FillOp>(im.loc(), ValueRange{init},
                                    ValueRange{Empty(im, shape, element)})
      .getResult(0);
}

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

Value Parallel(GraphImporter& im, ValueRange inputs,
               llvm::ArrayRef<AffineMap> in_maps, const Shape& shape,
               Type element, ScalarFn body) {
  const int rank = shape.size();
  std::vector<AffineMap> maps(in_maps.begin(), in_maps.end());
  maps.push_back(IdentityMap(im, rank));
  return Generic(im, inputs, Empty(im, shape, element), maps,
                 std::vector<IteratorType>(rank, IteratorType::parallel),
                 [&](OpBuilder& b, Location l, ValueRange args) {
                   return llvm::SmallVector<Value>{body(b, l, args)};
                 })[0];
}

AffineMap IdentityMap(GraphImporter& im, int rank) {
  return AffineMap::getMultiDimIdentityMap(rank, im.context());
}

AffineMap DimsMap(GraphImporter& im, int rank, const std::vector<int>& dims) {
  std::vector<mlir::AffineExpr> exprs;
  for (int d : dims) exprs.push_back(mlir::getAffineDimExpr(d, im.context()));
  return AffineMap::get(rank, 0, exprs, im.context());
}

Value ToComputeTensor(GraphImporter& im, Value v, ir::DType t) {
  const Type compute = im.ComputeType(t);
  if (ElementType(v) == compute) return v;
  const Shape shape = ShapeOf(v);
  return Parallel(im, v, {IdentityMap(im, shape.size())}, shape, compute,
                  [&](OpBuilder& b, Location, ValueRange args) {
                    return im.ToCompute(b, args[0], t);
                  });
}

Value ToStorageTensor(GraphImporter& im, Value v, ir::DType t) {
  const Type storage = im.StorageType(t);
  if (ElementType(v) == storage) return v;
  const Shape shape = ShapeOf(v);
  return Parallel(im, v, {IdentityMap(im, shape.size())}, shape, storage,
                  [&](OpBuilder& b, Location, ValueRange args) {
                    return im.FromCompute(b, args[0], t);
                  });
}

Value Embed(GraphImporter& im, Value source, Value into, const Shape& offsets,
            const Shape& strides) {
  OpBuilder& b = im.builder();
  const Shape shape = ShapeOf(source);
  std::vector<mlir::OpFoldResult> o, sizes, st;
  for (size_t d = 0; d < shape.size(); ++d) {
    o.push_back(b.getIndexAttr(offsets[d]));
    sizes.push_back(b.getIndexAttr(shape[d]));
    st.push_back(b.getIndexAttr(strides[d]));
  }
  auto slice_type = mlir::RankedTensorType::get(shape, ElementType(into));
  Value slice = b.create<mlir::tensor::ExtractSliceOp>(im.loc(), slice_type,
                                                       into, o, sizes, st);
  Value copied = b.create<mlir::linalg::CopyOp>(im.loc(), ValueRange{source},
                                                ValueRange{slice})
                     .getResult(0);
  return b.create<mlir::tensor::InsertSliceOp>(im.loc(), copied, into, o,
                                               sizes, st);
}

Value Pad(GraphImporter& im, Value v, const Shape& low, const Shape& high,
          double value) {
  bool any = false;
  for (size_t d = 0; d < low.size(); ++d) any |= low[d] != 0 || high[d] != 0;
  if (!any) return v;
  Shape shape = ShapeOf(v);
  for (size_t d = 0; d < shape.size(); ++d) shape[d] += low[d] + high[d];
  return Embed(im, v, Filled(im, shape, ElementType(v), value), low,
               Shape(shape.size(), 1));
}

Value ExpandDim(GraphImporter& im, Value v, int dim, const Shape& sizes) {
  const Shape in = ShapeOf(v);
  Shape out(in.begin(), in.begin() + dim);
  out.insert(out.end(), sizes.begin(), sizes.end());
  out.insert(out.end(), in.begin() + dim + 1, in.end());
  std::vector<mlir::ReassociationIndices> groups;
  int next = 0;
  for (int d = 0; d < static_cast<int>(in.size()); ++d) {
    mlir::ReassociationIndices group;
    const int width = d == dim ? static_cast<int>(sizes.size()) : 1;
    for (int i = 0; i < width; ++i) group.push_back(next++);
    groups.push_back(group);
  }
  return im.builder().create<mlir::tensor::ExpandShapeOp>(
      im.loc(), mlir::RankedTensorType::get(out, ElementType(v)), v, groups);
}

Value CollapseDims(GraphImporter& im, Value v, int dim, int count) {
  const Shape in = ShapeOf(v);
  Shape out(in.begin(), in.begin() + dim);
  int64_t merged = 1;
  for (int i = 0; i < count; ++i) merged *= in[dim + i];
  out.push_back(merged);
  out.insert(out.end(), in.begin() + dim + count, in.end());
  std::vector<mlir::ReassociationIndices> groups;
  for (int d = 0; d < static_cast<int>(in.size());) {
    mlir::ReassociationIndices group;
    const int width = d == dim ? count : 1;
    for (int i = 0; i < width; ++i) group.push_back(d++);
    groups.push_back(group);
  }
  return im.builder().create<mlir::tensor::CollapseShapeOp>(
      im.loc(), mlir::RankedTensorType::get(out, ElementType(v)), v, groups);
}

absl::StatusOr<std::vector<int64_t>> SpatialList(
    const ir::Node& node, const std::string& name, int n,
    const std::vector<int64_t>& dflt) {
  absl::StatusOr<std::vector<int64_t>> values = IntListAttr(node, name);
  if (!values.ok()) return values.status();
  std::vector<int64_t> v = values->empty() ? dflt : *values;
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  if (static_cast<int>(v.size()) != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %s must be one int or %d ints (one per spatial dim), got "
        "[%s]",
        node.op(), name, n, absl::StrJoin(v, ", ")));
  }
  return v;
}

bool HasInput(const ir::Node& node, int i) { return node.inputs_size() > i; }

absl::Status CheckFloatTensor(GraphImporter& im, const ir::Node& node,
                              const std::string& input, const char* what) {
  const ir::TensorType& t = im.TypeOf(input);
  if (!IsFloat(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %s %%%s is %s; it must be a floating point tensor (float16, "
        "bfloat16 or float32), as PyTorch's CPU kernel requires",
        node.op(), what, input, ir::TypeToText(t)));
  }
  return absl::OkStatus();
}

absl::Status CheckOutput(const ir::Node& node, int output, const Shape& shape,
                         ir::DType dtype) {
  if (output >= node.outputs_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: expected at least %d outputs, got %d", node.op(), output + 1,
        node.outputs_size()));
  }
  const ir::TensorType& t = node.outputs(output).type();
  if (ShapeOf(t) != shape || t.dtype() != dtype) {
    ir::TensorType want;
    want.set_dtype(dtype);
    for (int64_t d : shape) want.add_shape(d);
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: output %%%s is %s, but the inputs and attributes give %s",
        node.op(), node.outputs(output).name(), ir::TypeToText(t),
        ir::TypeToText(want)));
  }
  return absl::OkStatus();
}

Value AddScalars(OpBuilder& b, Location l, Value x, Value y) {
  if (x.getType().isa<mlir::FloatType>()) {
    return b.create<mlir::arith::AddFOp>(l, x, y);
  }
  return b.create<mlir::arith::AddIOp>(l, x, y);
}

Value MulScalars(OpBuilder& b, Location l, Value x, Value y) {
  if (x.getType().isa<mlir::FloatType>()) {
    return b.create<mlir::arith::MulFOp>(l, x, y);
  }
  return b.create<mlir::arith::MulIOp>(l, x, y);
}

Value IndexConst(OpBuilder& b, Location l, int64_t v) {
  return b.create<mlir::arith::ConstantIndexOp>(l, v);
}

Value LoopIndex(OpBuilder& b, Location l, int dim) {
  return b.create<mlir::linalg::IndexOp>(l, dim);
}

Value F32Const(OpBuilder& b, Location l, double v) {
  return b.create<mlir::arith::ConstantOp>(
      l, b.getF32FloatAttr(static_cast<float>(v)));
}

}  // namespace rbln::compiler::nn

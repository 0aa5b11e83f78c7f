// Ops on a strided box of a flat buffer: how the eager layer reaches a view
// of a device storage from inside a compiled program, so the program works
// on the storage's device memory instead of a contiguous copy.
//
// IR conventions (x is the storage span: a 1-D buffer of N elements from
// the view's element 0; the box is the view's sizes and strides in
// elements, from element `offset` of x):
//   strided_view(x[N]) -> out[sizes], same dtype
//     "sizes", "strides" (int lists), "offset" (default 0)
//     out[k] = x[offset + sum_d k_d * strides[d]]: any view of a contiguous
//     base (permute, transpose, expand, slice, select, ...) replayed as one
//     read, which element-wise fusion folds into the op that consumes it.
//   fill_strided(x[N]) -> out[N], same dtype
//     "value" (int, float or bool attribute), "sizes", "strides", "offset"
//     out[i] = value if i = offset + sum_d k_d * strides[d] for some
//     0 <= k_d < sizes[d], else x[i]. The eager fill_/zero_ of a device
//     tensor (SPEC G1) runs it with the storage span as both input and
//     output buffer, filling the box in place.
//
// fill_strided's box must not overlap itself (a view like x[:, ::2] or
// x.t(), not an expand or an as_strided with interleaved strides): then,
// with dims ordered by decreasing stride, each stride exceeds the extent of
// the dims after it and the box coordinates of an element follow from
// greedy division, which is the membership test the kernel body evaluates
// per element.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;

struct BoxDim {
  int64_t size;
  int64_t stride;
};

// A node's box, checked to lie inside a buffer of `n` elements.
struct Box {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  std::string text;  // For messages.
  bool empty = false;
  int64_t last = 0;  // The box's last element (when not empty).
};

absl::StatusOr<Box> ReadBox(const ir::Node& node, int64_t n) {
  Box box;
  absl::StatusOr<std::vector<int64_t>> sizes = IntListAttr(node, "sizes");
  if (!sizes.ok()) return sizes.status();
  absl::StatusOr<std::vector<int64_t>> strides = IntListAttr(node, "strides");
  if (!strides.ok()) return strides.status();
  box.sizes = *std::move(sizes);
  box.strides = *std::move(strides);
  box.offset = IntAttr(node, "offset", 0);
  box.text = absl::StrFormat("box sizes [%s] strides [%s] offset %d",
                             absl::StrJoin(box.sizes, ", "),
                             absl::StrJoin(box.strides, ", "), box.offset);
  if (box.sizes.size() != box.strides.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %s: sizes and strides differ in rank", node.op(), box.text));
  }
  if (box.offset < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %s: the offset must be non-negative", node.op(), box.text));
  }
  int64_t last = box.offset;
  for (size_t d = 0; d < box.sizes.size(); ++d) {
    if (box.sizes[d] < 0 || box.strides[d] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: %s: sizes and strides must be non-negative", node.op(), box.text));
    }
    if (box.sizes[d] == 0) box.empty = true;
    last += std::max<int64_t>(box.sizes[d] - 1, 0) * box.strides[d];
  }
  box.last = last;
  if (!box.empty && last >= n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %s reaches element %d of a %d-element buffer", node.op(), box.text,
        last, n));
  }
  return box;
}

// Checks the node's input is a flat buffer of the output's dtype; returns
// its length.
absl::StatusOr<int64_t> FlatInputLength(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::TensorType& out = node.outputs(0).type();
  if (in.shape_size() != 1 || in.dtype() != out.dtype()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: input %%%s is %s; it must be a flat buffer (the storage span) "
        "of the output's dtype (%%%s is %s)",
        node.op(), node.inputs(0), ir::TypeToText(in), node.outputs(0).name(),
        ir::TypeToText(out)));
  }
  return in.shape(0);
}

// The box's dims that matter (size > 1), by decreasing stride, after
// checking that the box does not overlap itself. A non-empty box only.
absl::StatusOr<std::vector<BoxDim>> OrderedDims(const ir::Node& node, const Box& box) {
  std::vector<BoxDim> dims;
  for (size_t d = 0; d < box.sizes.size(); ++d) {
    if (box.sizes[d] > 1) dims.push_back({box.sizes[d], box.strides[d]});
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [](const BoxDim& a, const BoxDim& b) { return a.stride > b.stride; });
  int64_t inner_extent = 0;  // Offset of the last element of the dims after d.
  for (auto d = dims.rbegin(); d != dims.rend(); ++d) {
    if (d->stride <= inner_extent) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: %s overlaps itself (stride %d is not larger than the %d "
          "elements the smaller strides span); fill a non-overlapping view",
          node.op(), box.text, d->stride, inner_extent));
    }
    inner_extent += (d->size - 1) * d->stride;
  }
  return dims;
}

// out[k] = x[offset + sum_d k_d * strides[d]]: one linalg.generic whose
// input map is that affine form of the output's loop indices, over the
// slice of x the box spans.
absl::Status ConvertStridedView(GraphImporter& im, const ir::Node& node) {
  absl::StatusOr<int64_t> n = FlatInputLength(im, node);
  if (!n.ok()) return n.status();
  absl::StatusOr<Box> box = ReadBox(node, *n);
  if (!box.ok()) return box.status();
  const ir::TensorType& out = node.outputs(0).type();
  if (ShapeOf(out) != box->sizes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op strided_view: output %%%s is %s, but the %s gives shape [%s]",
        node.outputs(0).name(), ir::TypeToText(out), box->text,
        absl::StrJoin(box->sizes, ", ")));
  }
  OpBuilder& b = im.builder();
  mlir::RankedTensorType type = im.TensorTypeOf(out);
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), type.getShape(),
                                               type.getElementType());
  if (box->empty) {
    // Nothing to read; a fill gives the empty result a producer.
    Value zero = b.create<arith::ConstantOp>(im.loc(), b.getZeroAttr(type.getElementType()));
    im.Define(node.outputs(0),
              b.create<mlir::linalg::FillOp>(im.loc(), zero, init).getResult(0));
    return absl::OkStatus();
  }
  // The read covers exactly [offset, last]: linalg infers loop bounds from
  // an operand whose map result is a bare loop index (x[0].expand(3, 8)
  // reads element d1), and that operand's size must then be the loop's.
  Value base = im.ValueOf(node.inputs(0));
  const int64_t extent = box->last - box->offset + 1;
  if (box->offset != 0 || extent != *n) {
    base = b.create<mlir::tensor::ExtractSliceOp>(
        im.loc(), base, llvm::ArrayRef<mlir::OpFoldResult>{b.getIndexAttr(box->offset)},
        llvm::ArrayRef<mlir::OpFoldResult>{b.getIndexAttr(extent)},
        llvm::ArrayRef<mlir::OpFoldResult>{b.getIndexAttr(1)});
  }
  const int rank = static_cast<int>(box->sizes.size());
  mlir::AffineExpr position = mlir::getAffineConstantExpr(0, im.context());
  for (int d = 0; d < rank; ++d) {
    position = position + mlir::getAffineDimExpr(d, im.context()) * box->strides[d];
  }
  const mlir::AffineMap read = mlir::AffineMap::get(rank, 0, position);
  const mlir::AffineMap write = b.getMultiDimIdentityMap(rank);
  auto op = b.create<mlir::linalg::GenericOp>(
      im.loc(), mlir::TypeRange{type}, ValueRange{base},
      ValueRange{init}, llvm::ArrayRef<mlir::AffineMap>{read, write},
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& nb, Location l, ValueRange args) {
        nb.create<mlir::linalg::YieldOp>(l, args[0]);
      });
  im.Define(node.outputs(0), op.getResult(0));
  return absl::OkStatus();
}

absl::Status ConvertFillStrided(GraphImporter& im, const ir::Node& node) {
  absl::StatusOr<int64_t> n = FlatInputLength(im, node);
  if (!n.ok()) return n.status();
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const ir::TensorType& out = node.outputs(0).type();
  if (ShapeOf(in) != ShapeOf(out)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op fill_strided: input %%%s is %s and output %%%s is %s; both must "
        "be the same flat buffer type (the storage span)",
        node.inputs(0), ir::TypeToText(in), node.outputs(0).name(),
        ir::TypeToText(out)));
  }
  auto value_attr = node.attrs().find("value");
  if (value_attr == node.attrs().end()) {
    return absl::InvalidArgumentError("op fill_strided: missing attr value");
  }
  const ir::Attribute& value = value_attr->second;
  const double fill = value.has_b() ? (value.b() ? 1.0 : 0.0)
                      : value.has_i() ? static_cast<double>(value.i())
                                      : value.f();
  absl::StatusOr<Box> box = ReadBox(node, *n);
  if (!box.ok()) return box.status();
  std::vector<BoxDim> dims;
  if (!box->empty) {
    absl::StatusOr<std::vector<BoxDim>> ordered = OrderedDims(node, *box);
    if (!ordered.ok()) return ordered.status();
    dims = *std::move(ordered);
  }
  const int64_t offset = box->offset;
  const bool empty_box = box->empty;
  const ir::DType dtype = out.dtype();

  OpBuilder& b = im.builder();
  mlir::RankedTensorType type = im.TensorTypeOf(out);
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), type.getShape(),
                                               type.getElementType());
  auto identity = b.getMultiDimIdentityMap(1);
  auto op = b.create<mlir::linalg::GenericOp>(
      im.loc(), mlir::TypeRange{type}, ValueRange{im.ValueOf(node.inputs(0))},
      ValueRange{init}, llvm::ArrayRef<mlir::AffineMap>{identity, identity},
      std::vector<IteratorType>{IteratorType::parallel},
      [&](OpBuilder& nb, Location l, ValueRange args) {
        auto index = [&](int64_t v) { return nb.create<arith::ConstantIndexOp>(l, v); };
        Value inside;
        if (empty_box) {
          inside = nb.create<arith::ConstantIntOp>(l, 0, 1);
        } else {
          // r: the element's offset from the box's first element, taken apart
          // one dim at a time from the largest stride down.
          Value i = nb.create<mlir::linalg::IndexOp>(l, 0);
          inside = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::sge, i, index(offset));
          Value r = nb.create<arith::SubIOp>(l, i, index(offset));
          for (const BoxDim& d : dims) {
            Value k = nb.create<arith::DivSIOp>(l, r, index(d.stride));
            Value in_range =
                nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, k, index(d.size));
            inside = nb.create<arith::AndIOp>(l, inside, in_range);
            r = nb.create<arith::SubIOp>(l, r,
                                         nb.create<arith::MulIOp>(l, k, index(d.stride)));
          }
          Value on_element =
              nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::eq, r, index(0));
          inside = nb.create<arith::AndIOp>(l, inside, on_element);
        }
        Value filled = im.FromCompute(nb, im.ComputeConstant(nb, fill, dtype), dtype);
        nb.create<mlir::linalg::YieldOp>(
            l, nb.create<arith::SelectOp>(l, inside, filled, args[0]).getResult());
      });
  im.Define(node.outputs(0), op.getResult(0));
  return absl::OkStatus();
}

}  // namespace

void RegisterStridedBoxOps(OpConverterTable& table) {
  table["strided_view"] = &ConvertStridedView;
  table["fill_strided"] = &ConvertFillStrided;
}

}  // namespace rbln::compiler

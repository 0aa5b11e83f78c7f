// Views as copies and their inverses, as functionalization writes them:
// diagonal, as_strided, the *_copy ops (a view op's functional twin),
// unbind_copy, and the scatters that write a view of x: slice_scatter,
// select_scatter, diagonal_scatter, as_strided_scatter.
//
// A view copy is the view op itself (the compiler's views are copies):
// view_copy(x) converts as view(x), diagonal as an affine read of a
// window of x, as_strided as the strided_view of x flattened (x's own
// elements, row-major, are the storage). A view scatter is one
// linalg.generic over x's shape that takes src where the position lies in
// the view and x elsewhere; as_strided_scatter, whose view may overlap
// itself, updates a copy of x in row-major order of src (the last write
// wins, as copy_ into an overlapping view does on the CPU).
//
// IR conventions (attributes named as the ATen schema's arguments):
//   diagonal(x) "offset" = 0, "dim1" = 0, "dim2" = 1: x's other dims, then
//     the diagonal
//   diagonal_scatter(x, src) "offset", "dim1", "dim2": src is
//     diagonal(x)'s shape
//   slice_scatter(x, src) "dim" = 0, "start", "end", "step" = 1 (as slice)
//   select_scatter(x, src) "dim", "index"
//   as_strided(x) "size", "stride", "storage_offset" = 0 (in elements of
//     x taken as contiguous)
//   as_strided_scatter(x, src) "size", "stride", "storage_offset"
//   view_copy, permute_copy, narrow_copy, expand_copy, ... (op + "_copy"):
//     the view op's attributes
//   unbind_copy(x) "dim" = 0: one output per index of dim
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineExpr.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/movement_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/shape_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::AffineExpr;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;

// --- diagonal. --------------------------------------------------------------------

struct Diagonal {
  int dim1, dim2;
  int64_t offset;
  int64_t length;
  Shape shape;  // diagonal(x)'s shape
};

absl::StatusOr<Diagonal> PlanDiagonal(const ir::Node& node, const Shape& in) {
  Diagonal diag;
  absl::StatusOr<int> d1 = WrapDim(node, IntAttr(node, "dim1", 0), in.size());
  if (!d1.ok()) return d1.status();
  absl::StatusOr<int> d2 = WrapDim(node, IntAttr(node, "dim2", 1), in.size());
  if (!d2.ok()) return d2.status();
  if (*d1 == *d2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: diagonal dimensions cannot be identical %d, %d", node.op(),
        IntAttr(node, "dim1", 0), IntAttr(node, "dim2", 1)));
  }
  diag.dim1 = *d1;
  diag.dim2 = *d2;
  diag.offset = IntAttr(node, "offset", 0);
  const int64_t n1 = in[diag.dim1], n2 = in[diag.dim2];
  diag.length = diag.offset >= 0 ? std::min(n1, n2 - diag.offset)
                                 : std::min(n1 + diag.offset, n2);
  diag.length = std::max<int64_t>(diag.length, 0);
  for (size_t d = 0; d < in.size(); ++d) {
    if (static_cast<int>(d) != diag.dim1 && static_cast<int>(d) != diag.dim2) {
      diag.shape.push_back(in[d]);
    }
  }
  diag.shape.push_back(diag.length);
  return diag;
}

// diagonal(x): the window of x the diagonal spans (its two dims of the
// diagonal's length), read with both dims at the last output index.
absl::Status ConvertDiagonal(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(x));
  if (in.size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: diagonal needs a tensor of at least 2 dims, %%%s is %s",
        node.op(), x, ShapeText(in)));
  }
  absl::StatusOr<Diagonal> diag = PlanDiagonal(node, in);
  if (!diag.ok()) return diag.status();
  if (absl::Status s = CheckOutputShape(node, diag->shape); !s.ok()) return s;
  if (NumElements(diag->shape) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  OpBuilder& b = im.builder();
  llvm::SmallVector<mlir::OpFoldResult> offsets, sizes, strides;
  for (size_t d = 0; d < in.size(); ++d) {
    int64_t offset = 0, size = in[d];
    if (static_cast<int>(d) == diag->dim1) {
      offset = std::max<int64_t>(-diag->offset, 0);
      size = diag->length;
    } else if (static_cast<int>(d) == diag->dim2) {
      offset = std::max<int64_t>(diag->offset, 0);
      size = diag->length;
    }
    offsets.push_back(b.getIndexAttr(offset));
    sizes.push_back(b.getIndexAttr(size));
    strides.push_back(b.getIndexAttr(1));
  }
  Value window = b.create<mlir::tensor::ExtractSliceOp>(im.loc(), im.ValueOf(x),
                                                        offsets, sizes, strides);
  const int rank = diag->shape.size();
  std::vector<AffineExpr> exprs;
  int next = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    const bool on_diag = static_cast<int>(d) == diag->dim1 || static_cast<int>(d) == diag->dim2;
    exprs.push_back(mlir::getAffineDimExpr(on_diag ? rank - 1 : next++, im.context()));
  }
  AffineMap map = AffineMap::get(rank, 0, exprs, im.context());
  im.Define(node.outputs(0),
            OutputGeneric(im, node, window, map,
                          [](OpBuilder&, Location, ValueRange e) { return e[0]; }));
  return absl::OkStatus();
}

// --- View scatters as one generic over x. --------------------------------------------

// out = x where `in_view(coords)` is false, else src at `src_coords(coords)`.
using InView = std::function<Value(OpBuilder&, Location, ValueRange coords)>;
using SrcCoords =
    std::function<std::vector<Value>(OpBuilder&, Location, ValueRange coords)>;
absl::Status EmitViewScatter(GraphImporter& im, const ir::Node& node,
                             const InView& in_view, const SrcCoords& src_coords) {
  const std::string &x = node.inputs(0), &src = node.inputs(1);
  const Shape in = ShapeOf(im.TypeOf(x));
  const int rank = in.size();
  if (NumElements(in) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  if (NumElements(ShapeOf(im.TypeOf(src))) == 0) {
    im.Define(node.outputs(0), CopyOf(im, im.ValueOf(x)));
    return absl::OkStatus();
  }
  im.Define(node.outputs(0), OutputGeneric(
      im, node, im.ValueOf(x), {im.builder().getMultiDimIdentityMap(rank)},
      [&](OpBuilder& b, Location l, ValueRange e) -> Value {
        std::vector<Value> coords = LoopIndices(b, l, rank);
        Value v = b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(src),
                                                    src_coords(b, l, coords));
        return b.create<arith::SelectOp>(l, in_view(b, l, coords), v, e[0]);
      }));
  return absl::OkStatus();
}

absl::Status CheckScatterInputs(GraphImporter& im, const ir::Node& node,
                                const Shape& src_expected) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  if (absl::Status s = CheckSameDType(im, node, node.inputs(0)); !s.ok()) return s;
  if (absl::Status s = CheckSameDType(im, node, node.inputs(1)); !s.ok()) return s;
  if (absl::Status s = CheckOutputShape(node, ShapeOf(im.TypeOf(node.inputs(0))));
      !s.ok()) {
    return s;
  }
  const Shape src = ShapeOf(im.TypeOf(node.inputs(1)));
  if (src != src_expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: expected src to have a size equal to the slice of self. src "
        "size = %s, slice size = %s",
        node.op(), ShapeText(src), ShapeText(src_expected)));
  }
  return absl::OkStatus();
}

Value Clamp(OpBuilder& b, Location l, Value v, int64_t hi) {
  v = b.create<arith::MaxSIOp>(l, v, IndexConst(b, l, 0));
  return b.create<arith::MinSIOp>(l, v, IndexConst(b, l, std::max<int64_t>(hi, 0)));
}

absl::Status ConvertDiagonalScatter(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() != 2) return CheckArity(node, 2, 1);
  const Shape in = ShapeOf(im.TypeOf(node.inputs(0)));
  if (in.size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op diagonal_scatter: %%%s is %s; it needs at least 2 dims",
        node.inputs(0), ShapeText(in)));
  }
  absl::StatusOr<Diagonal> diag = PlanDiagonal(node, in);
  if (!diag.ok()) return diag.status();
  if (absl::Status s = CheckScatterInputs(im, node, diag->shape); !s.ok()) return s;
  const Diagonal dg = *diag;
  const int rank = in.size();
  return EmitViewScatter(
      im, node,
      [&](OpBuilder& b, Location l, ValueRange c) -> Value {
        // On the diagonal: i2 - i1 == offset.
        Value delta = b.create<arith::SubIOp>(l, c[dg.dim2], c[dg.dim1]);
        return b.create<arith::CmpIOp>(l, arith::CmpIPredicate::eq, delta,
                                       IndexConst(b, l, dg.offset));
      },
      [&](OpBuilder& b, Location l, ValueRange c) {
        std::vector<Value> at;
        for (int d = 0; d < rank; ++d) {
          if (d != dg.dim1 && d != dg.dim2) at.push_back(c[d]);
        }
        at.push_back(Clamp(b, l, dg.offset >= 0 ? c[dg.dim1] : c[dg.dim2], dg.length - 1));
        return at;
      });
}

absl::Status ConvertSliceScatter(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() != 2) return CheckArity(node, 2, 1);
  const Shape in = ShapeOf(im.TypeOf(node.inputs(0)));
  if (in.empty()) {
    return absl::InvalidArgumentError(
        "op slice_scatter: slice() cannot be applied to a 0-dim tensor.");
  }
  absl::StatusOr<int> dim = WrapDim(node, IntAttr(node, "dim", 0), in.size());
  if (!dim.ok()) return dim.status();
  const int64_t size = in[*dim];
  const int64_t step = IntAttr(node, "step", 1);
  if (step <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op slice_scatter: slice step must be positive, got %d", step));
  }
  int64_t start = IntAttr(node, "start", 0);
  int64_t end = IntAttr(node, "end", std::numeric_limits<int64_t>::max());
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  const int64_t length = (end - start + step - 1) / step;
  Shape src_expected = in;
  src_expected[*dim] = length;
  if (absl::Status s = CheckScatterInputs(im, node, src_expected); !s.ok()) return s;
  const int d = *dim;
  return EmitViewScatter(
      im, node,
      [&](OpBuilder& b, Location l, ValueRange c) -> Value {
        Value p = b.create<arith::SubIOp>(l, c[d], IndexConst(b, l, start));
        Value inside = b.create<arith::AndIOp>(
            l, b.create<arith::CmpIOp>(l, arith::CmpIPredicate::sge, c[d], IndexConst(b, l, start)),
            b.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, c[d],
                                    IndexConst(b, l, start + (length - 1) * step + 1)));
        if (step == 1) return inside;
        Value on_step = b.create<arith::CmpIOp>(
            l, arith::CmpIPredicate::eq,
            b.create<arith::RemSIOp>(l, p, IndexConst(b, l, step)), IndexConst(b, l, 0));
        return b.create<arith::AndIOp>(l, inside, on_step);
      },
      [&](OpBuilder& b, Location l, ValueRange c) {
        std::vector<Value> at(c.begin(), c.end());
        Value p = b.create<arith::SubIOp>(l, c[d], IndexConst(b, l, start));
        if (step != 1) p = b.create<arith::DivSIOp>(l, p, IndexConst(b, l, step));
        at[d] = Clamp(b, l, p, length - 1);
        return at;
      });
}

absl::Status ConvertSelectScatter(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() != 2) return CheckArity(node, 2, 1);
  const Shape in = ShapeOf(im.TypeOf(node.inputs(0)));
  absl::StatusOr<Selected> selected = SelectedIndex(node, in);
  if (!selected.ok()) return selected.status();
  const int d = selected->dim;
  const int64_t index = selected->index;
  Shape src_expected = in;
  src_expected.erase(src_expected.begin() + d);
  if (absl::Status s = CheckScatterInputs(im, node, src_expected); !s.ok()) return s;
  return EmitViewScatter(
      im, node,
      [&](OpBuilder& b, Location l, ValueRange c) -> Value {
        return b.create<arith::CmpIOp>(l, arith::CmpIPredicate::eq, c[d],
                                       IndexConst(b, l, index));
      },
      [&](OpBuilder&, Location, ValueRange c) {
        std::vector<Value> at(c.begin(), c.end());
        at.erase(at.begin() + d);
        return at;
      });
}

// --- as_strided. ----------------------------------------------------------------------

struct StridedBox {
  Shape size;
  std::vector<int64_t> stride;
  int64_t offset = 0;
};

absl::StatusOr<StridedBox> ReadStridedBox(const ir::Node& node, int64_t n) {
  StridedBox box;
  absl::StatusOr<std::vector<int64_t>> size = IntListAttr(node, "size");
  if (!size.ok()) return size.status();
  absl::StatusOr<std::vector<int64_t>> stride = IntListAttr(node, "stride");
  if (!stride.ok()) return stride.status();
  box.size = *size;
  box.stride = *stride;
  box.offset = IntAttr(node, "storage_offset", 0);
  if (box.size.size() != box.stride.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: mismatch in length of strides and shape", node.op()));
  }
  int64_t last = box.offset;
  bool empty = false;
  for (size_t d = 0; d < box.size.size(); ++d) {
    if (box.size[d] < 0 || box.stride[d] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: as_strided sizes and strides must be non-negative", node.op()));
    }
    empty = empty || box.size[d] == 0;
    last += std::max<int64_t>(box.size[d] - 1, 0) * box.stride[d];
  }
  if (box.offset < 0 || (!empty && last >= n)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: the view (size %s, stride %s, storage_offset %d) reaches element "
        "%d of an input of %d elements; here as_strided addresses the input's "
        "own elements in row-major order, so the view must lie inside it",
        node.op(), ShapeText(box.size), ShapeText(box.stride), box.offset, last, n));
  }
  return box;
}

std::string Joined(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// as_strided(x): strided_view of x flattened (ops/strided_box_ops.cc).
absl::Status ConvertAsStrided(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  const int64_t n = NumElements(ShapeOf(im.TypeOf(x)));
  absl::StatusOr<StridedBox> box = ReadStridedBox(node, n);
  if (!box.ok()) return box.status();
  if (absl::Status s = CheckOutputShape(node, box->size); !s.ok()) return s;
  if (NumElements(box->size) == 0 || n == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  ir::Value flat;
  flat.set_name(node.outputs(0).name() + "/flat");
  flat.mutable_type()->set_dtype(im.TypeOf(x).dtype());
  flat.mutable_type()->add_shape(n);
  im.Define(flat, Reshape(im, im.ValueOf(x), {n}));
  ir::Node view;
  view.set_op("strided_view");
  view.add_inputs(flat.name());
  *view.add_outputs() = node.outputs(0);
  ir::Attribute sizes, strides, offset;
  sizes.set_s(Joined(box->size));
  strides.set_s(Joined(box->stride));
  offset.set_i(box->offset);
  (*view.mutable_attrs())["sizes"] = sizes;
  (*view.mutable_attrs())["strides"] = strides;
  (*view.mutable_attrs())["offset"] = offset;
  return im.EmitNode(view);
}

// as_strided_scatter(x, src): x with its as_strided view set to src; the
// view may overlap itself, so a loop over src writes in row-major order.
absl::Status ConvertAsStridedScatter(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const std::string &x = node.inputs(0), &src = node.inputs(1);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (absl::Status s = CheckSameDType(im, node, src); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(x));
  if (absl::Status s = CheckOutputShape(node, in); !s.ok()) return s;
  absl::StatusOr<StridedBox> box = ReadStridedBox(node, NumElements(in));
  if (!box.ok()) return box.status();
  if (ShapeOf(im.TypeOf(src)) != box->size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op as_strided_scatter: expected src to have the view's shape %s, got %s",
        ShapeText(box->size), ShapeText(ShapeOf(im.TypeOf(src)))));
  }
  if (NumElements(in) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  Value dest = CopyOf(im, im.ValueOf(x));
  if (NumElements(box->size) == 0) {
    im.Define(node.outputs(0), dest);
    return absl::OkStatus();
  }
  std::vector<int64_t> x_strides(in.size(), 1);
  for (int d = static_cast<int>(in.size()) - 2; d >= 0; --d) {
    x_strides[d] = x_strides[d + 1] * in[d + 1];
  }
  const StridedBox bx = *box;
  Value out = SerialLoop(
      im, bx.size, ValueRange{dest},
      [&](OpBuilder& b, Location l, ValueRange c, ValueRange iter) -> std::vector<Value> {
        Value flat = IndexConst(b, l, bx.offset);
        for (size_t d = 0; d < c.size(); ++d) {
          flat = b.create<arith::AddIOp>(
              l, flat, b.create<arith::MulIOp>(l, c[d], IndexConst(b, l, bx.stride[d])));
        }
        std::vector<Value> at;
        for (size_t d = 0; d < in.size(); ++d) {
          Value q = b.create<arith::DivUIOp>(l, flat, IndexConst(b, l, x_strides[d]));
          at.push_back(b.create<arith::RemUIOp>(l, q, IndexConst(b, l, in[d])));
        }
        Value v = b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(src), c);
        return {b.create<mlir::tensor::InsertOp>(l, v, iter[0], at).getResult()};
      })[0];
  im.Define(node.outputs(0), out);
  return absl::OkStatus();
}

// --- View copies. ------------------------------------------------------------------------

// op_copy(...): the view op itself.
absl::Status ConvertViewCopy(GraphImporter& im, const ir::Node& node) {
  ir::Node view = node;
  view.set_op(node.op().substr(0, node.op().size() - std::string("_copy").size()));
  return im.EmitNode(view);
}

// unbind_copy(x) "dim": output i is select(x, dim, i).
absl::Status ConvertUnbind(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() != 1) return CheckArity(node, 1, 1);
  const Shape in = ShapeOf(im.TypeOf(node.inputs(0)));
  if (in.empty()) {
    return absl::InvalidArgumentError(
        "op unbind: Dimension specified as 0 but tensor has no dimensions");
  }
  absl::StatusOr<int> dim = WrapDim(node, IntAttr(node, "dim", 0), in.size());
  if (!dim.ok()) return dim.status();
  if (node.outputs_size() != in[*dim]) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %%%s has %d entries along dim %d but the node has %d outputs",
        node.op(), node.inputs(0), in[*dim], *dim, node.outputs_size()));
  }
  for (int i = 0; i < node.outputs_size(); ++i) {
    ir::Node select;
    select.set_op("select");
    select.add_inputs(node.inputs(0));
    *select.add_outputs() = node.outputs(i);
    ir::Attribute d, index;
    d.set_i(*dim);
    index.set_i(i);
    (*select.mutable_attrs())["dim"] = d;
    (*select.mutable_attrs())["index"] = index;
    if (absl::Status s = im.EmitNode(select); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterViewScatterOps(OpConverterTable& table) {
  table["diagonal"] = &ConvertDiagonal;
  table["diagonal_scatter"] = &ConvertDiagonalScatter;
  table["slice_scatter"] = &ConvertSliceScatter;
  table["select_scatter"] = &ConvertSelectScatter;
  table["as_strided"] = &ConvertAsStrided;
  table["as_strided_scatter"] = &ConvertAsStridedScatter;
  for (const char* op :
       {"view_copy", "permute_copy", "narrow_copy", "expand_copy", "squeeze_copy",
        "unsqueeze_copy", "transpose_copy", "t_copy", "slice_copy", "select_copy",
        "alias_copy", "detach_copy", "diagonal_copy", "as_strided_copy",
        "unfold_copy"}) {
    table[op] = &ConvertViewCopy;
  }
  table["unbind"] = &ConvertUnbind;
  table["unbind_copy"] = &ConvertUnbind;
}

}  // namespace rbln::compiler

// Advanced indexing with static shapes: index (x[i, :, j]), index_put
// (x[i, j] = v), masked_scatter and nonzero_static.
//
// index is one linalg.generic over the output: the index tensors are its
// inputs (broadcast to their common shape through the input maps), the
// body reads x with tensor.extract at the range-checked indices; negative
// indices count from the end, as in PyTorch (SPEC P8). The others update a
// copy of x in an scf.for nest over their iteration space, in row-major
// order as ATen's serial CPU kernels do: repeated index_put targets take
// the last value (or sum in order, rounding to x's dtype after every step,
// with accumulate); masked_scatter takes source elements in order of the
// mask's true elements.
//
// IR conventions (attributes named as the ATen schema's arguments):
//   index(x, i0, i1, ...) "indices": a Tensor?[] list; the int list marks
//     with 1 the dims of x that have an index tensor (inputs after x, in
//     order) and 0 the ones taken whole ("0,1" is x[:, i0]); without it
//     the index tensors are for dims 0, 1, ... . Index tensors are int32 or
//     int64 and broadcast together to B. Indexed dims that are adjacent
//     are replaced by B in place; otherwise B comes first, then the other
//     dims (NumPy's rule). Boolean masks give data-dependent shapes and are
//     rejected (they are host ops, SPEC J6).
//   index_put(x, i0, ..., values) "indices", "accumulate" = false: values
//     (x's dtype) broadcast to the shape x[indices] has.
//   masked_scatter(x, mask, source): out has the broadcast shape of x and
//     mask; true elements take the next element of source (flattened).
//   nonzero_static(x) "size", "fill_value" = -1: int64 [size, x.dim()], the
//     coordinates of the first `size` non-zero elements of x in row-major
//     order, then rows of fill_value.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/movement_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"
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

// NumPy broadcasting of `shapes` (right-aligned); false if they do not.
bool BroadcastShapes(const std::vector<Shape>& shapes, Shape* out) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape result(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& r = result[rank - s.size() + i];
      if (s[i] == r || s[i] == 1) continue;
      if (r != 1) return false;
      r = s[i];
    }
  }
  *out = result;
  return true;
}

// The index tensors of an index/index_put node and where the result's dims
// come from.
struct IndexPlan {
  std::vector<std::string> tensors;  // one per indexed dim
  std::vector<int> dims;             // the dims of x they index
  Shape broadcast;                   // their common shape B
  int broadcast_at = 0;              // the result dim where B starts
  Shape result;                      // x[indices]'s shape
  // For every dim of x that is taken whole, the result dim it becomes.
  std::vector<int> whole_dim_at;
};

absl::StatusOr<IndexPlan> PlanIndex(GraphImporter& im, const ir::Node& node,
                                    int num_index_inputs) {
  const std::string& x = node.inputs(0);
  const Shape in = ShapeOf(im.TypeOf(x));
  IndexPlan plan;
  std::vector<int64_t> present;
  if (HasAttr(node, "indices")) {
    absl::StatusOr<std::vector<int64_t>> mask = IntListAttr(node, "indices");
    if (!mask.ok()) return mask.status();
    present = *mask;
  } else {
    present.assign(num_index_inputs, 1);
  }
  int next = 1;
  for (size_t d = 0; d < present.size(); ++d) {
    if (!present[d]) continue;
    if (next > num_index_inputs) break;
    plan.tensors.push_back(node.inputs(next++));
    plan.dims.push_back(d);
  }
  if (next - 1 != num_index_inputs ||
      static_cast<int>(plan.tensors.size()) != num_index_inputs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: attr indices=[%s] marks %d indexed dims but the node has %d "
        "index tensors",
        node.op(), absl::StrJoin(present, ","), plan.tensors.size(),
        num_index_inputs));
  }
  if (present.size() > in.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: too many indices for tensor of dimension %d (got %d)",
        node.op(), in.size(), present.size()));
  }
  std::vector<Shape> shapes;
  for (const std::string& t : plan.tensors) {
    const ir::DType dtype = im.TypeOf(t).dtype();
    if (dtype == ir::BOOL) {
      return absl::UnimplementedError(absl::StrFormat(
          "The following operators are not implemented: ['%s' with a boolean "
          "mask index: its result depends on the mask's values (a host op); "
          "index with integer tensors or use torch.where/masked_fill]",
          node.op()));
    }
    if (absl::Status s = CheckIndexDType(im, node, t); !s.ok()) return s;
    shapes.push_back(ShapeOf(im.TypeOf(t)));
  }
  if (!BroadcastShapes(shapes, &plan.broadcast)) {
    std::vector<std::string> texts;
    for (const Shape& s : shapes) texts.push_back(ShapeText(s));
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: shape mismatch: indexing tensors could not be broadcast "
        "together with shapes %s",
        node.op(), absl::StrJoin(texts, ", ")));
  }
  bool adjacent = true;
  for (size_t i = 1; i < plan.dims.size(); ++i) {
    adjacent = adjacent && plan.dims[i] == plan.dims[i - 1] + 1;
  }
  plan.whole_dim_at.assign(in.size(), -1);
  if (plan.dims.empty()) {
    plan.result = in;
    for (size_t d = 0; d < in.size(); ++d) plan.whole_dim_at[d] = d;
    return plan;
  }
  plan.broadcast_at = adjacent ? plan.dims.front() : 0;
  for (int d = 0; d < plan.broadcast_at; ++d) {
    plan.whole_dim_at[d] = d;
    plan.result.push_back(in[d]);
  }
  plan.result.insert(plan.result.end(), plan.broadcast.begin(), plan.broadcast.end());
  std::vector<bool> indexed(in.size(), false);
  for (int d : plan.dims) indexed[d] = true;
  for (size_t d = plan.broadcast_at; d < in.size(); ++d) {
    if (indexed[d]) continue;
    plan.whole_dim_at[d] = plan.result.size();
    plan.result.push_back(in[d]);
  }
  return plan;
}

// The map reading index tensor `t` (broadcast to B) over a loop nest of
// `rank` dims whose dims [broadcast_at, broadcast_at + |B|) are B.
AffineMap IndexTensorMap(GraphImporter& im, const IndexPlan& plan,
                         const Shape& t, int rank) {
  std::vector<AffineExpr> exprs;
  const int b = plan.broadcast.size();
  for (size_t j = 0; j < t.size(); ++j) {
    const int bdim = b - static_cast<int>(t.size()) + static_cast<int>(j);
    if (t[j] == 1 && plan.broadcast[bdim] != 1) {
      exprs.push_back(mlir::getAffineConstantExpr(0, im.context()));
    } else {
      exprs.push_back(mlir::getAffineDimExpr(plan.broadcast_at + bdim, im.context()));
    }
  }
  return AffineMap::get(rank, 0, exprs, im.context());
}

// The coordinates of x for result coordinates `coords`, given the index
// tensors' elements at them (checked, wrapped).
std::vector<Value> SourceCoords(GraphImporter& im, OpBuilder& b,
                                const IndexPlan& plan, const Shape& in,
                                ValueRange coords, ValueRange index_elements) {
  std::vector<Value> at(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    if (plan.whole_dim_at[d] >= 0) at[d] = coords[plan.whole_dim_at[d]];
  }
  for (size_t i = 0; i < plan.dims.size(); ++i) {
    at[plan.dims[i]] =
        im.CheckedIndex(b, index_elements[i], in[plan.dims[i]], /*wrap_negative=*/true);
  }
  return at;
}

absl::Status CheckIndexable(const ir::Node& node, const IndexPlan& plan,
                            const Shape& in) {
  if (NumElements(plan.result) == 0) return absl::OkStatus();
  for (int d : plan.dims) {
    if (in[d] == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: index is out of bounds for dimension %d with size 0",
          node.op(), d));
    }
  }
  return absl::OkStatus();
}

// index(x, indices...): out[r] = x[source coordinates of r].
absl::Status ConvertIndex(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() < 1 || node.outputs_size() != 1) {
    return CheckArity(node, 1, 1);
  }
  const std::string& x = node.inputs(0);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  absl::StatusOr<IndexPlan> plan = PlanIndex(im, node, node.inputs_size() - 1);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = CheckOutputShape(node, plan->result); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(x));
  if (absl::Status s = CheckIndexable(node, *plan, in); !s.ok()) return s;
  if (NumElements(plan->result) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  const int rank = plan->result.size();
  std::vector<Value> inputs;
  std::vector<AffineMap> maps;
  for (const std::string& t : plan->tensors) {
    inputs.push_back(im.ValueOf(t));
    maps.push_back(IndexTensorMap(im, *plan, ShapeOf(im.TypeOf(t)), rank));
  }
  im.Define(node.outputs(0), OutputGeneric(
      im, node, inputs, maps, [&](OpBuilder& b, Location l, ValueRange e) {
        std::vector<Value> coords = LoopIndices(b, l, rank);
        return b
            .create<mlir::tensor::ExtractOp>(
                l, im.ValueOf(x), SourceCoords(im, b, *plan, in, coords, e))
            .getResult();
      }));
  return absl::OkStatus();
}

// `old` + `v` in x's dtype (bool: or), each a storage element.
Value AccumulateElement(GraphImporter& im, OpBuilder& b, Location l, Value old,
                        Value v, ir::DType t) {
  Value o = im.ToCompute(b, old, t), n = im.ToCompute(b, v, t);
  Value sum = IsFloat(t)      ? b.create<arith::AddFOp>(l, o, n).getResult()
              : t == ir::BOOL ? b.create<arith::OrIOp>(l, o, n).getResult()
                              : b.create<arith::AddIOp>(l, o, n).getResult();
  return im.FromCompute(b, sum, t);
}

// index_put(x, mask, values) with one boolean mask over dims [k, k + r) of
// x: x[c] = values[...] (+= with accumulate) where mask[c[k:k+r]] is true.
// The masked dims become one dim of data-dependent length in the result,
// so values must not vary along it (a Scalar, or a row broadcast over the
// selected elements: x[mask] = v, x[mask] += v).
absl::Status ConvertMaskedIndexPut(GraphImporter& im, const ir::Node& node) {
  const std::string& x = node.inputs(0);
  const std::string& mask = node.inputs(1);
  const std::string& values = node.inputs(2);
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape in = ShapeOf(im.TypeOf(x)), ms = ShapeOf(im.TypeOf(mask)),
              vals = ShapeOf(im.TypeOf(values));
  int k = 0;
  if (HasAttr(node, "indices")) {
    absl::StatusOr<std::vector<int64_t>> present = IntListAttr(node, "indices");
    if (!present.ok()) return present.status();
    while (k < static_cast<int>(present->size()) && !(*present)[k]) ++k;
  }
  const int r = ms.size();
  if (k + r > static_cast<int>(in.size()) ||
      !std::equal(ms.begin(), ms.end(), in.begin() + k)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op index_put: The shape of the mask %s at index %d does not match "
        "the shape of the indexed tensor %s",
        ShapeText(ms), k, ShapeText(in)));
  }
  // The result's dims: x's dims before k, the selection, the dims after.
  const int after = static_cast<int>(in.size()) - k - r;
  const int result_rank = k + 1 + after;
  // Which dim of x result dim `rd` is (-1: the selection).
  auto x_dim = [&](int rd) { return rd < k ? rd : rd == k ? -1 : rd + r - 1; };
  bool broadcasts = static_cast<int>(vals.size()) <= result_rank;
  for (size_t j = 0; broadcasts && j < vals.size(); ++j) {
    const int xd = x_dim(result_rank - static_cast<int>(vals.size()) + static_cast<int>(j));
    broadcasts = xd < 0 || vals[j] == 1 || vals[j] == in[xd];
  }
  if (!broadcasts) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op index_put: shape mismatch: value tensor of shape %s cannot be "
        "broadcast to the result of indexing %s with a mask over dims "
        "[%d, %d)",
        ShapeText(vals), ShapeText(in), k, k + r));
  }
  if (static_cast<int>(vals.size()) >= after + 1 &&
      vals[vals.size() - after - 1] != 1) {
    return absl::UnimplementedError(absl::StrFormat(
        "The following operators are not implemented: ['index_put' with a "
        "boolean mask and values %s that vary along the selected elements: "
        "how many there are depends on the mask's values; use "
        "torch.where(mask, values, x) or masked_scatter]",
        ShapeText(vals)));
  }
  // values' coordinates for x coordinates `c` (right-aligned broadcast
  // over the result's dims).
  auto value_coords = [&](OpBuilder& b, Location l, ValueRange c) {
    std::vector<Value> vc;
    for (size_t j = 0; j < vals.size(); ++j) {
      const int xd = x_dim(result_rank - static_cast<int>(vals.size()) + static_cast<int>(j));
      vc.push_back(vals[j] == 1 || xd < 0 ? IndexConst(b, l, 0) : c[xd]);
    }
    return vc;
  };
  if (NumElements(in) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  const bool accumulate = BoolAttr(node, "accumulate", false);
  Value dest = CopyOf(im, im.ValueOf(x));
  Value out = SerialLoop(
      im, in, ValueRange{dest},
      [&](OpBuilder& b, Location l, ValueRange c,
          ValueRange iter) -> std::vector<Value> {
        std::vector<Value> mc(c.begin() + k, c.begin() + k + r);
        Value m = b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(mask), mc);
        Value take = b.create<arith::TruncIOp>(l, b.getI1Type(), m);
        Value v = b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(values),
                                                    value_coords(b, l, c));
        Value old = b.create<mlir::tensor::ExtractOp>(l, iter[0], c);
        if (accumulate) v = AccumulateElement(im, b, l, old, v, t);
        return {b.create<mlir::tensor::InsertOp>(
                     l, b.create<arith::SelectOp>(l, take, v, old), iter[0], c)
                    .getResult()};
      })[0];
  im.Define(node.outputs(0), out);
  return absl::OkStatus();
}

// index_put(x, indices..., values): a copy of x with x[indices] = values
// (+= with accumulate), in row-major order of the indexed result.
absl::Status ConvertIndexPut(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() < 2 || node.outputs_size() != 1) {
    return CheckArity(node, 2, 1);
  }
  if (node.inputs_size() == 3 && im.TypeOf(node.inputs(1)).dtype() == ir::BOOL) {
    if (absl::Status s = CheckSameDType(im, node, node.inputs(0)); !s.ok()) return s;
    if (absl::Status s = CheckSameDType(im, node, node.inputs(2)); !s.ok()) return s;
    if (absl::Status s = CheckOutputShape(node, ShapeOf(im.TypeOf(node.inputs(0))));
        !s.ok()) {
      return s;
    }
    return ConvertMaskedIndexPut(im, node);
  }
  const std::string& x = node.inputs(0);
  const std::string& values = node.inputs(node.inputs_size() - 1);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (absl::Status s = CheckSameDType(im, node, values); !s.ok()) return s;
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape in = ShapeOf(im.TypeOf(x)), vals = ShapeOf(im.TypeOf(values));
  if (absl::Status s = CheckOutputShape(node, in); !s.ok()) return s;
  absl::StatusOr<IndexPlan> plan = PlanIndex(im, node, node.inputs_size() - 2);
  if (!plan.ok()) return plan.status();
  Shape common;
  if (!BroadcastShapes({plan->result, vals}, &common) || common != plan->result) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op index_put: shape mismatch: value tensor of shape %s cannot be "
        "broadcast to indexing result of shape %s",
        ShapeText(vals), ShapeText(plan->result)));
  }
  if (absl::Status s = CheckIndexable(node, *plan, in); !s.ok()) return s;
  if (NumElements(in) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  if (NumElements(plan->result) == 0) {
    im.Define(node.outputs(0), CopyOf(im, im.ValueOf(x)));
    return absl::OkStatus();
  }
  const bool accumulate = BoolAttr(node, "accumulate", false);
  const int rank = plan->result.size();
  // values[r] for result coordinates r (right-aligned broadcast).
  auto value_coords = [&](OpBuilder& b, Location l, ValueRange r) {
    std::vector<Value> c;
    for (size_t j = 0; j < vals.size(); ++j) {
      const int rd = rank - static_cast<int>(vals.size()) + static_cast<int>(j);
      c.push_back(vals[j] == 1 ? IndexConst(b, l, 0) : r[rd]);
    }
    return c;
  };
  Value dest = CopyOf(im, im.ValueOf(x));
  Value out = SerialLoop(
      im, plan->result, ValueRange{dest},
      [&](OpBuilder& b, Location l, ValueRange r,
          ValueRange iter) -> std::vector<Value> {
        std::vector<Value> index_elements;
        for (const std::string& name : plan->tensors) {
          const Shape ts = ShapeOf(im.TypeOf(name));
          std::vector<Value> c;
          const int bsize = plan->broadcast.size();
          for (size_t j = 0; j < ts.size(); ++j) {
            const int bdim = bsize - static_cast<int>(ts.size()) + static_cast<int>(j);
            c.push_back(ts[j] == 1 ? IndexConst(b, l, 0)
                                   : r[plan->broadcast_at + bdim]);
          }
          index_elements.push_back(
              b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(name), c));
        }
        std::vector<Value> at = SourceCoords(im, b, *plan, in, r, index_elements);
        Value v = b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(values),
                                                    value_coords(b, l, r));
        if (accumulate) {
          Value old = b.create<mlir::tensor::ExtractOp>(l, iter[0], at);
          v = AccumulateElement(im, b, l, old, v, t);
        }
        return {b.create<mlir::tensor::InsertOp>(l, v, iter[0], at).getResult()};
      })[0];
  im.Define(node.outputs(0), out);
  return absl::OkStatus();
}

// masked_scatter(x, mask, source): row-major over the broadcast shape, the
// k-th true element of mask takes source.flatten()[k] (checked against the
// source's size, SPEC P8).
absl::Status ConvertMaskedScatter(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  const std::string &x = node.inputs(0), &mask = node.inputs(1),
                    &source = node.inputs(2);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (absl::Status s = CheckSameDType(im, node, source); !s.ok()) return s;
  if (im.TypeOf(mask).dtype() != ir::BOOL) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op masked_scatter: mask %%%s must be bool, got %s", mask,
        ir::TypeToText(im.TypeOf(mask))));
  }
  const Shape xs = ShapeOf(im.TypeOf(x)), ms = ShapeOf(im.TypeOf(mask));
  Shape out;
  if (!BroadcastShapes({xs, ms}, &out)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op masked_scatter: the shapes of self %s and mask %s do not broadcast",
        ShapeText(xs), ShapeText(ms)));
  }
  if (absl::Status s = CheckOutputShape(node, out); !s.ok()) return s;
  if (NumElements(out) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  const int rank = out.size();
  auto broadcast_map = [&](const Shape& s) {
    std::vector<AffineExpr> exprs;
    for (size_t j = 0; j < s.size(); ++j) {
      const int od = rank - static_cast<int>(s.size()) + static_cast<int>(j);
      exprs.push_back(s[j] == out[od] ? mlir::getAffineDimExpr(od, im.context())
                                      : mlir::getAffineConstantExpr(0, im.context()));
    }
    return AffineMap::get(rank, 0, exprs, im.context());
  };
  // x broadcast to the output: the tensor the loop updates.
  Value dest = xs == out
                   ? CopyOf(im, im.ValueOf(x))
                   : OutputGeneric(im, node, im.ValueOf(x), {broadcast_map(xs)},
                                   [](OpBuilder&, Location, ValueRange e) { return e[0]; });
  OpBuilder& builder = im.builder();
  const int64_t n = NumElements(ShapeOf(im.TypeOf(source)));
  // An empty source may take no element: it reads a one-element stand-in,
  // and a true mask element reports index 1 of that one-element range.
  Value flat_source =
      n > 0 ? Reshape(im, im.ValueOf(source), {n})
            : builder
                  .create<mlir::linalg::FillOp>(
                      im.loc(),
                      ValueRange{ZeroOf(builder, im.loc(), im.StorageType(OutType(node).dtype()))},
                      ValueRange{builder.create<mlir::tensor::EmptyOp>(
                          im.loc(), Shape{1}, im.StorageType(OutType(node).dtype()))})
                  .getResult(0);
  Value zero = builder.create<arith::ConstantIntOp>(im.loc(), 0, 64);
  std::vector<Value> results = SerialLoop(
      im, out, ValueRange{dest, zero},
      [&](OpBuilder& b, Location l, ValueRange r,
          ValueRange iter) -> std::vector<Value> {
        std::vector<Value> mc;
        for (size_t j = 0; j < ms.size(); ++j) {
          const int od = rank - static_cast<int>(ms.size()) + static_cast<int>(j);
          mc.push_back(ms[j] == out[od] ? r[od] : IndexConst(b, l, 0));
        }
        Value m = b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(mask), mc);
        Value take = b.create<arith::TruncIOp>(l, b.getI1Type(), m);
        Value count = iter[1];
        // Only a true element reads the source, so a source that is just
        // long enough is never read past its end.
        Value k = n > 0 ? b.create<arith::SelectOp>(l, take, count,
                                                    b.create<arith::ConstantIntOp>(l, 0, 64))
                              .getResult()
                        : b.create<arith::ExtUIOp>(l, b.getI64Type(), take).getResult();
        Value pos = im.CheckedIndex(b, k, std::max<int64_t>(n, 1));
        Value v = b.create<mlir::tensor::ExtractOp>(l, flat_source, ValueRange{pos});
        Value old = b.create<mlir::tensor::ExtractOp>(l, iter[0], r);
        Value updated = b.create<mlir::tensor::InsertOp>(
            l, b.create<arith::SelectOp>(l, take, v, old), iter[0], r);
        Value next = b.create<arith::AddIOp>(
            l, count, b.create<arith::ExtUIOp>(l, b.getI64Type(), take));
        return {updated, next};
      });
  im.Define(node.outputs(0), results[0]);
  return absl::OkStatus();
}

// nonzero_static(x) "size", "fill_value": a [size, rank] int64 table of
// the coordinates of x's first `size` non-zero elements, then fill_value.
absl::Status ConvertNonzeroStatic(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape in = ShapeOf(im.TypeOf(x));
  const int64_t size = IntAttr(node, "size", -1);
  if (size < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op nonzero_static: 'size' must be a non-negative int attr, got %d", size));
  }
  const int rank = in.size();
  if (OutType(node).dtype() != ir::INT64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op nonzero_static: output %%%s must be int64, got %s",
        node.outputs(0).name(), ir::TypeToText(OutType(node))));
  }
  if (absl::Status s = CheckOutputShape(node, {size, rank}); !s.ok()) return s;
  if (size == 0 || rank == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  OpBuilder& builder = im.builder();
  Location loc = im.loc();
  Value init = builder.create<mlir::tensor::EmptyOp>(
      loc, Shape{size, rank}, builder.getI64Type());
  Value fill = builder.create<arith::ConstantIntOp>(loc, IntAttr(node, "fill_value", -1), 64);
  Value table = builder.create<mlir::linalg::FillOp>(loc, ValueRange{fill}, ValueRange{init})
                    .getResult(0);
  if (NumElements(in) == 0) {
    im.Define(node.outputs(0), table);
    return absl::OkStatus();
  }
  Value zero = builder.create<arith::ConstantIndexOp>(loc, 0);
  std::vector<Value> results = SerialLoop(
      im, in, ValueRange{table, zero},
      [&](OpBuilder& b, Location l, ValueRange r,
          ValueRange iter) -> std::vector<Value> {
        Value e = im.ToCompute(b, b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(x), r), t);
        Value nonzero =
            IsFloat(t)
                ? b.create<arith::CmpFOp>(l, arith::CmpFPredicate::UNE, e,
                                          b.create<arith::ConstantOp>(l, b.getF32FloatAttr(0)))
                      .getResult()
                : b.create<arith::CmpIOp>(
                       l, arith::CmpIPredicate::ne, e,
                       b.create<arith::ConstantOp>(l, b.getIntegerAttr(e.getType(), 0)))
                      .getResult();
        Value room = b.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, iter[1],
                                             IndexConst(b, l, size));
        Value write = b.create<arith::AndIOp>(l, nonzero, room);
        auto branch = b.create<mlir::scf::IfOp>(
            l, write,
            [&](OpBuilder& tb, Location tl) {
              Value row = iter[0];
              for (int d = 0; d < rank; ++d) {
                Value coord = tb.create<arith::IndexCastOp>(tl, tb.getI64Type(), r[d]);
                row = tb.create<mlir::tensor::InsertOp>(
                    tl, coord, row, ValueRange{iter[1], IndexConst(tb, tl, d)});
              }
              tb.create<mlir::scf::YieldOp>(tl, row);
            },
            [&](OpBuilder& eb, Location el) {
              eb.create<mlir::scf::YieldOp>(el, iter[0]);
            });
        Value next = b.create<arith::AddIOp>(
            l, iter[1], b.create<arith::IndexCastOp>(
                            l, b.getIndexType(),
                            b.create<arith::ExtUIOp>(l, b.getI64Type(), write)));
        return {branch.getResult(0), next};
      });
  im.Define(node.outputs(0), results[0]);
  return absl::OkStatus();
}

}  // namespace

void RegisterAdvancedIndexOps(OpConverterTable& table) {
  table["index"] = &ConvertIndex;
  table["_unsafe_index"] = &ConvertIndex;
  table["index_put"] = &ConvertIndexPut;
  table["_unsafe_index_put"] = &ConvertIndexPut;
  table["masked_scatter"] = &ConvertMaskedScatter;
  table["nonzero_static"] = &ConvertNonzeroStatic;
}

}  // namespace rbln::compiler

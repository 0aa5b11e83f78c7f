// Gathers and scatters along one dim: torch.gather, Tensor.scatter* and
// index_add/index_reduce, and put (a scatter into the flattened input).
//
// A gather is one linalg.generic over the output whose body reads the
// input with tensor.extract at a range-checked index (SPEC P8). A scatter
// updates a copy of the input in an scf.for nest over the index (one-shot
// bufferization does it in place in the output buffer), in the order
// ATen's CPU kernels visit the elements, so repeated indices combine in the
// same order: the last write wins for plain scatters; reductions combine
// in index order. Where ATen accumulates a half-type result in float
// (scatter_add, scatter_reduce: `opmath` buffer, rounded once at the end)
// the loop works on a float32 copy; where it rounds after every step
// (index_add, index_reduce, put with accumulate) the loop does too.
// Indices are not wrapped (negative is out of range) except put's, which
// count from the end as in PyTorch.
//
// IR conventions (attributes named as the ATen schema's arguments):
//   gather(x, index) "dim": out has index's shape and x's dtype;
//     index.size(d) <= x.size(d) for d != dim.
//   scatter(x, index, src) "dim" ["reduce" = "add" | "multiply"]
//   scatter(x, index) "dim", "value" ["reduce"]    (the Scalar forms)
//   scatter_add(x, index, src) "dim"
//   scatter_reduce(x, index, src) "dim", "reduce" (sum | prod | mean | amax
//     | amin), "include_self" = true
//     index.size(d) <= src.size(d) for all d, <= x.size(d) for d != dim.
//   index_add(x, index[k], source) "dim", "alpha" = 1
//   index_reduce(x, index[k], source) "dim", "reduce" (prod | mean | amax |
//     amin), "include_self" = true
//   put(x, index, source) "accumulate" = false: index and source have the
//     same number of elements; x is addressed as flattened.
// The output has x's shape and dtype; src/source have x's dtype.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/movement_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;

std::string StrAttr(const ir::Node& node, const std::string& name,
                    const std::string& dflt) {
  auto it = node.attrs().find(name);
  if (it == node.attrs().end()) return dflt;
  return it->second.s();
}

// --- Element combination. -------------------------------------------------------

enum class Combine { kAssign, kAdd, kMul, kMax, kMin, kMean };

// The node's "reduce" attribute in its op's vocabulary: scatter's
// (add, multiply), scatter_reduce's (sum, prod, mean, amax, amin) or
// index_reduce's (prod, mean, amax, amin).
absl::StatusOr<Combine> ParseReduce(const ir::Node& node) {
  std::vector<std::pair<std::string, Combine>> names;
  if (node.op() == "scatter") {
    names = {{"add", Combine::kAdd}, {"multiply", Combine::kMul}};
  } else {
    if (node.op() == "scatter_reduce") names.push_back({"sum", Combine::kAdd});
    names.insert(names.end(), {{"prod", Combine::kMul},
                               {"mean", Combine::kMean},
                               {"amax", Combine::kMax},
                               {"amin", Combine::kMin}});
  }
  const std::string reduce = StrAttr(node, "reduce", "");
  std::vector<std::string> known;
  for (const auto& [name, combine] : names) {
    if (reduce == name) return combine;
    known.push_back(name);
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "op %s: reduce argument must be one of %s, got '%s'", node.op(),
      absl::StrJoin(known, ", "), reduce));
}

// `old` combined with `v`, both in the compute type of `t` (bool as i8 0/1).
// max/min propagate NaN from either side, as ATen's std::max/std::min on a
// NaN `old` and its explicit test of `v` do.
Value CombineElements(OpBuilder& b, Location l, Combine c, ir::DType t,
                      Value old, Value v) {
  const bool is_float = IsFloat(t);
  switch (c) {
    case Combine::kAssign:
      return v;
    case Combine::kAdd:
    case Combine::kMean:
      if (is_float) return b.create<arith::AddFOp>(l, old, v);
      if (t == ir::BOOL) return b.create<arith::OrIOp>(l, old, v);
      return b.create<arith::AddIOp>(l, old, v);
    case Combine::kMul:
      if (is_float) return b.create<arith::MulFOp>(l, old, v);
      if (t == ir::BOOL) return b.create<arith::AndIOp>(l, old, v);
      return b.create<arith::MulIOp>(l, old, v);
    case Combine::kMax:
    case Combine::kMin: {
      const bool max = c == Combine::kMax;
      if (!is_float) {
        if (t == ir::BOOL) {
          return max ? b.create<arith::MaxUIOp>(l, old, v).getResult()
                     : b.create<arith::MinUIOp>(l, old, v).getResult();
        }
        return max ? b.create<arith::MaxSIOp>(l, old, v).getResult()
                   : b.create<arith::MinSIOp>(l, old, v).getResult();
      }
      Value v_nan = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::UNO, v, v);
      Value take_v = max ? b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OLT, old, v)
                         : b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OLT, v, old);
      take_v = b.create<arith::OrIOp>(l, v_nan, take_v);
      return b.create<arith::SelectOp>(l, take_v, v, old);
    }
  }
  return v;
}

// The identity of `c` in the compute type of `t` (what include_self=false
// writes first): 0, 1, -inf/lowest, +inf/max. lowest/max are t's own (the
// narrow integers' too: i32's max stored into int8 would be -1).
std::pair<int64_t, int64_t> IntegerRange(ir::DType t) {
  switch (t) {
    case ir::INT8:
      return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case ir::UINT8:
      return {0, std::numeric_limits<uint8_t>::max()};
    case ir::INT16:
      return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    case ir::INT32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

Value Identity(GraphImporter& im, OpBuilder& b, Combine c, ir::DType t) {
  Type type = im.ComputeType(t);
  Location l = im.loc();
  if (c == Combine::kMul) return im.ComputeConstant(b, 1, t);
  if (c != Combine::kMax && c != Combine::kMin) return im.ComputeConstant(b, 0, t);
  const bool max = c == Combine::kMax;
  if (IsFloat(t)) {
    return b.create<arith::ConstantOp>(
        l, b.getF32FloatAttr(max ? -std::numeric_limits<float>::infinity()
                                 : std::numeric_limits<float>::infinity()));
  }
  if (t == ir::BOOL) return b.create<arith::ConstantOp>(l, b.getIntegerAttr(type, max ? 0 : 1));
  auto [lowest, highest] = IntegerRange(t);
  return b.create<arith::ConstantOp>(l, b.getIntegerAttr(type, max ? lowest : highest));
}

// A tensor of `shape` converted element-wise from dtype `from`'s storage to
// `to_type`'s element type with `convert` (storage <-> compute copies).
Value ConvertTensor(GraphImporter& im, Value v, Type element,
                    const std::function<Value(OpBuilder&, Value)>& convert) {
  OpBuilder& b = im.builder();
  auto type = v.getType().cast<mlir::RankedTensorType>();
  auto out_type = mlir::RankedTensorType::get(type.getShape(), element);
  const int rank = type.getRank();
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), out_type.getShape(), element);
  AffineMap id = b.getMultiDimIdentityMap(rank);
  return b
      .create<mlir::linalg::GenericOp>(
          im.loc(), mlir::TypeRange{out_type}, ValueRange{v}, ValueRange{init},
          llvm::ArrayRef<AffineMap>{id, id},
          std::vector<mlir::utils::IteratorType>(rank, mlir::utils::IteratorType::parallel),
          [&](OpBuilder& nb, Location l, ValueRange args) {
            nb.create<mlir::linalg::YieldOp>(l, convert(nb, args[0]));
          })
      .getResult(0);
}

// The tensor a scatter loop updates: a copy of x (of dtype `t`), in
// float32 for half types when `in_compute` (ATen's opmath buffer).
Value LoopDestination(GraphImporter& im, Value x, ir::DType t, bool in_compute) {
  if (in_compute && (t == ir::FLOAT16 || t == ir::BFLOAT16)) {
    return ConvertTensor(im, x, im.ComputeType(t),
                         [&](OpBuilder& b, Value e) { return im.ToCompute(b, e, t); });
  }
  return CopyOf(im, x);
}

// The loop's result back in x's storage type.
Value FromLoopDestination(GraphImporter& im, Value dest, ir::DType t) {
  auto type = dest.getType().cast<mlir::RankedTensorType>();
  if (type.getElementType() == im.StorageType(t)) return dest;
  return ConvertTensor(im, dest, im.StorageType(t),
                       [&](OpBuilder& b, Value e) { return im.FromCompute(b, e, t); });
}

// An element of the loop destination as a compute value, and back.
Value LoadCompute(GraphImporter& im, OpBuilder& b, Location l, Value dest,
                  ValueRange coords, ir::DType t) {
  Value e = b.create<mlir::tensor::ExtractOp>(l, dest, coords);
  if (e.getType() == im.ComputeType(t)) return e;
  return im.ToCompute(b, e, t);
}
Value StoreCompute(GraphImporter& im, OpBuilder& b, Location l, Value v,
                   Value dest, ValueRange coords, ir::DType t) {
  auto element = dest.getType().cast<mlir::RankedTensorType>().getElementType();
  if (element != v.getType()) v = im.FromCompute(b, v, t);
  return b.create<mlir::tensor::InsertOp>(l, v, dest, coords);
}

// `v` (compute type of `t`) rounded to `t`'s storage and back: what one
// step of ATen's scalar_t arithmetic keeps.
Value RoundToStorage(GraphImporter& im, OpBuilder& b, Value v, ir::DType t) {
  if (t != ir::FLOAT16 && t != ir::BFLOAT16) return v;
  return im.ToCompute(b, im.FromCompute(b, v, t), t);
}

// mean's element counts: an i64 tensor of `shape`, 1 where x itself
// counts (include_self) and 0 otherwise.
Value Counts(GraphImporter& im, const Shape& shape, bool include_self) {
  OpBuilder& b = im.builder();
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), shape, b.getI64Type());
  Value start = b.create<arith::ConstantIntOp>(im.loc(), include_self ? 1 : 0, 64);
  return b.create<mlir::linalg::FillOp>(im.loc(), ValueRange{start}, ValueRange{init})
      .getResult(0);
}

// Floor division of integers by a positive count (ATen's div_(count,
// "floor") for integer means).
Value FloorDivByCount(OpBuilder& b, Location l, Value sum, Value count) {
  Value q = b.create<arith::DivSIOp>(l, sum, count);
  Value r = b.create<arith::RemSIOp>(l, sum, count);
  Value zero = b.create<arith::ConstantOp>(l, b.getIntegerAttr(sum.getType(), 0));
  Value one = b.create<arith::ConstantOp>(l, b.getIntegerAttr(sum.getType(), 1));
  Value adjust = b.create<arith::AndIOp>(
      l, b.create<arith::CmpIOp>(l, arith::CmpIPredicate::ne, r, zero),
      b.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, sum, zero));
  return b.create<arith::SelectOp>(l, adjust, b.create<arith::SubIOp>(l, q, one), q);
}

// mean's last step: out = sum / max(count, 1) in x's dtype. `sum` is the
// loop destination (compute or storage type), `count` an i64 tensor of
// the same shape. The sum is rounded to x's dtype first, as ATen divides
// the stored result.
Value DivideByCount(GraphImporter& im, const ir::Node& node, Value sum,
                    Value count, ir::DType t) {
  Type sum_element = sum.getType().cast<mlir::RankedTensorType>().getElementType();
  const int rank = OutType(node).shape_size();
  AffineMap id = im.builder().getMultiDimIdentityMap(rank);
  return OutputGeneric(
      im, node, ValueRange{sum, count}, {id, id},
      [&](OpBuilder& b, Location l, ValueRange e) -> Value {
        Value s = e[0];
        if (sum_element != im.ComputeType(t)) s = im.ToCompute(b, s, t);
        s = RoundToStorage(im, b, s, t);
        Value c = e[1];
        Value one = b.create<arith::ConstantIntOp>(l, 1, 64);
        c = b.create<arith::MaxSIOp>(l, c, one);
        Value r;
        if (IsFloat(t)) {
          r = b.create<arith::DivFOp>(l, s, b.create<arith::SIToFPOp>(l, s.getType(), c));
        } else {
          if (s.getType() != c.getType()) c = b.create<arith::TruncIOp>(l, s.getType(), c);
          r = FloorDivByCount(b, l, s, c);
        }
        return im.FromCompute(b, r, t);
      });
}

// How one indexed reduction (scatter_reduce, index_reduce) combines.
struct IndexedReduction {
  Combine combine;
  ir::DType t;
  bool include_self;
  // Round every combined value to x's dtype (ATen's scalar_t kernels) even
  // where the loop destination holds compute values.
  bool round_each_step;
  // x was 0-d (reshaped to one element): the result is 0-d again.
  bool scalar;
};
using TargetFn = std::function<std::vector<Value>(OpBuilder&, Location, ValueRange)>;
using ElementFn = std::function<Value(OpBuilder&, Location, ValueRange)>;

// For every coords of `loop` in order, dest[target(coords)] =
// combine(dest[target(coords)], element(coords)): one serial loop, since
// indices may repeat. Without include_self every targeted entry starts at
// combine's identity; mean divides by the per-entry counts. Returns the
// result in x's storage type.
Value ReduceInto(GraphImporter& im, const ir::Node& node, const IndexedReduction& r,
                 Value dest, const Shape& x_shape, const Shape& loop,
                 const TargetFn& target, const ElementFn& element) {
  const ir::DType t = r.t;
  if (!r.include_self) {
    dest = SerialLoop(im, loop, ValueRange{dest},
                      [&](OpBuilder& lb, Location l, ValueRange coords,
                          ValueRange carried) -> std::vector<Value> {
                        std::vector<Value> at = target(lb, l, coords);
                        return {StoreCompute(im, lb, l, Identity(im, lb, r.combine, t),
                                             carried[0], at, t)};
                      })[0];
  }
  std::vector<Value> carried = {dest};
  if (r.combine == Combine::kMean) carried.push_back(Counts(im, x_shape, r.include_self));
  std::vector<Value> results = SerialLoop(
      im, loop, carried,
      [&](OpBuilder& lb, Location l, ValueRange coords,
          ValueRange iter) -> std::vector<Value> {
        std::vector<Value> at = target(lb, l, coords);
        Value v = element(lb, l, coords);
        Value old = LoadCompute(im, lb, l, iter[0], at, t);
        Value combined = CombineElements(lb, l, r.combine, t, old, v);
        if (r.round_each_step) combined = RoundToStorage(im, lb, combined, t);
        std::vector<Value> next = {StoreCompute(im, lb, l, combined, iter[0], at, t)};
        if (iter.size() > 1) {
          Value c = lb.create<mlir::tensor::ExtractOp>(l, iter[1], at);
          c = lb.create<arith::AddIOp>(l, c, lb.create<arith::ConstantIntOp>(l, 1, 64));
          next.push_back(lb.create<mlir::tensor::InsertOp>(l, c, iter[1], at));
        }
        return next;
      });
  if (r.combine == Combine::kMean) {
    if (r.scalar) {
      results[0] = Reshape(im, results[0], {});
      results[1] = Reshape(im, results[1], {});
    }
    return DivideByCount(im, node, results[0], results[1], t);
  }
  Value out = FromLoopDestination(im, results[0], t);
  return r.scalar ? Reshape(im, out, {}) : out;
}

// --- gather. ---------------------------------------------------------------------

// index.size(d) <= x.size(d) for d != dim (ATen's gather/scatter shape
// check), with its message.
absl::Status CheckIndexFits(const ir::Node& node, const Shape& index,
                            const Shape& x, int dim, const char* what) {
  if (index.size() != x.size() && !(index.empty() && x.size() <= 1) &&
      !(x.empty() && index.size() <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: Index tensor must have the same number of dimensions as %s "
        "tensor (index is %s, %s is %s)",
        node.op(), what, ShapeText(index), what, ShapeText(x)));
  }
  for (size_t d = 0; d < index.size() && d < x.size(); ++d) {
    if (static_cast<int>(d) != dim && index[d] > x[d]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Size does not match at dimension %d expected index %s to be "
          "no larger than %s %s apart from dimension %d",
          node.op(), d, ShapeText(index), what, ShapeText(x), dim));
    }
  }
  return absl::OkStatus();
}

// gather(x, index) "dim": out[i] = x[i with i[dim] = index[i]].
absl::Status ConvertGather(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const std::string &x = node.inputs(0), &index = node.inputs(1);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (absl::Status s = CheckIndexDType(im, node, index); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(x)), idx = ShapeOf(im.TypeOf(index));
  absl::StatusOr<int> dim = WrapDim(node, IntAttr(node, "dim", 0), in.size());
  if (!dim.ok()) return dim.status();
  if (absl::Status s = CheckOutputShape(node, idx); !s.ok()) return s;
  if (NumElements(idx) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  if (absl::Status s = CheckIndexFits(node, idx, in, *dim, "input"); !s.ok()) {
    return s;
  }
  const int64_t bound = in.empty() ? 1 : in[*dim];
  if (bound == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op gather: index out of range: dimension %d of %%%s has size 0", *dim, x));
  }
  const int rank = idx.size();
  const int d = *dim;
  im.Define(node.outputs(0), OutputGeneric(
      im, node, im.ValueOf(index), im.builder().getMultiDimIdentityMap(rank),
      [&](OpBuilder& b, Location l, ValueRange e) {
        std::vector<Value> coords = LoopIndices(b, l, rank);
        Value at = im.CheckedIndex(b, e[0], bound);
        if (in.empty()) {
          coords.clear();  // A 0-d x: every index must be 0.
        } else if (idx.empty()) {
          coords = {at};  // A 0-d index into a 1-D x.
        } else {
          coords[d] = at;
        }
        return b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(x), coords).getResult();
      }));
  return absl::OkStatus();
}

// --- scatter, scatter_add, scatter_reduce. ------------------------------------

absl::Status ConvertScatter(GraphImporter& im, const ir::Node& node) {
  const std::string& op = node.op();
  const bool value_form = op == "scatter" && node.inputs_size() == 2;
  if (absl::Status s = CheckArity(node, value_form ? 2 : 3, 1); !s.ok()) return s;
  const std::string &x = node.inputs(0), &index = node.inputs(1);
  const std::string src = value_form ? "" : node.inputs(2);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (!value_form) {
    if (absl::Status s = CheckSameDType(im, node, src); !s.ok()) return s;
  }
  if (absl::Status s = CheckIndexDType(im, node, index); !s.ok()) return s;
  if (value_form && !HasAttr(node, "value")) {
    return absl::InvalidArgumentError(
        "op scatter: takes a src tensor or a \"value\" attribute");
  }
  const ir::DType t = im.TypeOf(x).dtype();
  Shape in = ShapeOf(im.TypeOf(x)), idx = ShapeOf(im.TypeOf(index));
  Shape src_shape = value_form ? idx : ShapeOf(im.TypeOf(src));
  if (absl::Status s = CheckOutputShape(node, in); !s.ok()) return s;
  absl::StatusOr<int> dim = WrapDim(node, IntAttr(node, "dim", 0), in.size());
  if (!dim.ok()) return dim.status();

  Combine combine = Combine::kAssign;
  if (op == "scatter_add") {
    combine = Combine::kAdd;
  } else if (op == "scatter_reduce" || HasAttr(node, "reduce")) {
    absl::StatusOr<Combine> c = ParseReduce(node);
    if (!c.ok()) return c.status();
    combine = *c;
  }
  if (combine == Combine::kMean && t == ir::BOOL) {
    return absl::InvalidArgumentError(
        "op scatter_reduce: reduce='mean' is not defined for bool (PyTorch "
        "raises too); cast to a number type first");
  }
  const bool include_self = BoolAttr(node, "include_self", true);

  if (NumElements(in) == 0 || NumElements(idx) == 0) {
    if (NumElements(in) == 0) {
      DefineEmpty(im, node);
    } else {
      im.Define(node.outputs(0), CopyOf(im, im.ValueOf(x)));
    }
    return absl::OkStatus();
  }
  if (absl::Status s = CheckIndexFits(node, idx, in, *dim, "self"); !s.ok()) return s;
  if (!value_form) {
    if (absl::Status s = CheckIndexFits(node, idx, src_shape, -1, "src"); !s.ok()) {
      return s;
    }
  }
  // A 0-d tensor is a one-element vector here (x, index and src alike).
  Value x_value = im.ValueOf(x), index_value = im.ValueOf(index);
  Value src_value = value_form ? Value() : im.ValueOf(src);
  const bool scalar = in.empty();
  if (scalar) {
    x_value = Reshape(im, x_value, {1});
    in = {1};
  }
  if (idx.empty()) {
    index_value = Reshape(im, index_value, {1});
    idx = {1};
  }
  if (!value_form && src_shape.empty()) {
    src_value = Reshape(im, src_value, {1});
    src_shape = {1};
  }
  const int d = *dim;
  const int64_t bound = in[d];

  Value dest = LoopDestination(im, x_value, t, /*in_compute=*/true);
  const ir::Attribute value_attr =
      value_form ? node.attrs().at("value") : ir::Attribute();
  // The element scattered at `coords` of the index, in the compute type
  // (a Scalar value is first cast to x's dtype, as value.to<scalar_t>()).
  auto element = [&](OpBuilder& lb, Location l, ValueRange coords) -> Value {
    if (value_form) {
      return RoundToStorage(im, lb, ScalarInDType(im, lb, l, value_attr, t), t);
    }
    Value e = lb.create<mlir::tensor::ExtractOp>(l, src_value, coords);
    return im.ToCompute(lb, e, t);
  };
  auto target = [&](OpBuilder& lb, Location l, ValueRange coords) {
    std::vector<Value> at(coords.begin(), coords.end());
    Value raw = lb.create<mlir::tensor::ExtractOp>(l, index_value, coords);
    at[d] = im.CheckedIndex(lb, raw, bound);
    return at;
  };
  const IndexedReduction r{combine, t, include_self, /*round_each_step=*/false, scalar};
  Value out = ReduceInto(im, node, r, dest, in, idx, target, element);
  im.Define(node.outputs(0), out);
  return absl::OkStatus();
}

// --- index_add, index_reduce. ---------------------------------------------------

// x with slice index[i] of `dim` combined with slice i of source, for i in
// order; each step rounds to x's dtype, as ATen's per-slice kernels do.
absl::Status ConvertIndexReduce(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  const std::string &x = node.inputs(0), &index = node.inputs(1),
                    &source = node.inputs(2);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (absl::Status s = CheckSameDType(im, node, source); !s.ok()) return s;
  if (absl::Status s = CheckIndexDType(im, node, index); !s.ok()) return s;
  const bool add = node.op() == "index_add";
  const ir::DType t = im.TypeOf(x).dtype();
  Shape in = ShapeOf(im.TypeOf(x)), idx = ShapeOf(im.TypeOf(index)),
        src = ShapeOf(im.TypeOf(source));
  if (absl::Status s = CheckOutputShape(node, in); !s.ok()) return s;
  if (idx.size() > 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: Index is supposed to be a vector, but got dim: %d", node.op(),
        idx.size()));
  }
  absl::StatusOr<int> dim = WrapDim(node, IntAttr(node, "dim", 0), in.size());
  if (!dim.ok()) return dim.status();
  Combine combine = Combine::kAdd;
  if (!add) {
    absl::StatusOr<Combine> c = ParseReduce(node);
    if (!c.ok()) return c.status();
    combine = *c;
  }
  if (t == ir::BOOL && combine == Combine::kMean) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: not defined for bool (PyTorch raises too); cast to a number "
        "type first",
        node.op()));
  }
  const int64_t k = NumElements(idx);
  const bool scalar = in.empty();
  const int d = *dim;
  Shape src_expected = scalar ? Shape{} : in;
  if (!scalar) src_expected[d] = k;
  const bool src_ok = src == src_expected || (NumElements(src) == k && src.size() <= 1 &&
                                              in.size() <= 1);
  if (!src_ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: source %%%s is %s, expected %s (the input's shape with dim %d "
        "the number of indices)",
        node.op(), source, ShapeText(src), ShapeText(src_expected), d));
  }
  if (NumElements(in) == 0 || k == 0) {
    if (NumElements(in) == 0) {
      DefineEmpty(im, node);
    } else {
      im.Define(node.outputs(0), CopyOf(im, im.ValueOf(x)));
    }
    return absl::OkStatus();
  }
  Value x_value = im.ValueOf(x), index_value = im.ValueOf(index),
        src_value = im.ValueOf(source);
  if (scalar) {
    x_value = Reshape(im, x_value, {1});
    in = {1};
  }
  if (src.size() != in.size()) {
    src_value = Reshape(im, src_value, {k});
    src = {k};
  }
  if (idx.empty()) {
    index_value = Reshape(im, index_value, {1});
    idx = {1};
  }
  const int64_t bound = in[d];
  // ATen's 1-D kernel multiplies by alpha in scalar_t before adding; the
  // N-D one adds a + alpha * b in opmath.
  const ir::Attribute alpha =
      HasAttr(node, "alpha") ? node.attrs().at("alpha") : ir::Attribute();
  const bool has_alpha = HasAttr(node, "alpha");
  const bool one_dim = in.size() == 1;

  Value dest = LoopDestination(im, x_value, t, /*in_compute=*/false);
  auto target = [&](OpBuilder& lb, Location l, ValueRange coords) {
    std::vector<Value> at(coords.begin(), coords.end());
    Value raw = lb.create<mlir::tensor::ExtractOp>(l, index_value, ValueRange{coords[d]});
    at[d] = im.CheckedIndex(lb, raw, bound);
    return at;
  };
  // The slice element, times alpha where given.
  auto element = [&](OpBuilder& lb, Location l, ValueRange coords) -> Value {
    Value v = im.ToCompute(lb, lb.create<mlir::tensor::ExtractOp>(l, src_value, coords), t);
    if (!has_alpha) return v;
    Value a = RoundToStorage(im, lb, ScalarInDType(im, lb, l, alpha, t), t);
    if (t == ir::BOOL) {
      v = lb.create<arith::AndIOp>(l, v, a);
    } else {
      v = IsFloat(t) ? lb.create<arith::MulFOp>(l, v, a).getResult()
                     : lb.create<arith::MulIOp>(l, v, a).getResult();
    }
    return one_dim ? RoundToStorage(im, lb, v, t) : v;
  };
  const IndexedReduction r{combine, t, BoolAttr(node, "include_self", true),
                           /*round_each_step=*/true, scalar};
  Value out = ReduceInto(im, node, r, dest, in, src, target, element);
  im.Define(node.outputs(0), out);
  return absl::OkStatus();
}

// --- put. -----------------------------------------------------------------------

// put(x, index, source) "accumulate": x.flatten()[index[i]] = source[i]
// (+= with accumulate, rounding each step), i in order; negative indices
// count from the end.
absl::Status ConvertPut(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  const std::string &x = node.inputs(0), &index = node.inputs(1),
                    &source = node.inputs(2);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  if (absl::Status s = CheckSameDType(im, node, source); !s.ok()) return s;
  if (absl::Status s = CheckIndexDType(im, node, index); !s.ok()) return s;
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape in = ShapeOf(im.TypeOf(x)), idx = ShapeOf(im.TypeOf(index)),
              src = ShapeOf(im.TypeOf(source));
  if (absl::Status s = CheckOutputShape(node, in); !s.ok()) return s;
  const int64_t k = NumElements(idx), n = NumElements(in);
  if (NumElements(src) != k) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op put: Expected source and index to have the same number of "
        "elements, but got source %%%s %s and index %%%s %s",
        source, ShapeText(src), index, ShapeText(idx)));
  }
  if (k == 0 || n == 0) {
    if (k > 0) {
      return absl::InvalidArgumentError(
          "op put: tried to put into an empty tensor (every index is out of "
          "range)");
    }
    if (n == 0) {
      DefineEmpty(im, node);
    } else {
      im.Define(node.outputs(0), CopyOf(im, im.ValueOf(x)));
    }
    return absl::OkStatus();
  }
  const bool accumulate = BoolAttr(node, "accumulate", false);
  Value src_value = Reshape(im, im.ValueOf(source), idx);
  Value index_value = im.ValueOf(index);
  // Row-major strides of x, to turn a flat position into coordinates.
  std::vector<int64_t> strides(in.size(), 1);
  for (int d = static_cast<int>(in.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * in[d + 1];
  }
  Value dest = CopyOf(im, im.ValueOf(x));
  Value out = SerialLoop(
      im, idx, ValueRange{dest},
      [&](OpBuilder& lb, Location l, ValueRange coords,
          ValueRange iter) -> std::vector<Value> {
        Value raw = lb.create<mlir::tensor::ExtractOp>(l, index_value, coords);
        Value flat = im.CheckedIndex(lb, raw, n, /*wrap_negative=*/true);
        std::vector<Value> at;
        for (size_t d = 0; d < in.size(); ++d) {
          Value q = lb.create<arith::DivUIOp>(l, flat, IndexConst(lb, l, strides[d]));
          at.push_back(lb.create<arith::RemUIOp>(l, q, IndexConst(lb, l, in[d])));
        }
        Value v = lb.create<mlir::tensor::ExtractOp>(l, src_value, coords);
        if (accumulate) {
          Value old = LoadCompute(im, lb, l, iter[0], at, t);
          Value sum = CombineElements(lb, l, Combine::kAdd, t, old,
                                      im.ToCompute(lb, v, t));
          return {StoreCompute(im, lb, l, sum, iter[0], at, t)};
        }
        return {lb.create<mlir::tensor::InsertOp>(l, v, iter[0], at).getResult()};
      })[0];
  im.Define(node.outputs(0), out);
  return absl::OkStatus();
}

}  // namespace

void RegisterGatherScatterOps(OpConverterTable& table) {
  table["gather"] = &ConvertGather;
  table["scatter"] = &ConvertScatter;
  table["scatter_add"] = &ConvertScatter;
  table["scatter_reduce"] = &ConvertScatter;
  table["index_add"] = &ConvertIndexReduce;
  table["index_reduce"] = &ConvertIndexReduce;
  table["put"] = &ConvertPut;
}

}  // namespace rbln::compiler

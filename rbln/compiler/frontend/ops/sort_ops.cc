// Sorting and selection: sort, topk, kthvalue, median, nanmedian, mode.
//
// sort(stable=True) is a stable bottom-up merge sort of (value, index) pairs
// along the sorted dim: ceil(log2 n) passes, each one parallel
// linalg.generic over the whole tensor in gather form. Output position p of
// a pass lies in a block of two sorted runs A and B of the previous pass; a
// binary search (scf.while in the body) finds how many of the block's first
// k = p - start outputs come from A (the merge-path co-rank), and p takes
// A[i] unless B[k - i] sorts strictly before it, so equal keys keep their
// order. Keys compare as ATen's comparators: ascending puts NaN last,
// descending first.
//
// Where ATen's CPU kernels order equal values by the exact steps of an
// unstable algorithm, the same algorithm runs here, row by row
// (std_sort.h): sort(stable=False) is std::sort, topk std::partial_sort or
// std::nth_element + std::sort as topk_impl_loop chooses, kthvalue ATen's
// quick_select_template, mode std::sort with plain `<` followed by ATen's
// run-length scan (the first value of the highest count; the index of the
// last element of its run). So indices of ties match ATen's.
// median and nanmedian use the stable sort: ATen's nth_element there
// compares (value, index), whose order is the stable one: the lower median
// or, with a NaN, the first NaN for median; the lower median of the
// numbers for nanmedian. (An all-NaN row's nanmedian index is the first
// NaN's here; ATen's nth_element leaves an arbitrary NaN there.)
//
// IR conventions (outputs: values in x's dtype, indices int64):
//   sort(x)       "dim" (default -1), "descending", "stable"
//   topk(x)       "k", "dim" (default -1), "largest" (default true),
//                 "sorted" (default true)
//   kthvalue(x)   "k", "dim" (default -1), "keepdim"
//   median(x), nanmedian(x)  one output: of all elements; two outputs:
//                 along "dim" (default -1), "keepdim"
//   mode(x)       "dim" (default -1), "keepdim"
#include <cstdint>
#include <utility>
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
#include "rbln/compiler/frontend/ops/std_sort.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::arith::CmpIPredicate;
using ::mlir::utils::IteratorType;

// a sorts strictly before b (compute values): ATen's KeyValueCompAsc /
// KeyValueCompDesc.
Value SortsBefore(OpBuilder& b, Location l, Value a, Value c, bool descending) {
  if (!a.getType().isa<mlir::FloatType>()) {
    return b.create<mlir::arith::CmpIOp>(
        l, descending ? CmpIPredicate::sgt : CmpIPredicate::slt, a, c);
  }
  Value a_nan = IsNan(b, l, a), c_nan = IsNan(b, l, c);
  Value t = b.create<mlir::arith::ConstantIntOp>(l, 1, 1);
  Value nan_first =
      descending ? b.create<mlir::arith::AndIOp>(
                       l, a_nan, b.create<mlir::arith::XOrIOp>(l, c_nan, t))
                 : b.create<mlir::arith::AndIOp>(
                       l, b.create<mlir::arith::XOrIOp>(l, a_nan, t), c_nan);
  Value ordered = b.create<mlir::arith::CmpFOp>(
      l, descending ? CmpFPredicate::OGT : CmpFPredicate::OLT, a, c);
  return b.create<mlir::arith::OrIOp>(l, nan_first, ordered).getResult();
}

std::vector<Value> LoopIndices(OpBuilder& b, Location l, int rank) {
  std::vector<Value> coords;
  for (int d = 0; d < rank; ++d) {
    coords.push_back(b.create<mlir::linalg::IndexOp>(l, d));
  }
  return coords;
}

Value MinIndex(OpBuilder& b, Location l, Value x, Value y) {
  return b.create<mlir::arith::MinSIOp>(l, x, y);
}
Value MaxIndex(OpBuilder& b, Location l, Value x, Value y) {
  return b.create<mlir::arith::MaxSIOp>(l, x, y);
}

struct Sorted {
  Value values;   // storage type of the input
  Value indices;  // i64
};

// The stable sort of `x` (storage type of `dtype`) along `dim`.
Sorted EmitStableSort(GraphImporter& im, Value x, ir::DType dtype, int dim,
                      bool descending) {
  const Shape shape = ShapeOf(x);
  const int rank = shape.size();
  const int64_t n = shape[dim];
  const AffineMap id = Identity(im, rank);
  const std::vector<IteratorType> parallel(rank, IteratorType::parallel);
  OpBuilder& builder = im.builder();
  Value indices = Generic(
      im, {}, Empty(im, shape, builder.getI64Type()), {id}, parallel,
      [&](OpBuilder& b, Location l, ValueRange) {
        return llvm::SmallVector<Value>{b.create<mlir::arith::IndexCastOp>(
            l, b.getI64Type(), b.create<mlir::linalg::IndexOp>(l, dim))};
      })[0];
  Value values = x;
  const mlir::Type value_type =
      x.getType().cast<mlir::RankedTensorType>().getElementType();
  for (int64_t width = 1; width < n; width *= 2) {
    Value prev_values = values, prev_indices = indices;
    mlir::ResultRange pass = Generic(
        im, {},
        {Empty(im, shape, value_type), Empty(im, shape, builder.getI64Type())},
        {id, id}, parallel, [&](OpBuilder& b, Location l, ValueRange) {
          auto c = [&](int64_t v) { return IndexConst(b, l, v); };
          std::vector<Value> coords = LoopIndices(b, l, rank);
          Value pos = coords[dim];
          // The block [start, start + 2 width): runs A (length la) and B (lb).
          Value start = b.create<mlir::arith::MulIOp>(
              l, b.create<mlir::arith::DivUIOp>(l, pos, c(2 * width)),
              c(2 * width));
          Value rest = b.create<mlir::arith::SubIOp>(l, c(n), start);
          Value la = MinIndex(b, l, c(width), rest);
          Value lb = MaxIndex(
              b, l, c(0),
              MinIndex(b, l, c(width),
                       b.create<mlir::arith::SubIOp>(l, rest, c(width))));
          Value k = b.create<mlir::arith::SubIOp>(l, pos, start);
          Value b_start = b.create<mlir::arith::AddIOp>(l, start, c(width));
          auto read = [&](OpBuilder& rb, Location rl, Value at) {
            std::vector<Value> at_coords = coords;
            at_coords[dim] = MinIndex(rb, rl, at, c(n - 1));
            Value v =
                rb.create<mlir::tensor::ExtractOp>(rl, prev_values, at_coords);
            Value i =
                rb.create<mlir::tensor::ExtractOp>(rl, prev_indices, at_coords);
            return std::make_pair(v, i);
          };
          auto key = [&](OpBuilder& kb, Value v) {
            return im.ToCompute(kb, v, dtype);
          };
          // Co-rank: the number of A's elements among the first k outputs.
          Value lo =
              MaxIndex(b, l, c(0), b.create<mlir::arith::SubIOp>(l, k, lb));
          Value hi = MinIndex(b, l, k, la);
          auto search = b.create<mlir::scf::WhileOp>(
              l, mlir::TypeRange{b.getIndexType(), b.getIndexType()},
              ValueRange{lo, hi},
              [&](OpBuilder& wb, Location wl, ValueRange args) {
                wb.create<mlir::scf::ConditionOp>(
                    wl,
                    wb.create<mlir::arith::CmpIOp>(wl, CmpIPredicate::slt,
                                                   args[0], args[1]),
                    args);
              },
              [&](OpBuilder& wb, Location wl, ValueRange args) {
                Value mid = wb.create<mlir::arith::DivUIOp>(
                    wl, wb.create<mlir::arith::AddIOp>(wl, args[0], args[1]),
                    IndexConst(wb, wl, 2));
                Value a = key(
                    wb,
                    read(wb, wl, wb.create<mlir::arith::AddIOp>(wl, start, mid))
                        .first);
                Value bj = wb.create<mlir::arith::SubIOp>(
                    wl, wb.create<mlir::arith::SubIOp>(wl, k, mid),
                    IndexConst(wb, wl, 1));
                Value bv = key(
                    wb, read(wb, wl,
                             wb.create<mlir::arith::AddIOp>(wl, b_start, bj))
                            .first);
                // A[mid] is output before B[k - mid - 1]: take more of A.
                Value more = wb.create<mlir::arith::XOrIOp>(
                    wl, SortsBefore(wb, wl, bv, a, descending),
                    wb.create<mlir::arith::ConstantIntOp>(wl, 1, 1));
                Value next = wb.create<mlir::arith::AddIOp>(
                    wl, mid, IndexConst(wb, wl, 1));
                wb.create<mlir::scf::YieldOp>(
                    wl, ValueRange{wb.create<mlir::arith::SelectOp>(
                                       wl, more, next, args[0]),
                                   wb.create<mlir::arith::SelectOp>(
                                       wl, more, args[1], mid)});
              });
          Value i = search.getResult(0);
          Value j = b.create<mlir::arith::SubIOp>(l, k, i);
          auto [av, ai] =
              read(b, l, b.create<mlir::arith::AddIOp>(l, start, i));
          auto [bv, bi] =
              read(b, l, b.create<mlir::arith::AddIOp>(l, b_start, j));
          Value a_left =
              b.create<mlir::arith::CmpIOp>(l, CmpIPredicate::slt, i, la);
          Value b_done =
              b.create<mlir::arith::CmpIOp>(l, CmpIPredicate::sge, j, lb);
          Value b_first = SortsBefore(b, l, key(b, bv), key(b, av), descending);
          Value take_a = b.create<mlir::arith::AndIOp>(
              l, a_left,
              b.create<mlir::arith::OrIOp>(
                  l, b_done,
                  b.create<mlir::arith::XOrIOp>(
                      l, b_first,
                      b.create<mlir::arith::ConstantIntOp>(l, 1, 1))));
          return llvm::SmallVector<Value>{
              b.create<mlir::arith::SelectOp>(l, take_a, av, bv),
              b.create<mlir::arith::SelectOp>(l, take_a, ai, bi)};
        });
    values = pass[0];
    indices = pass[1];
  }
  return {values, indices};
}

// Copies of `v` into fresh tensors (a slice cannot be bound to an output).
Value Materialize(GraphImporter& im, Value v) {
  const Shape shape = ShapeOf(v);
  const int rank = shape.size();
  return Generic(
      im, v,
      Empty(im, shape,
            v.getType().cast<mlir::RankedTensorType>().getElementType()),
      {Identity(im, rank), Identity(im, rank)},
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [](OpBuilder&, Location, ValueRange args) {
        return llvm::SmallVector<Value>{args[0]};
      })[0];
}

absl::StatusOr<int> SortDim(const ir::Node& node, int rank, int64_t dflt) {
  return WrapDim(node, IntAttr(node, "dim", dflt), rank);
}

absl::Status CheckValuesIndices(const ir::Node& node, ir::DType dtype,
                                const Shape& shape) {
  if (absl::Status s = CheckArity(node, 1, 2); !s.ok()) return s;
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s = CheckOutputShape(node, i, shape); !s.ok()) return s;
  }
  if (node.outputs(0).type().dtype() != dtype ||
      node.outputs(1).type().dtype() != ir::INT64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: outputs must be (values of the input's dtype, int64 indices)",
        node.op()));
  }
  return absl::OkStatus();
}

absl::Status CheckNotBool(const ir::Node& node, ir::DType dtype) {
  if (dtype == ir::BOOL) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: \"%s_cpu\" not implemented for 'Bool'", node.op(), node.op()));
  }
  return absl::OkStatus();
}

// A 0-d x: the selection is x itself, index 0.
void DefineScalarSelection(GraphImporter& im, const ir::Node& node) {
  im.Define(node.outputs(0), Materialize(im, im.ValueOf(node.inputs(0))));
  if (node.outputs_size() > 1) {
    im.Define(node.outputs(1),
              Filled(im, {}, im.builder().getI64IntegerAttr(0)));
  }
}

absl::Status ConvertSort(GraphImporter& im, const ir::Node& node) {
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const Shape shape = ShapeOf(in);
  if (absl::Status s = CheckValuesIndices(node, in.dtype(), shape); !s.ok()) {
    return s;
  }
  absl::StatusOr<int> dim = SortDim(node, shape.size(), -1);
  if (!dim.ok()) return dim.status();
  if (shape.empty()) {
    DefineScalarSelection(im, node);
    return absl::OkStatus();
  }
  if (NumElements(shape) == 0) {
    im.Define(node.outputs(0), Empty(im, shape, im.StorageType(in.dtype())));
    im.Define(node.outputs(1), Empty(im, shape, im.builder().getI64Type()));
    return absl::OkStatus();
  }
  const bool descending = BoolAttr(node, "descending", false);
  if (BoolAttr(node, "stable", false)) {
    Sorted sorted = EmitStableSort(im, im.ValueOf(node.inputs(0)), in.dtype(),
                                   *dim, descending);
    im.Define(node.outputs(0), sorted.values);
    im.Define(node.outputs(1), sorted.indices);
    return absl::OkStatus();
  }
  // ATen's unstable sort: std::sort of each row.
  const ir::DType dtype = in.dtype();
  const int64_t n = shape[*dim];
  SortState rows =
      EmitRowSort(im, im.ValueOf(node.inputs(0)), *dim,
                  [&](OpBuilder& b, SortState s, Value row, int64_t) {
                    return RowSorter(im, dtype,
                                     descending ? KeyOrder::kDescending
                                                : KeyOrder::kAscending,
                                     n, row)
                        .Sort(b, s, 0, n);
                  });
  im.Define(node.outputs(0),
            RowsToShape(im, rows.values, shape, *dim, 0, n, false));
  im.Define(node.outputs(1),
            RowsToShape(im, rows.indices, shape, *dim, 0, n, false));
  return absl::OkStatus();
}

absl::Status ConvertTopk(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 2); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  if (absl::Status s = CheckNotBool(node, in.dtype()); !s.ok()) return s;
  const Shape shape = ShapeOf(in);
  absl::StatusOr<int> dim = SortDim(node, shape.size(), -1);
  if (!dim.ok()) return dim.status();
  const int64_t size = shape.empty() ? 1 : shape[*dim];
  const int64_t k = IntAttr(node, "k", -1);
  if (k < 0 || k > size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op topk: selected index k out of range (k = %d, dim %d has size %d)",
        k, *dim, size));
  }
  Shape out = shape;
  if (!out.empty()) out[*dim] = k;
  if (absl::Status s = CheckValuesIndices(node, in.dtype(), out); !s.ok()) {
    return s;
  }
  if (shape.empty()) {
    DefineScalarSelection(im, node);
    return absl::OkStatus();
  }
  if (NumElements(out) == 0) {
    im.Define(node.outputs(0), Empty(im, out, im.StorageType(in.dtype())));
    im.Define(node.outputs(1), Empty(im, out, im.builder().getI64Type()));
    return absl::OkStatus();
  }
  // ATen's topk_impl_loop: std::partial_sort when k * 64 <= n, else
  // std::nth_element at k - 1 and, when sorted, std::sort of the first
  // k - 1.
  const bool largest = BoolAttr(node, "largest", true);
  const bool sorted = BoolAttr(node, "sorted", true);
  const ir::DType dtype = in.dtype();
  SortState rows = EmitRowSort(
      im, im.ValueOf(node.inputs(0)), *dim,
      [&](OpBuilder& b, SortState s, Value row, int64_t n) {
        RowSorter sorter(im, dtype,
                         largest ? KeyOrder::kDescending : KeyOrder::kAscending,
                         n, row);
        if (k * 64 <= n) return sorter.PartialSort(b, s, 0, k, n);
        s = sorter.NthElement(b, s, 0, k - 1, n);
        if (sorted) s = sorter.Sort(b, s, 0, k - 1);
        return s;
      });
  im.Define(node.outputs(0),
            RowsToShape(im, rows.values, shape, *dim, 0, k, false));
  im.Define(node.outputs(1),
            RowsToShape(im, rows.indices, shape, *dim, 0, k, false));
  return absl::OkStatus();
}

// Reads the sorted pair at position `pos(b, l, coords)` of `dim` for each
// element of the reduced output (keepdim or not) of `shape`.
void DefineSelection(
    GraphImporter& im, const ir::Node& node, const Sorted& sorted,
    const Shape& shape, int dim, bool keepdim, ValueRange extra_inputs,
    const std::function<Value(OpBuilder&, Location, ValueRange extra)>& pos) {
  const int rank = shape.size();
  std::vector<bool> reduced(rank, false);
  reduced[dim] = true;
  const Shape out_shape = ReducedShape(shape, reduced, keepdim);
  const int out_rank = out_shape.size();
  std::vector<AffineMap> maps(extra_inputs.size(), Identity(im, out_rank));
  maps.push_back(Identity(im, out_rank));
  maps.push_back(Identity(im, out_rank));
  const ir::DType dtype = node.outputs(0).type().dtype();
  std::vector<Value> inits = {Empty(im, out_shape, im.StorageType(dtype))};
  if (node.outputs_size() > 1) {
    inits.push_back(Empty(im, out_shape, im.builder().getI64Type()));
  } else {
    maps.pop_back();
  }
  mlir::ResultRange results = Generic(
      im, extra_inputs, inits, maps,
      std::vector<IteratorType>(out_rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange args) {
        std::vector<Value> out_coords = LoopIndices(b, l, out_rank);
        std::vector<Value> coords;
        int o = 0;
        for (int d = 0; d < rank; ++d) {
          if (d == dim) {
            coords.push_back(pos(b, l, args.take_front(extra_inputs.size())));
            if (keepdim) ++o;
          } else {
            coords.push_back(out_coords[o++]);
          }
        }
        llvm::SmallVector<Value> yielded = {
            b.create<mlir::tensor::ExtractOp>(l, sorted.values, coords)};
        if (node.outputs_size() > 1) {
          yielded.push_back(
              b.create<mlir::tensor::ExtractOp>(l, sorted.indices, coords));
        }
        return yielded;
      });
  for (int i = 0; i < node.outputs_size(); ++i) {
    im.Define(node.outputs(i), results[i]);
  }
}

absl::Status CheckSelectionOutputs(const ir::Node& node, ir::DType dtype,
                                   const Shape& shape, int dim, bool keepdim) {
  std::vector<bool> reduced(shape.size(), false);
  if (!shape.empty()) reduced[dim] = true;
  return CheckValuesIndices(node, dtype, ReducedShape(shape, reduced, keepdim));
}

absl::Status ConvertKthvalue(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 2); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  if (absl::Status s = CheckNotBool(node, in.dtype()); !s.ok()) return s;
  const Shape shape = ShapeOf(in);
  absl::StatusOr<int> dim = SortDim(node, shape.size(), -1);
  if (!dim.ok()) return dim.status();
  const bool keepdim = BoolAttr(node, "keepdim", false);
  if (absl::Status s =
          CheckSelectionOutputs(node, in.dtype(), shape, *dim, keepdim);
      !s.ok()) {
    return s;
  }
  const int64_t size = shape.empty() ? 1 : shape[*dim];
  const int64_t k = IntAttr(node, "k", 0);
  if (NumElements(shape) == 0) {
    return absl::InvalidArgumentError(
        "op kthvalue: cannot perform reduction function kthvalue on tensor "
        "with no elements because the operation does not have an identity");
  }
  if (k < 1 || k > size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op kthvalue: selected index k out of range (k = %d, dim %d has size "
        "%d)",
        k, *dim, size));
  }
  if (shape.empty()) {
    DefineScalarSelection(im, node);
    return absl::OkStatus();
  }
  // ATen's quick_select_template on each row.
  const ir::DType dtype = in.dtype();
  SortState rows =
      EmitRowSort(im, im.ValueOf(node.inputs(0)), *dim,
                  [&](OpBuilder& b, SortState s, Value row, int64_t n) {
                    return RowSorter(im, dtype, KeyOrder::kDescending, n, row)
                        .QuickSelect(b, s, k - 1);
                  });
  im.Define(node.outputs(0),
            RowsToShape(im, rows.values, shape, *dim, k - 1, 1, !keepdim));
  im.Define(node.outputs(1),
            RowsToShape(im, rows.indices, shape, *dim, k - 1, 1, !keepdim));
  return absl::OkStatus();
}

// The number of NaNs of `x` along `dim` (index values), keepdim-shaped as
// the selection output.
Value CountNans(GraphImporter& im, Value x, ir::DType dtype, int dim,
                bool keepdim) {
  const Shape shape = ShapeOf(x);
  std::vector<bool> reduced(shape.size(), false);
  reduced[dim] = true;
  return Generic(
      im, x,
      Filled(im, ReducedShape(shape, reduced, keepdim),
             im.builder().getIndexAttr(0)),
      {Identity(im, shape.size()), ReducedMap(im, reduced, keepdim)},
      Iterators(reduced), [&](OpBuilder& b, Location l, ValueRange args) {
        Value v = im.ToCompute(b, args[0], dtype);
        Value add = b.create<mlir::arith::SelectOp>(
            l, IsNan(b, l, v), IndexConst(b, l, 1), IndexConst(b, l, 0));
        return llvm::SmallVector<Value>{
            b.create<mlir::arith::AddIOp>(l, args[1], add)};
      })[0];
}

template <bool kIgnoreNan>
absl::Status ConvertMedian(GraphImporter& im, const ir::Node& node) {
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  if (absl::Status s = CheckNotBool(node, in.dtype()); !s.ok()) return s;
  Shape shape = ShapeOf(in);
  Value x = im.ValueOf(node.inputs(0));
  const bool all = node.outputs_size() == 1;
  int dim = 0;
  bool keepdim = false;
  if (all) {
    if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
    if (absl::Status s = CheckOutputShape(node, 0, {}); !s.ok()) return s;
    if (node.outputs(0).type().dtype() != in.dtype()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: the output must have the input's dtype", node.op()));
    }
    if (NumElements(shape) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: median() operation does not have an identity for empty "
          "input tensor",
          node.op()));
    }
    // All elements: sort the flattened input.
    std::vector<mlir::ReassociationIndices> groups(1);
    for (size_t d = 0; d < shape.size(); ++d) groups[0].push_back(d);
    const int64_t n = NumElements(shape);
    auto flat_type = mlir::RankedTensorType::get(
        {n}, x.getType().cast<mlir::RankedTensorType>().getElementType());
    if (shape.empty()) {
      x = im.builder().create<mlir::tensor::ExpandShapeOp>(
          im.loc(), flat_type, x, std::vector<mlir::ReassociationIndices>{});
    } else if (shape.size() > 1) {
      x = im.builder().create<mlir::tensor::CollapseShapeOp>(
          im.loc(), flat_type, x, groups);
    }
    shape = {n};
  } else {
    absl::StatusOr<int> wrapped = SortDim(node, shape.size(), -1);
    if (!wrapped.ok()) return wrapped.status();
    dim = *wrapped;
    keepdim = BoolAttr(node, "keepdim", false);
    if (absl::Status s =
            CheckSelectionOutputs(node, in.dtype(), shape, dim, keepdim);
        !s.ok()) {
      return s;
    }
    if (!shape.empty() && shape[dim] == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: median() cannot compute median for a dimension of size 0 "
          "because the operation does not have an identity",
          node.op()));
    }
    if (shape.empty()) {
      DefineScalarSelection(im, node);
      return absl::OkStatus();
    }
    if (NumElements(shape) == 0) {
      std::vector<bool> reduced(shape.size(), false);
      reduced[dim] = true;
      const Shape out = ReducedShape(shape, reduced, keepdim);
      im.Define(node.outputs(0), Empty(im, out, im.StorageType(in.dtype())));
      im.Define(node.outputs(1), Empty(im, out, im.builder().getI64Type()));
      return absl::OkStatus();
    }
  }
  const int64_t n = shape[dim];
  Sorted sorted = EmitStableSort(im, x, in.dtype(), dim, /*descending=*/false);
  // Without NaNs, the lower median of (value, index) order, ATen's choice.
  // median with NaNs: the first NaN (sorted NaNs keep their order, after
  // the numbers); nanmedian: the lower median of the numbers.
  std::vector<Value> extra;
  if (IsFloat(in.dtype())) {
    extra.push_back(CountNans(im, x, in.dtype(), dim, all ? false : keepdim));
  }
  DefineSelection(
      im, node, sorted, shape, dim, all ? false : keepdim, extra,
      [&](OpBuilder& b, Location l, ValueRange nans) -> Value {
        if (nans.empty()) return IndexConst(b, l, (n - 1) / 2);
        Value numbers =
            b.create<mlir::arith::SubIOp>(l, IndexConst(b, l, n), nans[0]);
        if (kIgnoreNan) {
          // (numbers - 1) / 2, 0 for an all-NaN row (C++ truncation).
          Value m =
              b.create<mlir::arith::SubIOp>(l, numbers, IndexConst(b, l, 1));
          return MaxIndex(
              b, l, IndexConst(b, l, 0),
              b.create<mlir::arith::DivSIOp>(l, m, IndexConst(b, l, 2)));
        }
        Value any_nan = b.create<mlir::arith::CmpIOp>(
            l, CmpIPredicate::sgt, nans[0], IndexConst(b, l, 0));
        return b.create<mlir::arith::SelectOp>(l, any_nan, numbers,
                                               IndexConst(b, l, (n - 1) / 2));
      });
  return absl::OkStatus();
}

// ATen's mode scan over a sorted row: the first (smallest) value with the
// highest count; its index is the last of its run.
absl::Status ConvertMode(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 2); !s.ok()) return s;
  const ir::TensorType& in = im.TypeOf(node.inputs(0));
  const Shape shape = ShapeOf(in);
  absl::StatusOr<int> dim = SortDim(node, shape.size(), -1);
  if (!dim.ok()) return dim.status();
  const bool keepdim = BoolAttr(node, "keepdim", false);
  if (absl::Status s =
          CheckSelectionOutputs(node, in.dtype(), shape, *dim, keepdim);
      !s.ok()) {
    return s;
  }
  if (shape.empty()) {
    DefineScalarSelection(im, node);
    return absl::OkStatus();
  }
  if (shape[*dim] == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op mode: mode(): Expected reduction dim %d to have non-zero size.",
        *dim));
  }
  std::vector<bool> reduced(shape.size(), false);
  reduced[*dim] = true;
  const Shape out_shape = ReducedShape(shape, reduced, keepdim);
  if (NumElements(out_shape) == 0) {
    im.Define(node.outputs(0),
              Empty(im, out_shape, im.StorageType(in.dtype())));
    im.Define(node.outputs(1), Empty(im, out_shape, im.builder().getI64Type()));
    return absl::OkStatus();
  }
  const ir::DType dtype = in.dtype();
  const int64_t n = shape[*dim];
  const int rank = shape.size(), out_rank = out_shape.size();
  // ATen sorts (value, index) pairs with std::sort by value (plain <).
  SortState rows =
      EmitRowSort(im, im.ValueOf(node.inputs(0)), *dim,
                  [&](OpBuilder& b, SortState s, Value row, int64_t) {
                    return RowSorter(im, dtype, KeyOrder::kPlainLess, n, row)
                        .Sort(b, s, 0, n);
                  });
  const Sorted sorted = {
      RowsToShape(im, rows.values, shape, *dim, 0, n, false),
      RowsToShape(im, rows.indices, shape, *dim, 0, n, false)};
  const mlir::Type value_type = im.StorageType(dtype);
  mlir::ResultRange results = Generic(
      im, {},
      {Empty(im, out_shape, value_type),
       Empty(im, out_shape, im.builder().getI64Type())},
      {Identity(im, out_rank), Identity(im, out_rank)},
      std::vector<IteratorType>(out_rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange args) {
        std::vector<Value> out_coords = LoopIndices(b, l, out_rank);
        auto coords_at = [&](Value p) {
          std::vector<Value> coords;
          int o = 0;
          for (int d = 0; d < rank; ++d) {
            if (d == *dim) {
              coords.push_back(p);
              if (keepdim) ++o;
            } else {
              coords.push_back(out_coords[o++]);
            }
          }
          return coords;
        };
        Value first = b.create<mlir::tensor::ExtractOp>(
            l, sorted.values, coords_at(IndexConst(b, l, 0)));
        // (mode, mode index, run length, best count)
        auto loop = b.create<mlir::scf::ForOp>(
            l, IndexConst(b, l, 0), IndexConst(b, l, n), IndexConst(b, l, 1),
            ValueRange{first, I64Const(b, l, 0), I64Const(b, l, 0),
                       I64Const(b, l, 0)},
            [&](OpBuilder& fb, Location fl, Value i, ValueRange it) {
              Value v = fb.create<mlir::tensor::ExtractOp>(fl, sorted.values,
                                                           coords_at(i));
              Value next_pos = MinIndex(
                  fb, fl,
                  fb.create<mlir::arith::AddIOp>(fl, i, IndexConst(fb, fl, 1)),
                  IndexConst(fb, fl, n - 1));
              Value next = fb.create<mlir::tensor::ExtractOp>(
                  fl, sorted.values, coords_at(next_pos));
              Value run = fb.create<mlir::arith::AddIOp>(fl, it[2],
                                                         I64Const(fb, fl, 1));
              Value last = fb.create<mlir::arith::CmpIOp>(
                  fl, CmpIPredicate::eq, i, IndexConst(fb, fl, n - 1));
              Value vc = im.ToCompute(fb, v, dtype),
                    nc = im.ToCompute(fb, next, dtype);
              Value differs = vc.getType().isa<mlir::FloatType>()
                                  ? fb.create<mlir::arith::CmpFOp>(
                                          fl, CmpFPredicate::UNE, vc, nc)
                                        .getResult()
                                  : fb.create<mlir::arith::CmpIOp>(
                                          fl, CmpIPredicate::ne, vc, nc)
                                        .getResult();
              Value run_ends = fb.create<mlir::arith::OrIOp>(fl, last, differs);
              Value better = fb.create<mlir::arith::AndIOp>(
                  fl, run_ends,
                  fb.create<mlir::arith::CmpIOp>(fl, CmpIPredicate::sgt, run,
                                                 it[3]));
              Value index = fb.create<mlir::tensor::ExtractOp>(
                  fl, sorted.indices, coords_at(i));
              fb.create<mlir::scf::YieldOp>(
                  fl, ValueRange{fb.create<mlir::arith::SelectOp>(fl, better, v,
                                                                  it[0]),
                                 fb.create<mlir::arith::SelectOp>(fl, better,
                                                                  index, it[1]),
                                 fb.create<mlir::arith::SelectOp>(
                                     fl, run_ends, I64Const(fb, fl, 0), run),
                                 fb.create<mlir::arith::SelectOp>(fl, better,
                                                                  run, it[3])});
            });
        (void)args;
        return llvm::SmallVector<Value>{loop.getResult(0), loop.getResult(1)};
      });
  im.Define(node.outputs(0), results[0]);
  im.Define(node.outputs(1), results[1]);
  return absl::OkStatus();
}

}  // namespace

void RegisterSortOps(OpConverterTable& table) {
  table["sort"] = &ConvertSort;
  table["topk"] = &ConvertTopk;
  table["kthvalue"] = &ConvertKthvalue;
  table["median"] = &ConvertMedian<false>;
  table["nanmedian"] = &ConvertMedian<true>;
  table["mode"] = &ConvertMode;
}

}  // namespace rbln::compiler

// libstdc++'s sorting algorithms (std::sort, std::nth_element,
// std::partial_sort) on the rows of (value, index) tensors, emitted as SCF.
//
// ATen's CPU sort (stable=False), topk and mode call these algorithms on
// (value, index) pairs compared by value only, so the order of equal values
// is whatever their exact sequence of comparisons and moves produces. The
// programs here replay the same sequence (introsort with median-of-three
// pivots, unguarded partitions, a heapsort fallback at twice log2(n) depth,
// insertion sort of the blocks of at most 16; introselect; heap select and
// sort_heap), so they reproduce ATen's permutation exactly, ties included.
// Each row is sorted sequentially (tensor.extract / tensor.insert on loop-
// carried tensors, in place after bufferization); reads are clamped to the
// row and loops to their range, so even an inconsistent comparator (NaN
// under plain `<`) stays in bounds.
#ifndef RBLN_COMPILER_FRONTEND_OPS_STD_SORT_H_
#define RBLN_COMPILER_FRONTEND_OPS_STD_SORT_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "mlir/IR/Builders.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler {

// How pairs compare (by value), as ATen's comparators.
enum class KeyOrder {
  kAscending,   // KeyValueCompAsc: NaN after every number
  kDescending,  // KeyValueCompDesc: NaN before every number
  kPlainLess,   // a < b (mode's comparator)
};

// Values [R, n] (storage type) and indices [R, n] (i64) being permuted.
struct SortState {
  mlir::Value values;
  mlir::Value indices;
};

// The algorithms on row `row` (an index value) of a state, for a builder
// inside the row loop. Positions are index values.
class RowSorter {
 public:
  RowSorter(GraphImporter& im, ir::DType dtype, KeyOrder order, int64_t n,
            mlir::Value row)
      : im_(im), dtype_(dtype), order_(order), n_(n), row_(row) {}

  // std::sort(first, last).
  SortState Sort(mlir::OpBuilder& b, SortState s, int64_t first, int64_t last);
  // std::nth_element(first, nth, last).
  SortState NthElement(mlir::OpBuilder& b, SortState s, int64_t first,
                       int64_t nth, int64_t last);
  // std::partial_sort(first, middle, last).
  SortState PartialSort(mlir::OpBuilder& b, SortState s, int64_t first,
                        int64_t middle, int64_t last);
  // ATen's quick_select_template(row, k) (kthvalue's selection), whose
  // gt_or_nan is the kDescending order's "less".
  SortState QuickSelect(mlir::OpBuilder& b, SortState s, int64_t k);

 private:
  struct Pair {
    mlir::Value value, index;
  };
  mlir::Location loc() const { return im_.loc(); }
  mlir::Value Clamp(mlir::OpBuilder& b, mlir::Value p);
  Pair Get(mlir::OpBuilder& b, const SortState& s, mlir::Value p);
  SortState Set(mlir::OpBuilder& b, const SortState& s, mlir::Value p,
                const Pair& e);
  SortState Swap(mlir::OpBuilder& b, const SortState& s, mlir::Value p,
                 mlir::Value q);
  // Strict weak order of two stored values.
  mlir::Value LessValue(mlir::OpBuilder& b, mlir::Value x, mlir::Value y);
  mlir::Value Less(mlir::OpBuilder& b, const SortState& s, mlir::Value p,
                   mlir::Value q);

  SortState InsertionSort(mlir::OpBuilder& b, SortState s, mlir::Value first,
                          mlir::Value last);
  // __unguarded_partition_pivot: returns the cut and the state.
  std::pair<mlir::Value, SortState> PartitionPivot(mlir::OpBuilder& b,
                                                   SortState s,
                                                   mlir::Value first,
                                                   mlir::Value last);
  SortState AdjustHeap(mlir::OpBuilder& b, SortState s, mlir::Value first,
                       mlir::Value hole, mlir::Value len, const Pair& value);
  SortState MakeHeap(mlir::OpBuilder& b, SortState s, mlir::Value first,
                     mlir::Value last);
  SortState PopHeap(mlir::OpBuilder& b, SortState s, mlir::Value first,
                    mlir::Value last, mlir::Value result);
  SortState SortHeap(mlir::OpBuilder& b, SortState s, mlir::Value first,
                     mlir::Value last);
  SortState HeapSelect(mlir::OpBuilder& b, SortState s, mlir::Value first,
                       mlir::Value middle, mlir::Value last);

  GraphImporter& im_;
  ir::DType dtype_;
  KeyOrder order_;
  int64_t n_;
  mlir::Value row_;
};

// Applies `per_row` to every row of `x` along `dim` (a top-level scf.for
// over the rows of x viewed as [rows, n] with dim last). Returns the
// permuted values and indices ([rows, n]); `per_row` gets the state holding
// row r's values and their positions 0..n-1.
SortState EmitRowSort(
    GraphImporter& im, mlir::Value x, int dim,
    const std::function<SortState(mlir::OpBuilder&, SortState, mlir::Value row,
                                  int64_t n)>& per_row);

// Entries [offset, offset + count) of each row of `rows` ([rows, n], dim
// last) in the layout of x (of `shape`) with `dim` of size `count`; with
// `drop_dim` (count 1) that dim is left out, as a reduction without keepdim.
mlir::Value RowsToShape(GraphImporter& im, mlir::Value rows, const Shape& shape,
                        int dim, int64_t offset, int64_t count, bool drop_dim);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_OPS_STD_SORT_H_

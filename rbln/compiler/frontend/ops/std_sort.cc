#include "rbln/compiler/frontend/ops/std_sort.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/ops/reduction_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::TypeRange;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::arith::CmpIPredicate;
using Values = llvm::SmallVector<Value>;

// Small index arithmetic (C++ semantics: signed division truncates).
Value Add(OpBuilder& b, Value x, Value y) {
  return b.create<arith::AddIOp>(b.getUnknownLoc(), x, y);
}
Value Sub(OpBuilder& b, Value x, Value y) {
  return b.create<arith::SubIOp>(b.getUnknownLoc(), x, y);
}
Value Mul(OpBuilder& b, Value x, Value y) {
  return b.create<arith::MulIOp>(b.getUnknownLoc(), x, y);
}
Value Div(OpBuilder& b, Value x, Value y) {
  return b.create<arith::DivSIOp>(b.getUnknownLoc(), x, y);
}
Value C(OpBuilder& b, int64_t v) { return IndexConst(b, b.getUnknownLoc(), v); }
Value Cmp(OpBuilder& b, CmpIPredicate p, Value x, Value y) {
  return b.create<arith::CmpIOp>(b.getUnknownLoc(), p, x, y);
}
Value Sel(OpBuilder& b, Value c, Value x, Value y) {
  return b.create<arith::SelectOp>(b.getUnknownLoc(), c, x, y);
}
Value And(OpBuilder& b, Value x, Value y) {
  return b.create<arith::AndIOp>(b.getUnknownLoc(), x, y);
}
Value Or(OpBuilder& b, Value x, Value y) {
  return b.create<arith::OrIOp>(b.getUnknownLoc(), x, y);
}
Value Not(OpBuilder& b, Value x) {
  return b.create<arith::XOrIOp>(
      b.getUnknownLoc(), x,
      b.create<arith::ConstantIntOp>(b.getUnknownLoc(), 1, 1));
}

// scf.while: `cond` gets the carried values and returns the condition (the
// values pass on unchanged); `body` returns the next values. Tensors go
// first in `init`: canonicalization may drop scalars that the loop only
// forwards, and bufferization pairs the forwarded tensors with the loop's
// block arguments by position.
Values While(OpBuilder& b, ValueRange init,
             llvm::function_ref<Value(OpBuilder&, ValueRange)> cond,
             llvm::function_ref<Values(OpBuilder&, ValueRange)> body) {
  const Location l = b.getUnknownLoc();
  auto op = b.create<mlir::scf::WhileOp>(
      l, TypeRange(init), init,
      [&](OpBuilder& wb, Location wl, ValueRange args) {
        wb.create<mlir::scf::ConditionOp>(wl, cond(wb, args), args);
      },
      [&](OpBuilder& wb, Location wl, ValueRange args) {
        wb.create<mlir::scf::YieldOp>(wl, body(wb, args));
      });
  return Values(op.getResults().begin(), op.getResults().end());
}

// scf.for over [lb, ub) carrying `init`.
Values For(OpBuilder& b, Value lb, Value ub, ValueRange init,
           llvm::function_ref<Values(OpBuilder&, Value, ValueRange)> body) {
  const Location l = b.getUnknownLoc();
  auto op = b.create<mlir::scf::ForOp>(
      l, lb, ub, C(b, 1), init,
      [&](OpBuilder& fb, Location fl, Value iv, ValueRange args) {
        fb.create<mlir::scf::YieldOp>(fl, body(fb, iv, args));
      });
  return Values(op.getResults().begin(), op.getResults().end());
}

// if (cond) then_fn else else_fn on the carried values, as two loops of at
// most one trip (an scf.if yielding tensors may yield a new buffer, which
// MLIR 16's one-shot bufferization rejects inside loops; a loop's tensors
// stay in place). Each branch must use its arguments, not outer tensors.
Values IfLoop(OpBuilder& b, Value cond, ValueRange init,
              llvm::function_ref<Values(OpBuilder&, ValueRange)> then_fn,
              llvm::function_ref<Values(OpBuilder&, ValueRange)> else_fn) {
  Values r = For(
      b, C(b, 0), Sel(b, cond, C(b, 1), C(b, 0)), init,
      [&](OpBuilder& fb, Value, ValueRange args) { return then_fn(fb, args); });
  return For(
      b, C(b, 0), Sel(b, cond, C(b, 0), C(b, 1)), r,
      [&](OpBuilder& fb, Value, ValueRange args) { return else_fn(fb, args); });
}

Values Same(OpBuilder&, ValueRange args) { return Values(args); }

Values Flat(const SortState& s) { return {s.values, s.indices}; }

SortState State(ValueRange v) { return {v[0], v[1]}; }

int64_t FloorLog2(int64_t n) {
  int64_t l = 0;
  while ((n >> (l + 1)) > 0) ++l;
  return l;
}

}  // namespace

Value RowSorter::Clamp(OpBuilder& b, Value p) {
  return b.create<arith::MinSIOp>(
      loc(), b.create<arith::MaxSIOp>(loc(), p, C(b, 0)), C(b, n_ - 1));
}

RowSorter::Pair RowSorter::Get(OpBuilder& b, const SortState& s, Value p) {
  const ValueRange at = {row_, Clamp(b, p)};
  return {b.create<mlir::tensor::ExtractOp>(loc(), s.values, at),
          b.create<mlir::tensor::ExtractOp>(loc(), s.indices, at)};
}

SortState RowSorter::Set(OpBuilder& b, const SortState& s, Value p,
                         const Pair& e) {
  const ValueRange at = {row_, Clamp(b, p)};
  return {b.create<mlir::tensor::InsertOp>(loc(), e.value, s.values, at),
          b.create<mlir::tensor::InsertOp>(loc(), e.index, s.indices, at)};
}

SortState RowSorter::Swap(OpBuilder& b, const SortState& s, Value p, Value q) {
  const Pair a = Get(b, s, p), c = Get(b, s, q);
  return Set(b, Set(b, s, p, c), q, a);
}

Value RowSorter::LessValue(OpBuilder& b, Value x, Value y) {
  Value kx = im_.ToCompute(b, x, dtype_), ky = im_.ToCompute(b, y, dtype_);
  if (!kx.getType().isa<mlir::FloatType>()) {
    return Cmp(b,
               order_ == KeyOrder::kDescending ? CmpIPredicate::sgt
                                               : CmpIPredicate::slt,
               kx, ky);
  }
  if (order_ == KeyOrder::kPlainLess) {
    return b.create<arith::CmpFOp>(loc(), CmpFPredicate::OLT, kx, ky);
  }
  const bool desc = order_ == KeyOrder::kDescending;
  Value x_nan = IsNan(b, loc(), kx), y_nan = IsNan(b, loc(), ky);
  Value nan_first =
      desc ? And(b, x_nan, Not(b, y_nan)) : And(b, Not(b, x_nan), y_nan);
  return Or(b, nan_first,
            b.create<arith::CmpFOp>(
                loc(), desc ? CmpFPredicate::OGT : CmpFPredicate::OLT, kx, ky));
}

Value RowSorter::Less(OpBuilder& b, const SortState& s, Value p, Value q) {
  return LessValue(b, Get(b, s, p).value, Get(b, s, q).value);
}

// Moves each element left past the greater ones before it: the result of
// libstdc++'s __insertion_sort (and of its unguarded variant after the
// introsort loop, whose sentinel makes it the same).
SortState RowSorter::InsertionSort(OpBuilder& b, SortState s, Value first,
                                   Value last) {
  Value start = b.create<arith::MinSIOp>(loc(), Add(b, first, C(b, 1)), last);
  return State(
      For(b, start, last, Flat(s), [&](OpBuilder& fb, Value i, ValueRange it) {
        const Pair val = Get(fb, State(it), i);
        Values r = While(
            fb, {it[0], it[1], i},
            [&](OpBuilder& wb, ValueRange a) {
              Value prev = Get(wb, State(a), Sub(wb, a[2], C(wb, 1))).value;
              return And(wb, Cmp(wb, CmpIPredicate::sgt, a[2], first),
                         LessValue(wb, val.value, prev));
            },
            [&](OpBuilder& wb, ValueRange a) {
              Value j1 = Sub(wb, a[2], C(wb, 1));
              SortState t = Set(wb, State(a), a[2], Get(wb, State(a), j1));
              return Values{t.values, t.indices, j1};
            });
        return Flat(Set(fb, State(r), r[2], val));
      }));
}

std::pair<Value, SortState> RowSorter::PartitionPivot(OpBuilder& b, SortState s,
                                                      Value first, Value last) {
  // __move_median_to_first(first, first + 1, mid, last - 1).
  Value mid = Add(b, first, Div(b, Sub(b, last, first), C(b, 2)));
  Value a = Add(b, first, C(b, 1)), c = Sub(b, last, C(b, 1));
  Value ab = Less(b, s, a, mid), bc = Less(b, s, mid, c), ac = Less(b, s, a, c);
  Value pick = Sel(b, ab, Sel(b, bc, mid, Sel(b, ac, c, a)),
                   Sel(b, ac, a, Sel(b, bc, c, mid)));
  s = Swap(b, s, first, pick);
  // __unguarded_partition(first + 1, last, pivot = first): each round
  // advances lo past smaller elements and hi past greater ones, then swaps
  // them unless they crossed (lo is then the cut). The scans also stop at
  // the range's ends, which a consistent comparator never reaches.
  const Value pivot = Get(b, s, first).value;
  Values r = While(
      b, {s.values, s.indices, a, last},
      [&](OpBuilder& wb, ValueRange args) -> Value {
        return Cmp(wb, CmpIPredicate::slt, args[2], args[3]);
      },
      [&](OpBuilder& wb, ValueRange args) -> Values {
        const SortState t = State(args);
        Value lo = While(
            wb, {args[2]},
            [&](OpBuilder& lb, ValueRange v) {
              return And(lb, Cmp(lb, CmpIPredicate::slt, v[0], last),
                         LessValue(lb, Get(lb, t, v[0]).value, pivot));
            },
            [&](OpBuilder& lb, ValueRange v) {
              return Values{Add(lb, v[0], C(lb, 1))};
            })[0];
        Value hi = While(
            wb, {Sub(wb, args[3], C(wb, 1))},
            [&](OpBuilder& hb, ValueRange v) {
              return And(hb, Cmp(hb, CmpIPredicate::sgt, v[0], first),
                         LessValue(hb, pivot, Get(hb, t, v[0]).value));
            },
            [&](OpBuilder& hb, ValueRange v) {
              return Values{Sub(hb, v[0], C(hb, 1))};
            })[0];
        Value crossed = Cmp(wb, CmpIPredicate::sge, lo, hi);
        Values u = IfLoop(wb, crossed, {args[0], args[1]}, Same,
                          [&](OpBuilder& ib, ValueRange x) {
                            return Flat(Swap(ib, State(x), lo, hi));
                          });
        return Values{u[0], u[1], Sel(wb, crossed, lo, Add(wb, lo, C(wb, 1))),
                      Sel(wb, crossed, lo, hi)};
      });
  return {r[2], State(r)};
}

SortState RowSorter::AdjustHeap(OpBuilder& b, SortState s, Value first,
                                Value hole, Value len, const Pair& value) {
  const Value top = hole;
  // while (second < (len - 1) / 2): move the larger child up.
  const Value limit = Div(b, Sub(b, len, C(b, 1)), C(b, 2));
  Values r = While(
      b, {s.values, s.indices, hole, hole},
      [&](OpBuilder& wb, ValueRange a) {
        return Cmp(wb, CmpIPredicate::slt, a[2], limit);
      },
      [&](OpBuilder& wb, ValueRange a) {
        SortState t = State(a);
        Value second = Mul(wb, C(wb, 2), Add(wb, a[2], C(wb, 1)));
        Value right = Add(wb, first, second);
        Value left_bigger = Less(wb, t, right, Sub(wb, right, C(wb, 1)));
        second = Sel(wb, left_bigger, Sub(wb, second, C(wb, 1)), second);
        t = Set(wb, t, Add(wb, first, a[3]),
                Get(wb, t, Add(wb, first, second)));
        return Values{t.values, t.indices, second, second};
      });
  const Value second = r[2];
  // An even length's last parent has one child.
  Value even = Cmp(b, CmpIPredicate::eq,
                   b.create<arith::AndIOp>(loc(), len, C(b, 1)), C(b, 0));
  Value last_parent =
      Cmp(b, CmpIPredicate::eq, second, Div(b, Sub(b, len, C(b, 2)), C(b, 2)));
  Values e = IfLoop(
      b, And(b, even, last_parent), {r[0], r[1], r[3]},
      [&](OpBuilder& ib, ValueRange x) {
        Value child =
            Sub(ib, Mul(ib, C(ib, 2), Add(ib, second, C(ib, 1))), C(ib, 1));
        SortState t = Set(ib, State(x), Add(ib, first, x[2]),
                          Get(ib, State(x), Add(ib, first, child)));
        return Values{t.values, t.indices, child};
      },
      Same);
  // __push_heap(first, hole, top, value).
  Values p = While(
      b, e,
      [&](OpBuilder& wb, ValueRange a) {
        Value parent = Div(wb, Sub(wb, a[2], C(wb, 1)), C(wb, 2));
        return And(
            wb, Cmp(wb, CmpIPredicate::sgt, a[2], top),
            LessValue(wb, Get(wb, State(a), Add(wb, first, parent)).value,
                      value.value));
      },
      [&](OpBuilder& wb, ValueRange a) {
        Value parent = Div(wb, Sub(wb, a[2], C(wb, 1)), C(wb, 2));
        SortState t = Set(wb, State(a), Add(wb, first, a[2]),
                          Get(wb, State(a), Add(wb, first, parent)));
        return Values{t.values, t.indices, parent};
      });
  return Set(b, State(p), Add(b, first, p[2]), value);
}

SortState RowSorter::MakeHeap(OpBuilder& b, SortState s, Value first,
                              Value last) {
  Value len = Sub(b, last, first);
  Value top_parent = Div(b, Sub(b, len, C(b, 2)), C(b, 2));
  Value count = Sel(b, Cmp(b, CmpIPredicate::sge, len, C(b, 2)),
                    Add(b, top_parent, C(b, 1)), C(b, 0));
  return State(For(b, C(b, 0), count, Flat(s),
                   [&](OpBuilder& fb, Value k, ValueRange it) {
                     Value parent = Sub(fb, top_parent, k);
                     const SortState t = State(it);
                     const Pair v = Get(fb, t, Add(fb, first, parent));
                     return Flat(AdjustHeap(fb, t, first, parent, len, v));
                   }));
}

SortState RowSorter::PopHeap(OpBuilder& b, SortState s, Value first, Value last,
                             Value result) {
  const Pair v = Get(b, s, result);
  s = Set(b, s, result, Get(b, s, first));
  return AdjustHeap(b, s, first, C(b, 0), Sub(b, last, first), v);
}

SortState RowSorter::SortHeap(OpBuilder& b, SortState s, Value first,
                              Value last) {
  Value count = b.create<arith::MaxSIOp>(
      loc(), Sub(b, Sub(b, last, first), C(b, 1)), C(b, 0));
  return State(For(b, C(b, 0), count, Flat(s),
                   [&](OpBuilder& fb, Value k, ValueRange it) {
                     Value end = Sub(fb, Sub(fb, last, C(fb, 1)), k);
                     return Flat(PopHeap(fb, State(it), first, end, end));
                   }));
}

SortState RowSorter::HeapSelect(OpBuilder& b, SortState s, Value first,
                                Value middle, Value last) {
  s = MakeHeap(b, s, first, middle);
  return State(
      For(b, middle, last, Flat(s), [&](OpBuilder& fb, Value i, ValueRange it) {
        return IfLoop(
            fb, Less(fb, State(it), i, first), it,
            [&](OpBuilder& ib, ValueRange x) {
              return Flat(PopHeap(ib, State(x), first, middle, i));
            },
            Same);
      }));
}

SortState RowSorter::Sort(OpBuilder& b, SortState s, int64_t first_pos,
                          int64_t last_pos) {
  const int64_t len = last_pos - first_pos;
  if (len <= 1) return s;
  const Value first_v = C(b, first_pos), last_v = C(b, last_pos);
  // __introsort_loop with its recursion (on the right part) as a stack of
  // (first, last, depth); the ranges are disjoint, so the order in which
  // they are done does not change the result.
  const int64_t depth_limit = 2 * FloorLog2(len);
  const int64_t capacity = depth_limit + 2;
  Value stack = b.create<mlir::linalg::FillOp>(
                     loc(), ValueRange{C(b, 0)},
                     ValueRange{b.create<mlir::tensor::EmptyOp>(
                         loc(), Shape{capacity, 3}, b.getIndexType())})
                    .getResult(0);
  // (values, indices, stack, first, last, depth, sp, go)
  Values r = While(
      b,
      {s.values, s.indices, stack, first_v, last_v, C(b, depth_limit), C(b, 0),
       b.create<arith::ConstantIntOp>(loc(), 1, 1)},
      [](OpBuilder&, ValueRange a) { return a[7]; },
      [&](OpBuilder& wb, ValueRange a) {
        const Value first = a[3], last = a[4], depth = a[5], sp = a[6];
        Value big =
            Cmp(wb, CmpIPredicate::sgt, Sub(wb, last, first), C(wb, 16));
        Value no_depth = Cmp(wb, CmpIPredicate::eq, depth, C(wb, 0));
        Value heap = And(wb, big, no_depth);
        Value split = And(wb, big, Not(wb, no_depth));
        // Depth exhausted: __partial_sort(first, last, last), a heapsort.
        Values h = IfLoop(
            wb, heap, {a[0], a[1]},
            [&](OpBuilder& ib, ValueRange x) {
              SortState u = MakeHeap(ib, State(x), first, last);
              return Flat(SortHeap(ib, u, first, last));
            },
            Same);
        // Partition; the right part waits on the stack.
        Value d = Sub(wb, depth, C(wb, 1));
        Values p = IfLoop(
            wb, split, {h[0], h[1], a[2], last},
            [&](OpBuilder& ib, ValueRange x) {
              auto [cut, u] = PartitionPivot(ib, State(x), first, last);
              Value pushed = x[2];
              int col = 0;
              for (Value v : {cut, last, d}) {
                pushed = ib.create<mlir::tensor::InsertOp>(
                    loc(), v, pushed, ValueRange{sp, C(ib, col++)});
              }
              return Values{u.values, u.indices, pushed, cut};
            },
            Same);
        const Value next_last = Sel(wb, split, p[3], last);
        const Value next_depth = Sel(wb, split, d, depth);
        const Value next_sp = Sel(wb, split, Add(wb, sp, C(wb, 1)), sp);
        // Otherwise this range is done: pop the next one, or stop.
        Value empty = Cmp(wb, CmpIPredicate::eq, next_sp, C(wb, 0));
        Value below = wb.create<arith::MaxSIOp>(
            loc(), Sub(wb, next_sp, C(wb, 1)), C(wb, 0));
        Value saved[3];
        for (int col = 0; col < 3; ++col) {
          saved[col] = wb.create<mlir::tensor::ExtractOp>(
              loc(), p[2], ValueRange{below, C(wb, col)});
        }
        Value pop = Not(wb, split);
        Value take = And(wb, pop, Not(wb, empty));
        return Values{p[0],
                      p[1],
                      p[2],
                      Sel(wb, take, saved[0], first),
                      Sel(wb, take, saved[1], next_last),
                      Sel(wb, take, saved[2], next_depth),
                      Sel(wb, take, below, next_sp),
                      Not(wb, And(wb, pop, empty))};
      });
  // __final_insertion_sort.
  return InsertionSort(b, State(r), first_v, last_v);
}

SortState RowSorter::NthElement(OpBuilder& b, SortState s, int64_t first_pos,
                                int64_t nth_pos, int64_t last_pos) {
  const int64_t len = last_pos - first_pos;
  if (len == 0 || nth_pos == last_pos) return s;
  const Value nth = C(b, nth_pos);
  // __introselect with depth limit 2 log2(len):
  // (values, indices, first, last, depth, done).
  Values r = While(
      b,
      {s.values, s.indices, C(b, first_pos), C(b, last_pos),
       C(b, 2 * FloorLog2(len)), b.create<arith::ConstantIntOp>(loc(), 0, 1)},
      [&](OpBuilder& wb, ValueRange a) {
        return And(wb, Not(wb, a[5]),
                   Cmp(wb, CmpIPredicate::sgt, Sub(wb, a[3], a[2]), C(wb, 3)));
      },
      [&](OpBuilder& wb, ValueRange a) {
        const Value first = a[2], last = a[3], depth = a[4];
        Value heap = Cmp(wb, CmpIPredicate::eq, depth, C(wb, 0));
        // Depth exhausted: heap select the first nth + 1, nth into place.
        Values h = IfLoop(
            wb, heap, {a[0], a[1]},
            [&](OpBuilder& ib, ValueRange x) {
              SortState u =
                  HeapSelect(ib, State(x), first, Add(ib, nth, C(ib, 1)), last);
              return Flat(Swap(ib, u, first, nth));
            },
            Same);
        Values p = IfLoop(
            wb, Not(wb, heap), {h[0], h[1], first},
            [&](OpBuilder& ib, ValueRange x) {
              auto [cut, u] = PartitionPivot(ib, State(x), first, last);
              return Values{u.values, u.indices, cut};
            },
            Same);
        Value left = Cmp(wb, CmpIPredicate::sle, p[2], nth);
        return Values{p[0],
                      p[1],
                      Sel(wb, heap, first, Sel(wb, left, p[2], first)),
                      Sel(wb, heap, last, Sel(wb, left, last, p[2])),
                      Sel(wb, heap, depth, Sub(wb, depth, C(wb, 1))),
                      heap};
      });
  return State(IfLoop(
      b, Not(b, r[5]), {r[0], r[1]},
      [&](OpBuilder& ib, ValueRange x) {
        return Flat(InsertionSort(ib, State(x), r[2], r[3]));
      },
      Same));
}

SortState RowSorter::PartialSort(OpBuilder& b, SortState s, int64_t first,
                                 int64_t middle, int64_t last) {
  s = HeapSelect(b, s, C(b, first), C(b, middle), C(b, last));
  return SortHeap(b, s, C(b, first), C(b, middle));
}

SortState RowSorter::QuickSelect(OpBuilder& b, SortState s, int64_t k) {
  if (n_ <= 1) return s;
  const Value kv = C(b, k);
  // (values, indices, L, R, done)
  Values r = While(
      b,
      {s.values, s.indices, C(b, 0), C(b, n_ - 1),
       b.create<arith::ConstantIntOp>(loc(), 0, 1)},
      [&](OpBuilder& wb, ValueRange a) { return Not(wb, a[4]); },
      [&](OpBuilder& wb, ValueRange a) {
        const Value left = a[2], right = a[3];
        Value small =
            Cmp(wb, CmpIPredicate::sle, right, Add(wb, left, C(wb, 1)));
        Value two = Cmp(wb, CmpIPredicate::eq, right, Add(wb, left, C(wb, 1)));
        // Two elements: order them.
        Values t = IfLoop(
            wb, And(wb, two, Less(wb, State(a), left, right)), {a[0], a[1]},
            [&](OpBuilder& ib, ValueRange x) {
              return Flat(Swap(ib, State(x), left, right));
            },
            Same);
        Values step = IfLoop(
            wb, Not(wb, small), {t[0], t[1], left, right},
            [&](OpBuilder& ib, ValueRange x) {
              // Median of three into L, L + 1, R.
              Value l1 = Add(ib, left, C(ib, 1));
              Value p = Add(ib, left, Div(ib, Sub(ib, right, left), C(ib, 2)));
              SortState u = Swap(ib, State(x), p, l1);
              auto swap_if = [&](const SortState& st, Value i, Value j) {
                return State(IfLoop(
                    ib, Less(ib, st, i, j), Flat(st),
                    [&](OpBuilder& sb, ValueRange y) {
                      return Flat(Swap(sb, State(y), i, j));
                    },
                    Same));
              };
              u = swap_if(u, l1, right);
              u = swap_if(u, left, right);
              u = swap_if(u, l1, left);
              const Value piv = Get(ib, u, left).value;
              // do { do i++ while (gt(piv, a[i])); do j-- while
              // (gt(a[j], piv)); if (j < i) break; swap(i, j); }
              Values part = While(
                  ib,
                  {u.values, u.indices, l1, right,
                   ib.create<arith::ConstantIntOp>(loc(), 0, 1)},
                  [&](OpBuilder& pb, ValueRange v) { return Not(pb, v[4]); },
                  [&](OpBuilder& pb, ValueRange v) {
                    const SortState w = State(v);
                    Value i = While(
                        pb, {Add(pb, v[2], C(pb, 1))},
                        [&](OpBuilder& lb, ValueRange y) {
                          return And(
                              lb, Cmp(lb, CmpIPredicate::slt, y[0], right),
                              LessValue(lb, piv, Get(lb, w, y[0]).value));
                        },
                        [&](OpBuilder& lb, ValueRange y) {
                          return Values{Add(lb, y[0], C(lb, 1))};
                        })[0];
                    Value j = While(
                        pb, {Sub(pb, v[3], C(pb, 1))},
                        [&](OpBuilder& hb, ValueRange y) {
                          return And(
                              hb, Cmp(hb, CmpIPredicate::sgt, y[0], left),
                              LessValue(hb, Get(hb, w, y[0]).value, piv));
                        },
                        [&](OpBuilder& hb, ValueRange y) {
                          return Values{Sub(hb, y[0], C(hb, 1))};
                        })[0];
                    Value crossed = Cmp(pb, CmpIPredicate::slt, j, i);
                    Values z = IfLoop(
                        pb, Not(pb, crossed), {v[0], v[1]},
                        [&](OpBuilder& sb, ValueRange y) {
                          return Flat(Swap(sb, State(y), i, j));
                        },
                        Same);
                    return Values{z[0], z[1], i, j, crossed};
                  });
              const Value i = part[2], j = part[3];
              SortState w = Swap(ib, State(part), left, j);
              return Values{
                  w.values, w.indices,
                  Sel(ib, Cmp(ib, CmpIPredicate::sle, j, kv), i, left),
                  Sel(ib, Cmp(ib, CmpIPredicate::sge, j, kv),
                      Sub(ib, j, C(ib, 1)), right)};
            },
            Same);
        return Values{step[0], step[1], step[2], step[3], small};
      });
  return State(r);
}

SortState EmitRowSort(GraphImporter& im, Value x, int dim,
                      const std::function<SortState(OpBuilder&, SortState,
                                                    Value, int64_t)>& per_row) {
  OpBuilder& b = im.builder();
  const Location l = im.loc();
  const Shape shape = ShapeOf(x);
  const int rank = shape.size();
  const int64_t n = shape[dim];
  const int64_t rows = NumElements(shape) / n;
  // x with `dim` moved last, as [rows, n].
  Shape moved;
  std::vector<mlir::AffineExpr> exprs(rank);
  for (int d = 0, o = 0; d < rank; ++d) {
    if (d == dim) continue;
    moved.push_back(shape[d]);
    exprs[d] = mlir::getAffineDimExpr(o++, im.context());
  }
  moved.push_back(n);
  exprs[dim] = mlir::getAffineDimExpr(rank - 1, im.context());
  const Type element =
      x.getType().cast<mlir::RankedTensorType>().getElementType();
  Value values = Generic(
      im, x, Empty(im, moved, element),
      {mlir::AffineMap::get(rank, 0, exprs, im.context()), Identity(im, rank)},
      std::vector<mlir::utils::IteratorType>(
          rank, mlir::utils::IteratorType::parallel),
      [](OpBuilder&, Location, ValueRange args) { return Values{args[0]}; })[0];
  auto rows_type = mlir::RankedTensorType::get({rows, n}, element);
  if (rank == 1) {
    values = b.create<mlir::tensor::ExpandShapeOp>(
        l, rows_type, values, std::vector<mlir::ReassociationIndices>{{0, 1}});
  } else if (rank > 2) {
    std::vector<mlir::ReassociationIndices> groups(2);
    for (int d = 0; d < rank - 1; ++d) groups[0].push_back(d);
    groups[1].push_back(rank - 1);
    values =
        b.create<mlir::tensor::CollapseShapeOp>(l, rows_type, values, groups);
  }
  Value indices = Generic(
      im, {}, Empty(im, {rows, n}, b.getI64Type()), {Identity(im, 2)},
      {mlir::utils::IteratorType::parallel,
       mlir::utils::IteratorType::parallel},
      [](OpBuilder& nb, Location nl, ValueRange) {
        return Values{nb.create<arith::IndexCastOp>(
            nl, nb.getI64Type(), nb.create<mlir::linalg::IndexOp>(nl, 1))};
      })[0];
  Values r = For(b, C(b, 0), C(b, rows), ValueRange{values, indices},
                 [&](OpBuilder& fb, Value row, ValueRange it) {
                   return Flat(per_row(fb, State(it), row, n));
                 });
  return State(r);
}

Value RowsToShape(GraphImporter& im, Value rows, const Shape& shape, int dim,
                  int64_t offset, int64_t count, bool drop_dim) {
  const int rank = shape.size();
  const Type element =
      rows.getType().cast<mlir::RankedTensorType>().getElementType();
  // One gather generic over the output: rows[flat(other coords), offset +
  // coord of dim] (no slices or reshapes, which bufferization may copy
  // through a strided memref.copy).
  Shape out;
  std::vector<int> loop_of(rank, -1);
  for (int d = 0; d < rank; ++d) {
    if (d == dim && drop_dim) continue;
    loop_of[d] = out.size();
    out.push_back(d == dim ? count : shape[d]);
  }
  const int out_rank = out.size();
  return Generic(
      im, {}, Empty(im, out, element), {Identity(im, out_rank)},
      std::vector<mlir::utils::IteratorType>(
          out_rank, mlir::utils::IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange) {
        Value row = C(b, 0);
        int64_t stride = 1;
        for (int d = rank - 1; d >= 0; --d) {
          if (d == dim) continue;
          row = Add(b, row,
                    Mul(b, b.create<mlir::linalg::IndexOp>(l, loop_of[d]),
                        C(b, stride)));
          stride *= shape[d];
        }
        Value col = C(b, offset);
        if (!drop_dim) {
          col = Add(b, col, b.create<mlir::linalg::IndexOp>(l, loop_of[dim]));
        }
        return Values{
            b.create<mlir::tensor::ExtractOp>(l, rows, ValueRange{row, col})};
      })[0];
}

}  // namespace rbln::compiler

// Gathers and scatters along one dim against double-precision references
// that round where ATen's CPU kernels round (float32 accumulation for half
// scatter_add/scatter_reduce, scalar_t rounding per step for index_reduce,
// index_add and put), over every dtype, repeated indices and NaN.
// spec: P8 (index range checks), J6 (the Core ATen ops compile)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

constexpr ir::DType kAllDTypes[] = {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32,
                                    ir::INT32,   ir::INT64,    ir::BOOL};

// Small values (products stay exact in every dtype), NaN in float types.
HostTensor Values(ir::DType dtype, Shape shape, uint32_t seed, bool nan = false) {
  if (dtype == ir::BOOL) return Random(dtype, std::move(shape), seed, 0.0, 2.0);
  HostTensor t = Random(dtype, std::move(shape), seed, -4.0, 4.0);
  if (IsFloatDType(dtype)) {
    for (double& v : t.values) v = RoundTo(dtype, v * 0.75);
    if (nan && t.values.size() > 2) t.values[2] = std::nan("");
  }
  return t;
}

// --- Reference arithmetic. -------------------------------------------------

enum class Reduce { kAssign, kSum, kProd, kMean, kAmax, kAmin };

double Combine(Reduce r, ir::DType t, double old, double v) {
  switch (r) {
    case Reduce::kAssign:
      return v;
    case Reduce::kSum:
    case Reduce::kMean:
      return t == ir::BOOL ? double(old != 0 || v != 0) : old + v;
    case Reduce::kProd:
      return t == ir::BOOL ? double(old != 0 && v != 0) : old * v;
    case Reduce::kAmax:
      if (std::isnan(v)) return v;
      return old < v ? v : old;  // std::max: a NaN `old` stays
    case Reduce::kAmin:
      if (std::isnan(v)) return v;
      return v < old ? v : old;
  }
  return v;
}

double IdentityOf(Reduce r, ir::DType t) {
  switch (r) {
    case Reduce::kProd:
      return 1;
    case Reduce::kAmax:
      return IsFloatDType(t) ? -INFINITY
             : t == ir::BOOL ? 0
             : t == ir::INT32 ? std::numeric_limits<int32_t>::min()
                              : static_cast<double>(std::numeric_limits<int64_t>::min());
    case Reduce::kAmin:
      return IsFloatDType(t) ? INFINITY
             : t == ir::BOOL ? 1
             : t == ir::INT32 ? std::numeric_limits<int32_t>::max()
                              : static_cast<double>(std::numeric_limits<int64_t>::max());
    default:
      return 0;
  }
}

// sum / count as ATen's div_: rounded sum, float division or floor.
double MeanOf(ir::DType t, double sum, int64_t count) {
  count = std::max<int64_t>(count, 1);
  if (IsFloatDType(t)) return RoundTo(t, RoundTo(t, sum) / count);
  return std::floor(sum / count);
}

const char* ReduceName(Reduce r, bool old_api = false) {
  switch (r) {
    case Reduce::kSum:
      return old_api ? "add" : "sum";
    case Reduce::kProd:
      return old_api ? "multiply" : "prod";
    case Reduce::kMean:
      return "mean";
    case Reduce::kAmax:
      return "amax";
    case Reduce::kAmin:
      return "amin";
    default:
      return "";
  }
}

// scatter/scatter_add/scatter_reduce: x updated in index order, accumulated
// in float32 for half types and rounded once.
std::vector<double> RefScatter(const HostTensor& x, int dim,
                               const HostTensor& index, const HostTensor* src,
                               double value, Reduce r, bool include_self) {
  const ir::DType t = x.dtype;
  const ir::DType acc = IsFloatDType(t) ? ir::FLOAT32 : t;
  std::vector<double> out = x.values;
  std::vector<int64_t> count(out.size(), include_self ? 1 : 0);
  auto target = [&](int64_t i) {
    std::vector<int64_t> c = Unflatten(i, index.shape);
    c[dim] = static_cast<int64_t>(index.values[i]);
    return Flatten(c, x.shape);
  };
  const int64_t n = NumElements(index.shape);
  if (!include_self) {
    for (int64_t i = 0; i < n; ++i) out[target(i)] = IdentityOf(r, t);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = target(i);
    const double v =
        src ? src->values[Flatten(Unflatten(i, index.shape), src->shape)] : value;
    out[at] = RoundTo(acc, Combine(r, t, out[at], v));
    ++count[at];
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = r == Reduce::kMean ? MeanOf(t, out[i], count[i]) : RoundTo(t, out[i]);
  }
  return out;
}

// index_reduce/index_add: slice index[i] of x combined with slice i of
// source, rounding to x's dtype after every step.
std::vector<double> RefIndexReduce(const HostTensor& x, int dim,
                                   const HostTensor& index,
                                   const HostTensor& source, Reduce r,
                                   bool include_self, double alpha = 1) {
  const ir::DType t = x.dtype;
  std::vector<double> out = x.values;
  std::vector<int64_t> count(out.size(), include_self ? 1 : 0);
  auto target = [&](int64_t i) {
    std::vector<int64_t> c = Unflatten(i, source.shape);
    c[dim] = static_cast<int64_t>(index.values[c[dim]]);
    return Flatten(c, x.shape);
  };
  const int64_t n = NumElements(source.shape);
  if (!include_self) {
    for (int64_t i = 0; i < n; ++i) out[target(i)] = IdentityOf(r, t);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = target(i);
    double v = source.values[i];
    if (alpha != 1) v *= alpha;
    out[at] = RoundTo(t, Combine(r, t, out[at], v));
    ++count[at];
  }
  if (r == Reduce::kMean) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = MeanOf(t, out[i], count[i]);
  }
  return out;
}

// --- gather. --------------------------------------------------------------------

TEST(GatherScatterOpsTest, GatherAlongEachDim) {
  for (ir::DType dtype : kAllDTypes) {
    for (ir::DType index_dtype : {ir::INT64, ir::INT32}) {
      HostTensor x = Values(dtype, {3, 4, 2}, 1, /*nan=*/true);
      for (int dim = 0; dim < 3; ++dim) {
        // Smaller than x in the other dims, repeated values along `dim`.
        Shape idx_shape = {2, 3, 2};
        idx_shape[dim] = 5;
        HostTensor index = Random(index_dtype, idx_shape, 2 + dim, 0, x.shape[dim]);
        std::vector<double> want;
        for (int64_t i = 0; i < NumElements(idx_shape); ++i) {
          std::vector<int64_t> c = Unflatten(i, idx_shape);
          c[dim] = static_cast<int64_t>(index.values[i]);
          want.push_back(x.values[Flatten(c, x.shape)]);
        }
        ir::Graph g = OneOpGraph("gather", {x.type(), index.type()},
                                 {Type(dtype, idx_shape)},
                                 {{"dim", IntA(dim - 3)}});
        ExpectExact(RunOne(g, {x, index}), want, ir::ToText(g));
      }
    }
  }
}

TEST(GatherScatterOpsTest, GatherOfScalarsAndEmptyIndex) {
  HostTensor x = Tensor(ir::FLOAT32, {}, {2.5});
  ir::Graph g = OneOpGraph("gather", {x.type(), Type(ir::INT64, {2})},
                           {Type(ir::FLOAT32, {2})}, {{"dim", IntA(0)}});
  ExpectExact(RunOne(g, {x, Tensor(ir::INT64, {2}, {0, 0})}), {2.5, 2.5}, "0-d x");
  HostTensor v = Tensor(ir::FLOAT32, {3}, {1, 2, 3});
  g = OneOpGraph("gather", {v.type(), Type(ir::INT64, {})},
                 {Type(ir::FLOAT32, {})}, {{"dim", IntA(0)}});
  ExpectExact(RunOne(g, {v, Tensor(ir::INT64, {}, {2})}), {3}, "0-d index");
  g = OneOpGraph("gather", {v.type(), Type(ir::INT64, {0})},
                 {Type(ir::FLOAT32, {0})}, {{"dim", IntA(0)}});
  EXPECT_TRUE(CompileAndRun(g, {v, Tensor(ir::INT64, {0}, {})}).ok());
}

// SPEC P8: gather and scatter indices are checked, negative ones included
// (neither wraps them, as in ATen); put's negative indices count from the
// end.
TEST(GatherScatterOpsTest, IndicesAreRangeCheckedAtRunTime) {
  HostTensor x = Values(ir::FLOAT32, {3, 4}, 3);
  ir::Graph g = OneOpGraph("gather", {x.type(), Type(ir::INT64, {2, 2})},
                           {Type(ir::FLOAT32, {2, 2})}, {{"dim", IntA(1)}});
  for (double bad : {4.0, -1.0}) {
    absl::StatusOr<std::vector<HostTensor>> out =
        CompileAndRun(g, {x, Tensor(ir::INT64, {2, 2}, {0, 1, bad, 2})});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_NE(out.status().message().find(absl::StrFormat(
                  "gather (node 0, output %%out0) of program gather: index %d "
                  "is not in the valid range [0, 4) of dimension 1",
                  static_cast<int>(bad))),
              std::string::npos)
        << out.status();
  }
  HostTensor src = Values(ir::FLOAT32, {1, 2}, 4);
  g = OneOpGraph("scatter_add", {x.type(), Type(ir::INT64, {1, 2}), src.type()},
                 {x.type()}, {{"dim", IntA(0)}});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {x, Tensor(ir::INT64, {1, 2}, {1, 3}), src});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index 3 is not in the valid range [0, 3)"),
            std::string::npos)
      << out.status();

  HostTensor values = Values(ir::FLOAT32, {2}, 5);
  g = OneOpGraph("put", {x.type(), Type(ir::INT64, {2}), values.type()},
                 {x.type()});
  std::vector<double> want = x.values;
  want[11] = values.values[0];
  want[0] = values.values[1];
  ExpectExact(RunOne(g, {x, Tensor(ir::INT64, {2}, {-1, -12}), values}), want,
              "put with negative indices");
  out = CompileAndRun(g, {x, Tensor(ir::INT64, {2}, {0, -13}), values});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index -13 is not in the valid range [-12, 12)"),
            std::string::npos)
      << out.status();
}

// --- scatter. ---------------------------------------------------------------------

TEST(GatherScatterOpsTest, ScatterLastRepeatedIndexWins) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {4, 3}, 6);
    HostTensor src = Values(dtype, {3, 3}, 7);
    // Repeated targets along both dims.
    HostTensor index = Tensor(ir::INT64, {3, 2}, {1, 0, 1, 2, 0, 0});
    for (int dim = 0; dim < 2; ++dim) {
      ir::Graph g = OneOpGraph("scatter", {x.type(), index.type(), src.type()},
                               {x.type()}, {{"dim", IntA(dim)}});
      ExpectExact(RunOne(g, {x, index, src}),
                  RefScatter(x, dim, index, &src, 0, Reduce::kAssign, true),
                  ir::ToText(g));
    }
    // The Scalar form casts the value to x's dtype first.
    ir::Graph g = OneOpGraph("scatter", {x.type(), index.type()}, {x.type()},
                             {{"dim", IntA(0)}, {"value", FloatA(1.3)}});
    ExpectExact(RunOne(g, {x, index}),
                RefScatter(x, 0, index, nullptr, RoundTo(dtype, dtype == ir::BOOL ? 1 : 1.3),
                           Reduce::kAssign, true),
                ir::ToText(g));
  }
}

TEST(GatherScatterOpsTest, ScatterAddAndReduceAccumulateInFloat) {
  for (ir::DType dtype : kAllDTypes) {
    // Many repeats of few targets: float32 accumulation differs from
    // rounding to half after every step.
    HostTensor x = Values(dtype, {2, 3}, 8);
    HostTensor src = Values(dtype, {40, 3}, 9);
    for (double& v : src.values) {
      if (IsFloatDType(dtype)) v = RoundTo(dtype, 1.0 + std::fabs(v) / 64);
    }
    HostTensor index = Random(ir::INT64, {40, 3}, 10, 0, 2);
    ir::Graph g = OneOpGraph("scatter_add", {x.type(), index.type(), src.type()},
                             {x.type()}, {{"dim", IntA(0)}});
    ExpectExact(RunOne(g, {x, index, src}),
                RefScatter(x, 0, index, &src, 0, Reduce::kSum, true), ir::ToText(g));
    for (Reduce r : {Reduce::kSum, Reduce::kProd}) {
      if (r == Reduce::kProd && dtype != ir::BOOL) continue;  // overflows
      g = OneOpGraph("scatter", {x.type(), index.type(), src.type()}, {x.type()},
                     {{"dim", IntA(0)}, {"reduce", StrA(ReduceName(r, true))}});
      ExpectExact(RunOne(g, {x, index, src}),
                  RefScatter(x, 0, index, &src, 0, r, true), ir::ToText(g));
    }
    HostTensor small_index = Tensor(ir::INT64, {3, 3}, {0, 1, 1, 1, 1, 0, 0, 0, 1});
    g = OneOpGraph("scatter", {x.type(), small_index.type()}, {x.type()},
                   {{"dim", IntA(0)}, {"value", IntA(2)}, {"reduce", StrA("multiply")}});
    ExpectExact(RunOne(g, {x, small_index}),
                RefScatter(x, 0, small_index, nullptr, 2, Reduce::kProd, true),
                ir::ToText(g));
  }
}

TEST(GatherScatterOpsTest, ScatterReduceEveryReductionWithAndWithoutSelf) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {3, 5}, 11, /*nan=*/true);
    HostTensor src = Values(dtype, {4, 5}, 12, /*nan=*/true);
    // Row 2 of x is never a target: include_self=false leaves it alone.
    HostTensor index = Tensor(ir::INT64, {3, 4}, {0, 1, 0, 1, 1, 1, 0, 0,
                                                  0, 0, 0, 1});
    for (Reduce r : {Reduce::kSum, Reduce::kProd, Reduce::kMean, Reduce::kAmax,
                     Reduce::kAmin}) {
      if (r == Reduce::kMean && dtype == ir::BOOL) continue;  // PyTorch raises
      for (bool include_self : {true, false}) {
        // Both dims in one dtype; the others along dim 1.
        for (int dim = dtype == ir::FLOAT16 ? 0 : 1; dim < 2; ++dim) {
          ir::Graph g = OneOpGraph(
              "scatter_reduce", {x.type(), index.type(), src.type()}, {x.type()},
              {{"dim", IntA(dim)},
               {"reduce", StrA(ReduceName(r))},
               {"include_self", BoolA(include_self)}});
          ExpectExact(RunOne(g, {x, index, src}),
                      RefScatter(x, dim, index, &src, 0, r, include_self),
                      ir::ToText(g));
        }
      }
    }
  }
}

TEST(GatherScatterOpsTest, ScatterOnScalarsAndEmptyIndex) {
  HostTensor x = Tensor(ir::FLOAT16, {}, {1.5});
  HostTensor src = Tensor(ir::FLOAT16, {}, {2.0});
  ir::Graph g = OneOpGraph("scatter_add",
                           {x.type(), Type(ir::INT64, {}), src.type()}, {x.type()},
                           {{"dim", IntA(0)}});
  ExpectExact(RunOne(g, {x, Tensor(ir::INT64, {}, {0}), src}), {3.5}, "0-d");
  HostTensor y = Values(ir::INT32, {2, 2}, 13);
  g = OneOpGraph("scatter", {y.type(), Type(ir::INT64, {0, 2})}, {y.type()},
                 {{"dim", IntA(0)}, {"value", IntA(7)}});
  ExpectExact(RunOne(g, {y, Tensor(ir::INT64, {0, 2}, {})}), y.values, "empty index");
}

TEST(GatherScatterOpsTest, ScatterRejectsBadShapesAndReductions) {
  HostTensor x = Values(ir::FLOAT32, {2, 3}, 14);
  ir::Graph g = OneOpGraph("scatter", {x.type(), Type(ir::INT64, {2, 4}), x.type()},
                           {x.type()}, {{"dim", IntA(0)}});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {x, Random(ir::INT64, {2, 4}, 1, 0, 2), x});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Size does not match at dimension 1"),
            std::string::npos)
      << out.status();
  g = OneOpGraph("scatter_reduce", {x.type(), Type(ir::INT64, {1, 3}), x.type()},
                 {x.type()}, {{"dim", IntA(0)}, {"reduce", StrA("max")}});
  out = CompileAndRun(g, {x, Random(ir::INT64, {1, 3}, 1, 0, 2), x});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("reduce argument must be one of"),
            std::string::npos)
      << out.status();
}

// --- index_add, index_reduce. ------------------------------------------------------

TEST(GatherScatterOpsTest, IndexReduceRoundsEveryStep) {
  for (ir::DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{4, 3}, Shape{5}}) {
      HostTensor x = Values(dtype, shape, 15, /*nan=*/true);
      for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
        Shape src_shape = shape;
        src_shape[dim] = 6;
        HostTensor source = Values(dtype, src_shape, 16 + dim, /*nan=*/true);
        HostTensor index = Random(ir::INT64, {6}, 18 + dim, 0, shape[dim] - 1);
        for (Reduce r : {Reduce::kProd, Reduce::kMean, Reduce::kAmax, Reduce::kAmin}) {
          if (r == Reduce::kMean && dtype == ir::BOOL) continue;  // PyTorch raises
          for (bool include_self : {true, false}) {
            ir::Graph g = OneOpGraph(
                "index_reduce", {x.type(), index.type(), source.type()}, {x.type()},
                {{"dim", IntA(dim)},
                 {"reduce", StrA(ReduceName(r))},
                 {"include_self", BoolA(include_self)}});
            ExpectExact(RunOne(g, {x, index, source}),
                        RefIndexReduce(x, dim, index, source, r, include_self),
                        ir::ToText(g));
          }
        }
        ir::Graph g = OneOpGraph("index_add", {x.type(), index.type(), source.type()},
                                 {x.type()}, {{"dim", IntA(dim)}});
        ExpectExact(RunOne(g, {x, index, source}),
                    RefIndexReduce(x, dim, index, source, Reduce::kSum, true),
                    ir::ToText(g));
      }
    }
  }
}

// --- put. -------------------------------------------------------------------------

TEST(GatherScatterOpsTest, PutWritesTheFlattenedInput) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {2, 3}, 20);
    HostTensor source = Values(dtype, {2, 2}, 21);
    HostTensor index = Tensor(ir::INT64, {4}, {5, 0, -1, 2});
    for (bool accumulate : {false, true}) {
      std::vector<double> want = x.values;
      for (int i = 0; i < 4; ++i) {
        int64_t at = static_cast<int64_t>(index.values[i]);
        if (at < 0) at += 6;
        want[at] = accumulate ? RoundTo(dtype, Combine(Reduce::kSum, dtype, want[at],
                                                       source.values[i]))
                              : source.values[i];
      }
      ir::Graph g = OneOpGraph("put", {x.type(), index.type(), source.type()},
                               {x.type()}, {{"accumulate", BoolA(accumulate)}});
      ExpectExact(RunOne(g, {x, index, source}), want, ir::ToText(g));
    }
  }
}

}  // namespace
}  // namespace rbln::compiler::testing

// spec: P1, P3
// Reductions, softmax and normalizations against double-precision references
// (PyTorch semantics: half types accumulate in f32 and round once).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const ir::DType kFloatTypes[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16};

// --- Reference helpers. ------------------------------------------------------

std::vector<bool> Mask(const Shape& shape, const std::vector<int>& dims) {
  const int rank = shape.size();
  std::vector<bool> reduced(rank, dims.empty());
  for (int d : dims) reduced[d < 0 ? d + rank : d] = true;
  return reduced;
}

Shape Reduced(const Shape& shape, const std::vector<bool>& reduced,
              bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(shape[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// For each input element: its output element and its row-major index among
// the reduced dims.
struct Indexing {
  std::vector<int64_t> out;
  std::vector<int64_t> within;
};

Indexing IndexReduction(const Shape& shape, const std::vector<bool>& reduced) {
  Indexing ix;
  const int64_t n = NumElements(shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, out = 0, within = 0, out_scale = 1, in_scale = 1;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      const int64_t id = rest % shape[d];
      rest /= shape[d];
      if (reduced[d]) {
        within += id * in_scale;
        in_scale *= shape[d];
      } else {
        out += id * out_scale;
        out_scale *= shape[d];
      }
    }
    ix.out.push_back(out);
    ix.within.push_back(within);
  }
  return ix;
}

enum class Kind { kSum, kMean, kMax, kMin };

// The reduction in double; also Σ|x| per output (for tolerances).
std::vector<double> RefReduce(const HostTensor& x,
                              const std::vector<bool>& reduced, Kind kind,
                              std::vector<double>* abs_sum = nullptr) {
  const Indexing ix = IndexReduction(x.shape, reduced);
  const int64_t n_out = NumElements(Reduced(x.shape, reduced, false));
  double init = 0;
  if (kind == Kind::kMax) init = -kInf;
  if (kind == Kind::kMin) init = kInf;
  std::vector<double> acc(n_out, init), abs(n_out, 0), count(n_out, 0);
  for (size_t i = 0; i < x.values.size(); ++i) {
    double& a = acc[ix.out[i]];
    const double v = x.values[i];
    abs[ix.out[i]] += std::fabs(v);
    count[ix.out[i]] += 1;
    switch (kind) {
      case Kind::kSum:
      case Kind::kMean:
        a += v;
        break;
      case Kind::kMax:
        a = (std::isnan(v) || v > a) ? v : a;
        break;
      case Kind::kMin:
        a = (std::isnan(v) || v < a) ? v : a;
        break;
    }
  }
  if (kind == Kind::kMean) {
    for (int64_t o = 0; o < n_out; ++o) acc[o] /= count[o];
  }
  if (abs_sum) *abs_sum = abs;
  return acc;
}

// First index of the max (min) within the reduced dims; NaN is the max.
std::vector<double> RefArg(const HostTensor& x,
                           const std::vector<bool>& reduced, bool max,
                           std::vector<double>* values = nullptr) {
  const Indexing ix = IndexReduction(x.shape, reduced);
  const int64_t n_out = NumElements(Reduced(x.shape, reduced, false));
  std::vector<double> best(n_out, kNan), index(n_out, -1);
  for (size_t i = 0; i < x.values.size(); ++i) {
    const int64_t o = ix.out[i];
    const double v = x.values[i];
    bool take;
    if (index[o] < 0) {
      take = true;
    } else if (std::isnan(best[o])) {
      take = false;
    } else {
      take = std::isnan(v) || (max ? v > best[o] : v < best[o]);
    }
    if (take) {
      best[o] = v;
      index[o] = ix.within[i];
    }
  }
  if (values) *values = best;
  return index;
}

// Tolerance: one ulp of the output plus f32 accumulation error over Σ|x|.
std::vector<double> SumTolerance(ir::DType out, const std::vector<double>& want,
                                 const std::vector<double>& abs_sum,
                                 int64_t n) {
  std::vector<double> tol;
  for (size_t i = 0; i < want.size(); ++i) {
    tol.push_back(2 * UnitRoundoff(out) * std::fabs(want[i]) +
                  (n + 1) * UnitRoundoff(ir::FLOAT32) * abs_sum[i] + 1e-30);
  }
  return tol;
}

std::vector<double> RelTolerance(ir::DType out, const std::vector<double>& want,
                                 double abs) {
  std::vector<double> tol;
  for (double w : want) {
    tol.push_back(2 * UnitRoundoff(out) * std::fabs(w) + abs);
  }
  return tol;
}

struct ReduceCase {
  Shape shape;
  std::vector<int> dims;  // empty: attr absent (all dims)
  bool keepdim;
};

Attrs ReduceAttrs(const ReduceCase& c) {
  Attrs attrs;
  if (c.dims.size() == 1) {
    attrs["dim"] = IntA(c.dims[0]);
  } else if (!c.dims.empty()) {
    attrs["dim"] = StrA(absl::StrJoin(c.dims, ","));
  }
  attrs["keepdim"] = BoolA(c.keepdim);
  return attrs;
}

std::string Describe(const std::string& op, ir::DType t, const ReduceCase& c) {
  return op + " " + DTypeText(t) + ShapeText(c.shape) + " dim=[" +
         absl::StrJoin(c.dims, ",") +
         "] keepdim=" + (c.keepdim ? "true" : "false");
}

// --- sum, mean.
// ---------------------------------------------------------------

TEST(ReductionOpsTest, SumAndMeanMatchTheReference) {
  const std::vector<ReduceCase> cases = {
      {{3, 4, 5}, {1}, false},    {{3, 4, 5}, {0, 2}, true},
      {{3, 4, 5}, {-1}, false},   {{3, 4, 5}, {}, false},
      {{3, 4, 5}, {}, true},      {{2, 0, 3}, {1}, false},
      {{0, 3}, {1}, false},       {{7}, {0}, true},
      {{2, 130}, {-1, 0}, false},
  };
  for (ir::DType dtype : kFloatTypes) {
    for (const ReduceCase& c : cases) {
      for (Kind kind : {Kind::kSum, Kind::kMean}) {
        const std::string op = kind == Kind::kSum ? "sum" : "mean";
        const std::string what = Describe(op, dtype, c);
        const HostTensor x = Random(dtype, c.shape, c.shape.size() + 7);
        const std::vector<bool> reduced = Mask(c.shape, c.dims);
        const Shape out_shape = Reduced(c.shape, reduced, c.keepdim);
        auto out =
            CompileAndRun(OneOpGraph(op, {x.type()}, {Type(dtype, out_shape)},
                                     ReduceAttrs(c)),
                          {x});
        ASSERT_TRUE(out.ok()) << what << ": " << out.status();
        std::vector<double> abs_sum;
        const std::vector<double> want = RefReduce(x, reduced, kind, &abs_sum);
        const int64_t n =
            NumElements(c.shape) / std::max<int64_t>(1, NumElements(out_shape));
        ExpectClose((*out)[0], want, SumTolerance(dtype, want, abs_sum, n),
                    what);
      }
    }
  }
}

// 4096 ones: an f16 accumulator would stop at 2048, a bf16 one at 256.
TEST(ReductionOpsTest, HalfTypesAccumulateInF32) {
  for (ir::DType dtype : {ir::FLOAT16, ir::BFLOAT16}) {
    const HostTensor x{dtype, {4096}, std::vector<double>(4096, 1.0)};
    auto out =
        CompileAndRun(OneOpGraph("sum", {x.type()}, {Type(dtype, {})}), {x});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectExact((*out)[0], {4096}, DTypeText(dtype));
  }
}

TEST(ReductionOpsTest, SumOfIntegersWidensToTheOutputType) {
  const HostTensor x =
      Tensor(ir::INT32, {3, 2}, {2147483647, 1, 2147483647, -5, 7, 8});
  auto out = CompileAndRun(
      OneOpGraph("sum", {x.type()}, {Type(ir::INT64, {2})}, {{"dim", IntA(0)}}),
      {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], {2147483647.0 * 2 + 7, 4}, "int32 -> int64");

  const HostTensor y =
      Tensor(ir::INT64, {2, 2}, {double(1LL << 40), 3, double(1LL << 41), -3});
  out = CompileAndRun(OneOpGraph("sum", {y.type()}, {Type(ir::INT64, {2, 1})},
                                 {{"dim", IntA(1)}, {"keepdim", BoolA(true)}}),
                      {y});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], {double((1LL << 40) + 3), double((1LL << 41) - 3)},
              "int64");
}

// --- amax, amin, max, min.
// ------------------------------------------------------

TEST(ReductionOpsTest, MaxAndMinPropagateNanAndKeepInfinities) {
  // Rows: plain, NaN in the middle, infinities, all -inf.
  const std::vector<double> data = {1,     -3,    2.5,   0.5,  //
                                    4,     kNan,  -7,    9,    //
                                    -kInf, 3,     kInf,  -1,   //
                                    -kInf, -kInf, -kInf, -kInf};
  for (ir::DType dtype : kFloatTypes) {
    const HostTensor x = Tensor(dtype, {4, 4}, data);
    for (const std::string op : {"amax", "amin", "max", "min"}) {
      const bool max = op == "amax" || op == "max";
      for (const ReduceCase& c : std::vector<ReduceCase>{{{4, 4}, {-1}, false},
                                                         {{4, 4}, {0}, true},
                                                         {{4, 4}, {}, false}}) {
        const std::vector<bool> reduced = Mask(c.shape, c.dims);
        auto out = CompileAndRun(
            OneOpGraph(op, {x.type()},
                       {Type(dtype, Reduced(c.shape, reduced, c.keepdim))},
                       ReduceAttrs(c)),
            {x});
        ASSERT_TRUE(out.ok()) << Describe(op, dtype, c) << out.status();
        ExpectExact((*out)[0],
                    RefReduce(x, reduced, max ? Kind::kMax : Kind::kMin),
                    Describe(op, dtype, c));
      }
    }
  }
}

TEST(ReductionOpsTest, MaxOfIntegers) {
  const HostTensor x =
      Tensor(ir::INT64, {2, 3}, {-9e15, -8e15, -7e15, 5, 9e15, -1});
  for (const std::string op : {"amax", "amin"}) {
    auto out = CompileAndRun(
        OneOpGraph(op, {x.type()}, {Type(ir::INT64, {2})}, {{"dim", IntA(1)}}),
        {x});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectExact((*out)[0],
                RefReduce(x, Mask(x.shape, {1}),
                          op == "amax" ? Kind::kMax : Kind::kMin),
                op);
  }
}

// Bool max/min are any/all (PyTorch allows them); empty reduced dims give 0
// for sum and NaN for mean (0 / 0), as torch 2.13 CPU prints them.
TEST(ReductionOpsTest, BoolMaxMinAndEmptySumMean) {
  const HostTensor b = Tensor(ir::BOOL, {2, 2}, {1, 0, 0, 0});
  struct Case {
    std::string op;
    Shape out;
    Attrs attrs;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {{"amax", {2}, {{"dim", IntA(1)}}, {1, 0}},
                                   {"amin", {2}, {{"dim", IntA(1)}}, {0, 0}},
                                   {"max", {}, {}, {1}},
                                   {"min", {}, {}, {0}}};
  for (const Case& c : cases) {
    auto out = CompileAndRun(
        OneOpGraph(c.op, {b.type()}, {Type(ir::BOOL, c.out)}, c.attrs), {b});
    ASSERT_TRUE(out.ok()) << c.op << ": " << out.status();
    ExpectExact((*out)[0], c.want, c.op + " of bool");
  }
  for (ir::DType t : {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32}) {
    const HostTensor empty{t, {2, 0}, {}};
    auto sum = CompileAndRun(
        OneOpGraph("sum", {empty.type()}, {Type(t, {2})}, {{"dim", IntA(1)}}),
        {empty});
    ASSERT_TRUE(sum.ok()) << sum.status();
    ExpectExact((*sum)[0], {0, 0}, "sum over an empty dim");
    auto mean = CompileAndRun(
        OneOpGraph("mean", {empty.type()}, {Type(t, {2})}, {{"dim", IntA(1)}}),
        {empty});
    ASSERT_TRUE(mean.ok()) << mean.status();
    ExpectExact((*mean)[0], {kNan, kNan}, "mean over an empty dim");
  }
  const HostTensor ints{ir::INT32, {2, 0}, {}};
  auto int_sum = CompileAndRun(
      OneOpGraph("sum", {ints.type()}, {Type(ir::INT64, {2})},
                 {{"dim", IntA(1)}}),
      {ints});
  ASSERT_TRUE(int_sum.ok()) << int_sum.status();
  ExpectExact((*int_sum)[0], {0, 0}, "int sum over an empty dim");
}

// mean of an integer tensor raises with PyTorch's message; with a float
// output (mean(x, dtype=torch.float32)) it is the float mean.
TEST(ReductionOpsTest, MeanOfIntegersAsPyTorch) {
  const HostTensor x = Tensor(ir::INT32, {3}, {1, 2, 4});
  auto bad =
      CompileAndRun(OneOpGraph("mean", {x.type()}, {Type(ir::INT32, {})}), {x});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("mean(): could not infer output dtype. Input dtype "
                        "must be either a floating point or complex dtype. "
                        "Got: Int"));
  auto good = CompileAndRun(
      OneOpGraph("mean", {x.type()}, {Type(ir::FLOAT32, {})}), {x});
  ASSERT_TRUE(good.ok()) << good.status();
  ExpectExact((*good)[0], {static_cast<float>(7.0f / 3.0f)}, "mean as float32");
}

// --- argmax, argmin, max/min with indices.
// ---------------------------------------

TEST(ReductionOpsTest, ArgmaxTakesTheFirstIndexAndNanWins) {
  const std::vector<double> data = {1,     3,     3,     2,      // tie: 1
                                    kNan,  1,     kNan,  5,      // NaN: 0
                                    -kInf, -kInf, -kInf, -kInf,  // all -inf: 0
                                    1,     kNan,  7,     7};     // NaN: 1
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    const HostTensor x = Tensor(dtype, {4, 4}, data);
    for (bool max : {true, false}) {
      const std::string op = max ? "argmax" : "argmin";
      for (const ReduceCase& c : std::vector<ReduceCase>{{{4, 4}, {-1}, false},
                                                         {{4, 4}, {0}, true},
                                                         {{4, 4}, {}, false}}) {
        const std::vector<bool> reduced = Mask(c.shape, c.dims);
        auto out = CompileAndRun(
            OneOpGraph(op, {x.type()},
                       {Type(ir::INT64, Reduced(c.shape, reduced, c.keepdim))},
                       ReduceAttrs(c)),
            {x});
        ASSERT_TRUE(out.ok()) << Describe(op, dtype, c) << out.status();
        ExpectExact((*out)[0], RefArg(x, reduced, max), Describe(op, dtype, c));
      }
    }
  }
  // Flattened over several dims, and on integers.
  const HostTensor y = Random(ir::INT32, {3, 4, 5}, 3, -50, 50);
  for (bool max : {true, false}) {
    auto out = CompileAndRun(OneOpGraph(max ? "argmax" : "argmin", {y.type()},
                                        {Type(ir::INT64, {})}),
                             {y});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectExact((*out)[0], RefArg(y, Mask(y.shape, {}), max), "int32 flat");
  }
}

// Rows of >= 256 elements, a multiple of 16, reduce over 16 lanes first
// (element i in lane i % 16) and then across the lanes: ties, NaNs and
// infinities put in different lanes still give PyTorch's index.
TEST(ReductionOpsTest, ArgReductionOfLongRowsKeepsTheFirstIndex) {
  const int64_t n = 512;
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32}) {
    const bool is_float = dtype != ir::INT32;
    // Few distinct values: ties in every row, across lanes and within one.
    HostTensor x = Random(dtype, {6, n}, 5, -3, 3);
    for (double& v : x.values) v = std::floor(v);
    auto set = [&](int64_t row, int64_t i, double v) { x.values[row * n + i] = v; };
    for (int64_t i : {37, 21, 400}) set(0, i, 9);    // the max's tie: 21 (lane 5)
    for (int64_t i : {20, 5, 511}) set(1, i, -9);    // the min's tie: 5 (lane 5, not 4)
    if (is_float) {
      for (int64_t i : {300, 17}) set(2, i, kNan);  // NaN: 17
      set(2, 33, 9);
      for (int64_t i = 0; i < n; ++i) set(3, i, -kInf);  // all -inf: 0
      set(4, 499, kInf);  // +inf: 499
    }
    for (bool max : {true, false}) {
      for (bool keepdim : {false, true}) {
        const std::string op = max ? "argmax" : "argmin";
        const ReduceCase c{{6, n}, {-1}, keepdim};
        const std::vector<bool> reduced = Mask(c.shape, c.dims);
        auto out = CompileAndRun(
            OneOpGraph(op, {x.type()},
                       {Type(ir::INT64, Reduced(c.shape, reduced, keepdim))},
                       ReduceAttrs(c)),
            {x});
        ASSERT_TRUE(out.ok()) << Describe(op, dtype, c) << out.status();
        ExpectExact((*out)[0], RefArg(x, reduced, max), Describe(op, dtype, c));
      }
      auto both = CompileAndRun(
          OneOpGraph(max ? "max" : "min", {x.type()},
                     {Type(dtype, {6}), Type(ir::INT64, {6})}, {{"dim", IntA(1)}}),
          {x});
      ASSERT_TRUE(both.ok()) << both.status();
      std::vector<double> values;
      const std::vector<double> index = RefArg(x, Mask(x.shape, {1}), max, &values);
      ExpectExact((*both)[0], values, "values of long rows");
      ExpectExact((*both)[1], index, "indices of long rows");
    }
  }
  // One row, as a greedy decode step's argmax over its logits.
  const HostTensor logits = Random(ir::BFLOAT16, {1, 1, 4096}, 9, -8, 8);
  auto out = CompileAndRun(
      OneOpGraph("argmax", {logits.type()}, {Type(ir::INT64, {1, 1})},
                 {{"dim", IntA(-1)}}),
      {logits});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], RefArg(logits, Mask(logits.shape, {-1}), true), "one row");
}

TEST(ReductionOpsTest, MaxWithTwoOutputsReturnsValuesAndIndices) {
  for (ir::DType dtype : kFloatTypes) {
    HostTensor x = Random(dtype, {3, 5, 2}, 11);
    x.values[4] = kNan;
    for (bool max : {true, false}) {
      auto out = CompileAndRun(
          OneOpGraph(max ? "max" : "min", {x.type()},
                     {Type(dtype, {3, 2}), Type(ir::INT64, {3, 2})},
                     {{"dim", IntA(1)}}),
          {x});
      ASSERT_TRUE(out.ok()) << out.status();
      std::vector<double> values;
      const std::vector<double> index =
          RefArg(x, Mask(x.shape, {1}), max, &values);
      ExpectExact((*out)[0], values, "values");
      ExpectExact((*out)[1], index, "indices");
    }
  }
}

TEST(ReductionOpsTest, BadReductionsAreErrors) {
  const ir::TensorType empty_rows = Type(ir::FLOAT32, {2, 0});
  auto s =
      CompileAndRun(OneOpGraph("amax", {empty_rows}, {Type(ir::FLOAT32, {2})},
                               {{"dim", IntA(1)}}),
                    {HostTensor{ir::FLOAT32, {2, 0}, {}}});
  EXPECT_THAT(s.status().message(), HasSubstr("non-zero size"));
  s = CompileAndRun(OneOpGraph("argmax", {empty_rows}, {Type(ir::INT64, {})}),
                    {HostTensor{ir::FLOAT32, {2, 0}, {}}});
  EXPECT_THAT(s.status().message(), HasSubstr("non-zero size"));
  const ir::TensorType t = Type(ir::FLOAT32, {2, 3});
  s = CompileAndRun(
      OneOpGraph("sum", {t}, {Type(ir::FLOAT32, {2})}, {{"dim", IntA(2)}}), {});
  EXPECT_THAT(s.status().message(),
              HasSubstr("expected to be in range of [-2, 1], but got 2"));
  s = CompileAndRun(
      OneOpGraph("sum", {t}, {Type(ir::FLOAT32, {})}, {{"dim", StrA("1,-1")}}),
      {});
  EXPECT_THAT(s.status().message(), HasSubstr("appears multiple times"));
  s = CompileAndRun(
      OneOpGraph("sum", {t}, {Type(ir::FLOAT32, {3})}, {{"dim", IntA(1)}}), {});
  EXPECT_THAT(s.status().message(), HasSubstr("expected [2]"));
}

// --- softmax, log_softmax. ---------------------------------------------------

std::vector<double> RefSoftmax(const HostTensor& x, int dim, bool log) {
  const int rank = x.shape.size();
  std::vector<bool> reduced(rank, false);
  reduced[dim < 0 ? dim + rank : dim] = true;
  const std::vector<double> max = RefReduce(x, reduced, Kind::kMax);
  const Indexing ix = IndexReduction(x.shape, reduced);
  std::vector<double> sum(max.size(), 0.0);
  for (size_t i = 0; i < x.values.size(); ++i) {
    sum[ix.out[i]] += std::exp(x.values[i] - max[ix.out[i]]);
  }
  std::vector<double> y;
  for (size_t i = 0; i < x.values.size(); ++i) {
    const double shifted = x.values[i] - max[ix.out[i]];
    y.push_back(log ? shifted - std::log(sum[ix.out[i]])
                    : std::exp(shifted) / sum[ix.out[i]]);
  }
  return y;
}

TEST(ReductionOpsTest, SoftmaxMatchesTheReference) {
  struct Case {
    Shape shape;
    int dim;
  };
  for (ir::DType dtype : kFloatTypes) {
    for (const Case& c : std::vector<Case>{
             {{3, 4, 5}, -1}, {{3, 4, 5}, 0}, {{3, 4, 5}, 1}, {{2, 33}, 1}}) {
      const HostTensor x = Random(dtype, c.shape, c.dim + 5, -6, 6);
      for (bool log : {false, true}) {
        const std::string op = log ? "log_softmax" : "softmax";
        const std::string what = op + " " + DTypeText(dtype) +
                                 ShapeText(c.shape) +
                                 " dim=" + std::to_string(c.dim);
        auto out = CompileAndRun(
            OneOpGraph(op, {x.type()}, {x.type()}, {{"dim", IntA(c.dim)}}),
            {x});
        ASSERT_TRUE(out.ok()) << what << ": " << out.status();
        const std::vector<double> want = RefSoftmax(x, c.dim, log);
        ExpectClose((*out)[0], want,
                    RelTolerance(dtype, want, log ? 1e-5 : 1e-6), what);
      }
    }
  }
}

TEST(ReductionOpsTest, SoftmaxEdgeRows) {
  // A row of -inf is NaN (as PyTorch), one -inf is 0 (log: -inf), huge
  // values do not overflow, a NaN poisons its row.
  const HostTensor x = Tensor(ir::FLOAT32, {4, 3},
                              {-kInf, -kInf, -kInf,  //
                               -kInf, 1, 2,          //
                               1000, 1001, 1002,     //
                               1, kNan, 2});
  for (bool log : {false, true}) {
    auto out =
        CompileAndRun(OneOpGraph(log ? "log_softmax" : "softmax", {x.type()},
                                 {x.type()}, {{"dim", IntA(-1)}}),
                      {x});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<double> want = RefSoftmax(x, -1, log);
    EXPECT_TRUE(std::isnan(want[0]) && std::isnan(want[9]));
    EXPECT_EQ(want[3], log ? -kInf : 0.0);
    ExpectClose((*out)[0], want, RelTolerance(ir::FLOAT32, want, 1e-6),
                log ? "log_softmax" : "softmax");
  }
}

// Half input, f32 output (PyTorch's _softmax with half_to_float).
TEST(ReductionOpsTest, SoftmaxToAWiderOutput) {
  const HostTensor x = Random(ir::FLOAT16, {2, 9}, 4, -4, 4);
  auto out =
      CompileAndRun(OneOpGraph("softmax", {x.type()},
                               {Type(ir::FLOAT32, {2, 9})}, {{"dim", IntA(1)}}),
                    {x});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> want = RefSoftmax(x, 1, false);
  ExpectClose((*out)[0], want, RelTolerance(ir::FLOAT32, want, 1e-6),
              "f16->f32");
}

int CountReductions(mlir::ModuleOp m) {
  int n = 0;
  m.walk([&](mlir::linalg::GenericOp op) {
    if (op.getNumReductionLoops() > 0) ++n;
  });
  return n;
}

// SPEC P3: reductions stay separate generics through fusion, and softmax's
// exp, which feeds both the sum and the division, is computed once.
TEST(ReductionOpsTest, FusionKeepsReductionsAndDoesNotRecomputeExp) {
  struct Case {
    std::string op;
    Attrs attrs;
    int generics;  // before and after fusion
    int reductions;
    int exps;
  };
  const ir::TensorType t = Type(ir::FLOAT16, {4, 8});
  const ir::TensorType w = Type(ir::FLOAT16, {8});
  for (const Case& c : std::vector<Case>{
           {"softmax", {{"dim", IntA(1)}}, 4, 2, 1},
           {"log_softmax", {{"dim", IntA(1)}}, 3, 2, 1},
           {"layer_norm", {{"normalized_ndim", IntA(1)}}, 3, 2, 0},
           {"rms_norm", {}, 2, 1, 0},
           {"mean", {{"dim", IntA(1)}}, 2, 1, 0},
       }) {
    std::vector<ir::TensorType> inputs = {t};
    if (c.op == "layer_norm") inputs = {t, w, w};
    if (c.op == "rms_norm") inputs = {t, w};
    const ir::TensorType out = c.op == "mean" ? Type(ir::FLOAT16, {4}) : t;
    auto context = CreateCompilerContext();
    auto module =
        ImportGraph(OneOpGraph(c.op, inputs, {out}, c.attrs), context.get());
    ASSERT_TRUE(module.ok()) << module.status();
    EXPECT_EQ(Count<mlir::linalg::GenericOp>(**module), c.generics) << c.op;
    ASSERT_TRUE(RunStages(**module, FusionStages(), "test").ok());
    EXPECT_EQ(Count<mlir::linalg::GenericOp>(**module), c.generics) << c.op;
    EXPECT_EQ(CountReductions(**module), c.reductions) << c.op;
    EXPECT_EQ(Count<mlir::math::ExpOp>(**module), c.exps) << c.op;
  }
}

// --- layer_norm, rms_norm. ---------------------------------------------------

// (x - mean) / sqrt(var + eps) * w + b over the trailing `ndim` dims.
std::vector<double> RefNorm(const HostTensor& x, const HostTensor* w,
                            const HostTensor* b, int ndim, double eps,
                            bool rms) {
  const int rank = x.shape.size();
  std::vector<bool> reduced(rank, false);
  for (int d = rank - ndim; d < rank; ++d) reduced[d] = true;
  const Indexing ix = IndexReduction(x.shape, reduced);
  const std::vector<double> mean =
      rms ? std::vector<double>(NumElements(Reduced(x.shape, reduced, false)),
                                0)
          : RefReduce(x, reduced, Kind::kMean);
  std::vector<double> var(mean.size(), 0.0), count(mean.size(), 0.0);
  for (size_t i = 0; i < x.values.size(); ++i) {
    const double d = x.values[i] - mean[ix.out[i]];
    var[ix.out[i]] += d * d;
    count[ix.out[i]] += 1;
  }
  std::vector<double> y;
  for (size_t i = 0; i < x.values.size(); ++i) {
    const int64_t o = ix.out[i];
    double v = (x.values[i] - mean[o]) / std::sqrt(var[o] / count[o] + eps);
    if (w) v *= w->values[ix.within[i]];
    if (b) v += b->values[ix.within[i]];
    y.push_back(v);
  }
  return y;
}

TEST(ReductionOpsTest, LayerNormMatchesTheReference) {
  struct Case {
    Shape shape;
    int ndim;
    bool weight, bias;
    double eps;
  };
  for (ir::DType dtype : kFloatTypes) {
    for (const Case& c : std::vector<Case>{{{4, 6}, 1, true, true, 1e-5},
                                           {{2, 3, 4}, 2, true, false, 1e-3},
                                           {{5, 8}, 1, false, false, 1e-5},
                                           {{3, 5}, 1, false, true, 1e-5},
                                           {{2, 0, 4}, 1, true, true, 1e-5}}) {
      const HostTensor x = Random(dtype, c.shape, 21, -3, 5);
      const Shape norm(c.shape.end() - c.ndim, c.shape.end());
      const HostTensor w = Random(dtype, norm, 22), b = Random(dtype, norm, 23);
      std::vector<HostTensor> inputs = {x};
      if (c.weight) inputs.push_back(w);
      if (c.bias) inputs.push_back(b);
      std::vector<ir::TensorType> types;
      for (const HostTensor& t : inputs) types.push_back(t.type());
      Attrs attrs = {{"normalized_ndim", IntA(c.ndim)}, {"eps", FloatA(c.eps)}};
      if (c.bias && !c.weight) attrs["has_bias"] = BoolA(true);
      const std::string what =
          "layer_norm " + DTypeText(dtype) + ShapeText(c.shape);
      auto out = CompileAndRun(
          OneOpGraph("layer_norm", types, {x.type()}, attrs), inputs);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      const std::vector<double> want =
          RefNorm(x, c.weight ? &w : nullptr, c.bias ? &b : nullptr, c.ndim,
                  c.eps, false);
      ExpectClose((*out)[0], want, RelTolerance(dtype, want, 2e-5), what);
    }
  }
}

// native_layer_norm: ATen's name and attributes (normalized_shape as an int
// list), with mean and rstd outputs shaped [..., 1].
TEST(ReductionOpsTest, NativeLayerNormReturnsMeanAndRstd) {
  for (ir::DType dtype : kFloatTypes) {
    const HostTensor x = Random(dtype, {3, 2, 8}, 31, -3, 5);
    const HostTensor w = Random(dtype, {8}, 32), b = Random(dtype, {8}, 33);
    const std::string what = "native_layer_norm " + DTypeText(dtype);
    auto out = CompileAndRun(
        OneOpGraph("native_layer_norm", {x.type(), w.type(), b.type()},
                   {x.type(), Type(dtype, {3, 2, 1}), Type(dtype, {3, 2, 1})},
                   {{"normalized_shape", StrA("8")}, {"eps", FloatA(1e-5)}}),
        {x, w, b});
    ASSERT_TRUE(out.ok()) << what << ": " << out.status();
    const std::vector<double> want = RefNorm(x, &w, &b, 1, 1e-5, false);
    ExpectClose((*out)[0], want, RelTolerance(dtype, want, 2e-5), what);
    std::vector<double> mean, rstd;
    for (int r = 0; r < 6; ++r) {
      double m = 0, v = 0;
      for (int j = 0; j < 8; ++j) m += x.values[r * 8 + j] / 8;
      for (int j = 0; j < 8; ++j) {
        v += (x.values[r * 8 + j] - m) * (x.values[r * 8 + j] - m) / 8;
      }
      mean.push_back(m);
      rstd.push_back(1 / std::sqrt(v + 1e-5));
    }
    ExpectClose((*out)[1], mean, RelTolerance(dtype, mean, 2e-5), what + " mean");
    ExpectClose((*out)[2], rstd, RelTolerance(dtype, rstd, 2e-5), what + " rstd");
  }
  // A normalized_shape that is not the input's trailing shape is refused.
  const HostTensor x = Random(ir::FLOAT32, {3, 8}, 34);
  auto out = CompileAndRun(
      OneOpGraph("layer_norm", {x.type()}, {x.type()},
                 {{"normalized_shape", StrA("4")}}),
      {x});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("normalized_shape=[4]"),
            std::string::npos)
      << out.status();
}

// native_layer_norm(x, None, bias) as fx_to_ir describes it: the absent
// weight is "has_weight" false, so the one optional input is the bias (it was
// taken for the weight).
TEST(ReductionOpsTest, NativeLayerNormWithBiasOnly) {
  for (ir::DType dtype : kFloatTypes) {
    const HostTensor x = Random(dtype, {3, 8}, 35, -3, 5);
    const HostTensor b = Random(dtype, {8}, 36);
    const std::string what = "native_layer_norm bias only " + DTypeText(dtype);
    auto out = CompileAndRun(
        OneOpGraph("native_layer_norm", {x.type(), b.type()},
                   {x.type(), Type(dtype, {3, 1}), Type(dtype, {3, 1})},
                   {{"normalized_shape", StrA("8")},
                    {"eps", FloatA(1e-5)},
                    {"has_weight", BoolA(false)}}),
        {x, b});
    ASSERT_TRUE(out.ok()) << what << ": " << out.status();
    const std::vector<double> want = RefNorm(x, nullptr, &b, 1, 1e-5, false);
    ExpectClose((*out)[0], want, RelTolerance(dtype, want, 2e-5), what);
  }
}

TEST(ReductionOpsTest, RmsNormMatchesTheReference) {
  struct Case {
    Shape shape;
    int ndim;  // 0: from the weight
    bool weight;
    std::optional<double> eps;
  };
  for (ir::DType dtype : kFloatTypes) {
    for (const Case& c :
         std::vector<Case>{{{4, 16}, 0, true, 1e-6},
                           {{2, 3, 8}, 1, false, std::nullopt},
                           {{2, 3, 4}, 0, true, std::nullopt}}) {
      const int ndim =
          c.ndim ? c.ndim : (c.shape.size() == 3 && c.weight ? 2 : 1);
      const HostTensor x = Random(dtype, c.shape, 31, -2, 2);
      const HostTensor w =
          Random(dtype, Shape(c.shape.end() - ndim, c.shape.end()), 32);
      std::vector<HostTensor> inputs = {x};
      if (c.weight) inputs.push_back(w);
      std::vector<ir::TensorType> types;
      for (const HostTensor& t : inputs) types.push_back(t.type());
      Attrs attrs;
      if (c.ndim) attrs["normalized_ndim"] = IntA(c.ndim);
      if (c.eps) attrs["eps"] = FloatA(*c.eps);
      const std::string what =
          "rms_norm " + DTypeText(dtype) + ShapeText(c.shape);
      auto out = CompileAndRun(OneOpGraph("rms_norm", types, {x.type()}, attrs),
                               inputs);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      // PyTorch's default eps is float's epsilon for every dtype.
      const std::vector<double> want =
          RefNorm(x, c.weight ? &w : nullptr, nullptr, ndim,
                  c.eps.value_or(FLT_EPSILON), /*rms=*/true);
      ExpectClose((*out)[0], want, RelTolerance(dtype, want, 2e-5), what);
    }
  }
}

// Tiny inputs make eps matter: the default must be FLT_EPSILON, not the
// dtype's epsilon.
TEST(ReductionOpsTest, RmsNormDefaultEpsIsFloatEpsilon) {
  const HostTensor x = Tensor(ir::FLOAT16, {1, 4}, {1e-3, -2e-3, 3e-3, 5e-4});
  auto out = CompileAndRun(OneOpGraph("rms_norm", {x.type()}, {x.type()}), {x});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> want =
      RefNorm(x, nullptr, nullptr, 1, FLT_EPSILON, true);
  ExpectClose((*out)[0], want, RelTolerance(ir::FLOAT16, want, 0), "rms_norm");
}

// --- prod, any, all.
// ---------------------------------------------------------

// prod multiplies in index order in the compute type: f32 for half types,
// rounded once (opmath); integers and bool give int64.
TEST(ReductionOpsTest, ProdMultipliesInTheComputeType) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32,
                          ir::INT64, ir::BOOL}) {
    const bool is_float =
        dtype == ir::FLOAT32 || dtype == ir::FLOAT16 || dtype == ir::BFLOAT16;
    const ir::DType out = is_float ? dtype : ir::INT64;
    const HostTensor x =
        is_float ? Random(dtype, {6, 40}, 3, 0.8, 1.25)
                 : Random(dtype, {6, 40}, 3, dtype == ir::BOOL ? 0.5 : -3.0,
                          dtype == ir::BOOL ? 2.0 : 3.0);
    for (const ReduceCase& c : std::vector<ReduceCase>{{{6, 40}, {1}, false},
                                                       {{6, 40}, {0}, true},
                                                       {{6, 40}, {}, false}}) {
      const std::vector<bool> reduced = Mask(c.shape, c.dims);
      const Indexing ix = IndexReduction(c.shape, reduced);
      const Shape out_shape = Reduced(c.shape, reduced, c.keepdim);
      std::vector<double> want(NumElements(Reduced(c.shape, reduced, false)),
                               1);
      std::vector<int64_t> iwant(want.size(), 1);
      // Row-major input order is the kernel's order within each output.
      for (size_t i = 0; i < x.values.size(); ++i) {
        double& w = want[ix.out[i]];
        w = static_cast<float>(static_cast<float>(w) * static_cast<float>(x.values[i]));
        iwant[ix.out[i]] *= static_cast<int64_t>(x.values[i]);
      }
      if (is_float) {
        for (double& w : want) w = RoundTo(out, w);
      } else {
        want.assign(iwant.begin(), iwant.end());
      }
      Attrs attrs = ReduceAttrs(c);
      auto got = CompileAndRun(
          OneOpGraph("prod", {x.type()}, {Type(out, out_shape)}, attrs), {x});
      ASSERT_TRUE(got.ok()) << Describe("prod", dtype, c) << got.status();
      ExpectExact((*got)[0], want, Describe("prod", dtype, c));
    }
  }
  const HostTensor empty{ir::FLOAT16, {2, 0}, {}};
  auto got =
      CompileAndRun(OneOpGraph("prod", {empty.type()}, {Type(ir::FLOAT16, {2})},
                               {{"dim", IntA(1)}}),
                    {empty});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {1, 1}, "prod over an empty dim");
}

// any/all test x != 0: NaN counts as true; empty dims give false / true.
TEST(ReductionOpsTest, AnyAndAllOfEveryDtype) {
  const std::vector<double> data = {0, 0, 0, 2, 0, -1, kNan, 1, 1};
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32,
                          ir::INT64, ir::BOOL}) {
    std::vector<double> values = data;
    const bool is_float =
        dtype == ir::FLOAT32 || dtype == ir::FLOAT16 || dtype == ir::BFLOAT16;
    if (!is_float) values[6] = 5;
    if (dtype == ir::BOOL) {
      for (double& v : values) v = v != 0;
    }
    const HostTensor x = Tensor(dtype, {3, 3}, values);
    for (const std::string op : {"any", "all"}) {
      const bool any = op == "any";
      auto rows = CompileAndRun(
          OneOpGraph(op, {x.type()}, {Type(ir::BOOL, {3})}, {{"dim", IntA(1)}}),
          {x});
      ASSERT_TRUE(rows.ok()) << op << " " << DTypeText(dtype) << rows.status();
      ExpectExact(
          (*rows)[0],
          any ? std::vector<double>{0, 1, 1} : std::vector<double>{0, 0, 1},
          op + " rows " + DTypeText(dtype));
      auto cols = CompileAndRun(
          OneOpGraph(op, {x.type()}, {Type(ir::BOOL, {1, 3})},
                     {{"dim", StrA("0")}, {"keepdim", BoolA(true)}}),
          {x});
      ASSERT_TRUE(cols.ok()) << cols.status();
      ExpectExact(
          (*cols)[0],
          any ? std::vector<double>{1, 1, 1} : std::vector<double>{0, 0, 0},
          op + " cols " + DTypeText(dtype));
      const HostTensor empty{dtype, {2, 0}, {}};
      auto e =
          CompileAndRun(OneOpGraph(op, {empty.type()}, {Type(ir::BOOL, {2})},
                                   {{"dim", IntA(1)}}),
                        {empty});
      ASSERT_TRUE(e.ok()) << e.status();
      ExpectExact((*e)[0], {any ? 0.0 : 1.0, any ? 0.0 : 1.0},
                  op + " of nothing");
    }
  }
}

}  // namespace
}  // namespace rbln::compiler

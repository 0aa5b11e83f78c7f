// spec: P3
// Scans against references that accumulate as ATen's CPU kernels (double
// for float32, float for half types, int64 for integers, in order), so
// cumsum/cumprod/cummax/cummin must match exactly; logcumsumexp within
// rounding.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/reduction_reference.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ATen's acc_type accumulation of one row, rounded to `out` per element.
std::vector<double> RefCum(const std::vector<double>& row, ir::DType out,
                           bool prod) {
  std::vector<double> r;
  if (out == ir::FLOAT32) {
    double acc = prod ? 1 : 0;
    for (double v : row) {
      acc = prod ? acc * v : acc + v;
      r.push_back(static_cast<float>(acc));
    }
  } else if (out == ir::FLOAT16 || out == ir::BFLOAT16) {
    float acc = prod ? 1 : 0;
    for (double v : row) {
      acc = prod ? acc * static_cast<float>(v) : acc + static_cast<float>(v);
      r.push_back(RoundTo(out, acc));
    }
  } else {
    int64_t acc = prod ? 1 : 0;
    for (double v : row) {
      const int64_t x = static_cast<int64_t>(v);
      acc = prod ? static_cast<int64_t>(static_cast<uint64_t>(acc) *
                                        static_cast<uint64_t>(x))
                 : acc + x;
      r.push_back(out == ir::INT32 ? static_cast<int32_t>(acc)
                                   : static_cast<double>(acc));
    }
  }
  return r;
}

// cummax/cummin: the last index of the running extreme; a NaN takes over
// and stays.
void RefCumExtreme(const std::vector<double>& row, bool max,
                   std::vector<double>* values, std::vector<double>* indices) {
  double out = row[0];
  int64_t idx = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    const double v = row[i];
    if (std::isnan(v) || (!std::isnan(out) && (max ? v >= out : v <= out))) {
      out = v;
      idx = i;
    }
    values->push_back(out);
    indices->push_back(idx);
  }
}

HostTensor Input(ir::DType dtype, const Shape& shape, uint32_t seed) {
  if (dtype == ir::BOOL) return Random(dtype, shape, seed, 0.0, 2.0);
  if (dtype == ir::INT32 || dtype == ir::INT64) {
    return Random(dtype, shape, seed, -5.0, 6.0);
  }
  return Random(dtype, shape, seed, -2.0, 2.0);
}

ir::DType SumDType(ir::DType in) { return IsFloatDType(in) ? in : ir::INT64; }

const ir::DType kAll[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16,
                          ir::INT32,   ir::INT64,   ir::BOOL};

TEST(ScanOpsTest, CumsumAndCumprodAccumulateLikeAten) {
  const std::vector<std::pair<Shape, int>> cases = {{{5, 5, 5}, 0},
                                                    {{5, 5, 5}, 1},
                                                    {{5, 5, 5}, -1},
                                                    {{3000}, 0},
                                                    {{7, 1}, 1}};
  for (ir::DType dtype : kAll) {
    for (const auto& [shape, dim] : cases) {
      const int d = dim < 0 ? dim + shape.size() : dim;
      HostTensor x = Input(dtype, shape, 11);
      for (bool prod : {false, true}) {
        if (prod && (dtype == ir::FLOAT32 || dtype == ir::FLOAT16 ||
                     dtype == ir::BFLOAT16)) {
          // Values near 1 so that long products stay finite.
          x = Random(dtype, shape, 12, 0.9, 1.1);
        }
        const ir::DType out = SumDType(dtype);
        std::vector<std::vector<double>> rows;
        for (const auto& row : Rows(x, d)) {
          rows.push_back(RefCum(row, out, prod));
        }
        const std::string op = prod ? "cumprod" : "cumsum";
        const std::string what = absl::StrCat(op, " ", DTypeText(dtype),
                                              ShapeText(shape), " dim=", dim);
        auto got = CompileAndRun(OneOpGraph(op, {x.type()}, {Type(out, shape)},
                                            {{"dim", IntA(dim)}}),
                                 {x});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectExact((*got)[0], FromRows(rows, shape, d), what);
      }
    }
  }
}

// A dtype= argument converts the input first and accumulates in the
// output's acc type: int32 -> float16 rounds the integers to half.
TEST(ScanOpsTest, CumsumWithAnOutputDtype) {
  const HostTensor x = Tensor(ir::INT32, {4}, {2049, 1, 1, 4097});
  auto got =
      CompileAndRun(OneOpGraph("cumsum", {x.type()}, {Type(ir::FLOAT16, {4})},
                               {{"dim", IntA(0)}, {"dtype", StrA("float16")}}),
                    {x});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], RefCum({2048, 1, 1, 4096}, ir::FLOAT16, false),
              "int32 -> float16");
  const HostTensor h = Random(ir::FLOAT16, {100}, 3);
  got =
      CompileAndRun(OneOpGraph("cumsum", {h.type()}, {Type(ir::FLOAT32, {100})},
                               {{"dim", IntA(0)}}),
                    {h});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], RefCum(h.values, ir::FLOAT32, false),
              "float16 -> float32");
}

TEST(ScanOpsTest, CummaxCumminKeepTheLastIndexAndNan) {
  const std::vector<double> row = {1, 3, 3, -2, kNan, 5, kNan, -kInf, 7};
  for (ir::DType dtype : kAll) {
    HostTensor x;
    if (IsFloatDType(dtype)) {
      x = Tensor(dtype, {3, 9}, {});
      for (int r = 0; r < 3; ++r) {
        for (double v : row) x.values.push_back(RoundTo(dtype, v * (r + 1)));
      }
    } else {
      x = Input(dtype, {3, 9}, 5);
    }
    for (int dim : {1, 0}) {
      for (bool max : {true, false}) {
        std::vector<std::vector<double>> value_rows, index_rows;
        for (const auto& r : Rows(x, dim)) {
          std::vector<double> v, i;
          RefCumExtreme(r, max, &v, &i);
          value_rows.push_back(v);
          index_rows.push_back(i);
        }
        const std::string op = max ? "cummax" : "cummin";
        const std::string what =
            absl::StrCat(op, " ", DTypeText(dtype), " dim=", dim);
        auto got = CompileAndRun(
            OneOpGraph(op, {x.type()},
                       {Type(dtype, x.shape), Type(ir::INT64, x.shape)},
                       {{"dim", IntA(dim)}}),
            {x});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectExact((*got)[0], FromRows(value_rows, x.shape, dim), what);
        ExpectExact((*got)[1], FromRows(index_rows, x.shape, dim), what);
      }
    }
  }
}

TEST(ScanOpsTest, LogcumsumexpMatchesTheReference) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    HostTensor x = Random(dtype, {4, 50}, 9, -20.0, 20.0);
    // Infinities and NaN: -inf keeps the sum, +inf makes it inf, NaN sticks.
    x.values[3] = -kInf;
    x.values[60] = kInf;
    x.values[70] = kInf;
    x.values[120] = kNan;
    std::vector<std::vector<double>> rows;
    for (const auto& r : Rows(x, 1)) {
      std::vector<double> out;
      double acc = -kInf;
      for (double v : r) {
        if (std::isnan(acc) || std::isnan(v)) {
          acc = kNan;
        } else if (std::isinf(v) && v == acc) {
          acc = v;
        } else {
          const double hi = std::max(acc, v), lo = std::min(acc, v);
          acc = hi + std::log1p(std::exp(lo - hi));
        }
        out.push_back(acc);
      }
      rows.push_back(out);
    }
    const std::vector<double> want = FromRows(rows, x.shape, 1);
    std::vector<double> tol;
    for (double w : want)
      tol.push_back(4 * UnitRoundoff(dtype) * std::fabs(w) + 1e-6);
    auto got =
        CompileAndRun(OneOpGraph("logcumsumexp", {x.type()},
                                 {Type(dtype, x.shape)}, {{"dim", IntA(-1)}}),
                      {x});
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose((*got)[0], want, tol, "logcumsumexp " + DTypeText(dtype));
  }
}

TEST(ScanOpsTest, ScalarsAndEmptyTensors) {
  const HostTensor s = Tensor(ir::FLOAT16, {}, {-1.5});
  for (const std::string op : {"cumsum", "cumprod", "logcumsumexp"}) {
    auto got = CompileAndRun(
        OneOpGraph(op, {s.type()}, {Type(ir::FLOAT16, {})}, {{"dim", IntA(0)}}),
        {s});
    ASSERT_TRUE(got.ok()) << op << ": " << got.status();
    ExpectExact((*got)[0], {-1.5}, op + " of a scalar");
  }
  auto got =
      CompileAndRun(OneOpGraph("cummax", {s.type()},
                               {Type(ir::FLOAT16, {}), Type(ir::INT64, {})},
                               {{"dim", IntA(-1)}}),
                    {s});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[1], {0}, "cummax index of a scalar");
  const HostTensor e{ir::FLOAT32, {0, 3}, {}};
  got =
      CompileAndRun(OneOpGraph("cumsum", {e.type()},
                               {Type(ir::FLOAT32, {0, 3})}, {{"dim", IntA(1)}}),
                    {e});
  ASSERT_TRUE(got.ok()) << got.status();
}

}  // namespace
}  // namespace rbln::compiler

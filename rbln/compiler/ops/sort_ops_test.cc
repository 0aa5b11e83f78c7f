// spec: P3
// sort, topk, kthvalue, median, nanmedian and mode against a stable
// std::stable_sort reference with ATen's comparators (NaN last ascending,
// first descending), exactly: values and indices.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/ops/op_test_util.h"
#include "rbln/compiler/ops/reduction_reference.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The stable order of a row: indices.
std::vector<int64_t> StableOrder(const std::vector<double>& row,
                                 bool descending) {
  std::vector<int64_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double x = row[a], y = row[b];
    if (descending) return (std::isnan(x) && !std::isnan(y)) || x > y;
    return (!std::isnan(x) && std::isnan(y)) || x < y;
  });
  return order;
}

HostTensor WithTies(ir::DType dtype, const Shape& shape, uint32_t seed) {
  if (dtype == ir::BOOL) return Random(dtype, shape, seed, 0.0, 2.0);
  // Few distinct values: many ties.
  HostTensor x = Random(dtype, shape, seed, -4.0, 4.0);
  for (double& v : x.values) v = RoundTo(dtype, std::round(v * 2) / 2);
  if (IsFloatDType(dtype)) {
    for (size_t i = 5; i < x.values.size(); i += 11) x.values[i] = kNan;
    if (x.values.size() > 3) {
      x.values[1] = kInf;
      x.values[2] = -kInf;
    }
  }
  return x;
}

const ir::DType kAll[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16,
                          ir::INT32,   ir::INT64,   ir::BOOL};

TEST(SortOpsTest, SortIsStableWithAtenNanOrder) {
  const std::vector<std::pair<Shape, int>> cases = {
      {{5, 5, 5}, -1}, {{5, 5, 5}, 0}, {{4, 9}, 1}, {{1000}, 0},
      {{3, 1}, 1},     {{2, 3}, 0},    {{17}, 0}};
  for (ir::DType dtype : kAll) {
    for (const auto& [shape, dim] : cases) {
      const int d = dim < 0 ? dim + shape.size() : dim;
      const HostTensor x = WithTies(dtype, shape, shape.size() + 3);
      for (bool descending : {false, true}) {
        std::vector<std::vector<double>> values, indices;
        for (const auto& row : Rows(x, d)) {
          std::vector<double> v, i;
          for (int64_t j : StableOrder(row, descending)) {
            v.push_back(row[j]);
            i.push_back(j);
          }
          values.push_back(v);
          indices.push_back(i);
        }
        const std::string what =
            absl::StrCat("sort ", DTypeText(dtype), ShapeText(shape),
                         " dim=", dim, descending ? " descending" : "");
        auto got = CompileAndRun(
            OneOpGraph("sort", {x.type()},
                       {Type(dtype, shape), Type(ir::INT64, shape)},
                       {{"dim", IntA(dim)},
                        {"descending", BoolA(descending)},
                        {"stable", BoolA(true)}}),
            {x});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectExact((*got)[0], FromRows(values, shape, d), what);
        ExpectExact((*got)[1], FromRows(indices, shape, d), what);
      }
    }
  }
}

TEST(SortOpsTest, TopkTakesTheFirstOfTheSortedRow) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::INT64}) {
    const Shape shape = {3, 20};
    const HostTensor x = WithTies(dtype, shape, 4);
    for (bool largest : {true, false}) {
      for (int64_t k : {0, 1, 5, 20}) {
        std::vector<std::vector<double>> values, indices;
        for (const auto& row : Rows(x, 1)) {
          std::vector<double> v, i;
          for (int64_t j : StableOrder(row, largest)) {
            if (static_cast<int64_t>(v.size()) == k) break;
            v.push_back(row[j]);
            i.push_back(j);
          }
          values.push_back(v);
          indices.push_back(i);
        }
        const Shape out = {3, k};
        const std::string what = absl::StrCat(
            "topk ", DTypeText(dtype), " k=", k, largest ? " largest" : "");
        auto got = CompileAndRun(
            OneOpGraph("topk", {x.type()},
                       {Type(dtype, out), Type(ir::INT64, out)},
                       {{"k", IntA(k)}, {"largest", BoolA(largest)}}),
            {x});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        if (k == 0) continue;
        ExpectExact((*got)[0], FromRows(values, shape, 1), what);
        ExpectExact((*got)[1], FromRows(indices, shape, 1), what);
      }
    }
  }
}

// kthvalue, median and nanmedian read one position of the ascending sort.
TEST(SortOpsTest, SelectionsReadTheSortedRow) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32}) {
    const Shape shape = {6, 7};
    HostTensor x = WithTies(dtype, shape, 8);
    if (IsFloatDType(dtype)) {
      // Row 0 all NaN, row 1 without NaN.
      for (int j = 0; j < 7; ++j) {
        x.values[j] = kNan;
        if (std::isnan(x.values[7 + j])) x.values[7 + j] = 1;
      }
    }
    for (int dim : {1, 0}) {
      for (bool keepdim : {false, true}) {
        std::vector<bool> reduced(2, false);
        reduced[dim] = true;
        const Shape out = ReducedShapeOf(shape, reduced, keepdim);
        const auto rows = Rows(x, dim);
        const std::string suffix = absl::StrCat(
            " ", DTypeText(dtype), " dim=", dim, keepdim ? " keepdim" : "");
        // kthvalue k = 3.
        std::vector<double> kv, ki, mv, mi, nv, ni;
        for (const auto& row : rows) {
          const std::vector<int64_t> order = StableOrder(row, false);
          kv.push_back(row[order[2]]);
          ki.push_back(order[2]);
          int64_t nans = 0;
          for (double v : row) nans += std::isnan(v);
          const int64_t n = row.size();
          const int64_t m = nans ? n - nans : (n - 1) / 2;
          mv.push_back(row[order[m]]);
          mi.push_back(order[m]);
          const int64_t nm = std::max<int64_t>(0, (n - nans - 1) / 2);
          nv.push_back(row[order[nm]]);
          ni.push_back(order[nm]);
        }
        auto run = [&](const std::string& op, Attrs attrs) {
          attrs["dim"] = IntA(dim);
          attrs["keepdim"] = BoolA(keepdim);
          return CompileAndRun(
              OneOpGraph(op, {x.type()},
                         {Type(dtype, out), Type(ir::INT64, out)}, attrs),
              {x});
        };
        auto k = run("kthvalue", {{"k", IntA(3)}});
        ASSERT_TRUE(k.ok()) << k.status();
        ExpectExact((*k)[0], kv, "kthvalue" + suffix);
        ExpectExact((*k)[1], ki, "kthvalue" + suffix);
        auto m = run("median", {});
        ASSERT_TRUE(m.ok()) << m.status();
        ExpectExact((*m)[0], mv, "median" + suffix);
        ExpectExact((*m)[1], mi, "median" + suffix);
        auto nm = run("nanmedian", {});
        ASSERT_TRUE(nm.ok()) << nm.status();
        ExpectExact((*nm)[0], nv, "nanmedian" + suffix);
        ExpectExact((*nm)[1], ni, "nanmedian" + suffix);
      }
    }
  }
}

TEST(SortOpsTest, MedianOfAllElements) {
  const HostTensor x = Tensor(ir::FLOAT16, {2, 3}, {5, 1, 4, 2, 3, 6});
  auto got = CompileAndRun(
      OneOpGraph("median", {x.type()}, {Type(ir::FLOAT16, {})}), {x});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {3}, "median of 1..6 (the lower one)");
  const HostTensor y = Tensor(ir::FLOAT32, {4}, {kNan, 1, 7, 2});
  got = CompileAndRun(OneOpGraph("median", {y.type()}, {Type(ir::FLOAT32, {})}),
                      {y});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {kNan}, "median with a NaN");
  got = CompileAndRun(
      OneOpGraph("nanmedian", {y.type()}, {Type(ir::FLOAT32, {})}), {y});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {2}, "nanmedian skips the NaN");
  const HostTensor s = Tensor(ir::INT64, {}, {9});
  got = CompileAndRun(OneOpGraph("median", {s.type()}, {Type(ir::INT64, {})}),
                      {s});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {9}, "median of a scalar");
}

// mode: the most frequent value, the smallest on ties, and the last index
// of its run in the stable sort (its last occurrence).
TEST(SortOpsTest, ModeCountsRuns) {
  const HostTensor x = Tensor(ir::INT64, {3, 6},
                              {1, 2, 2, 3, 3, 1,  //
                               5, 4, 4, 5, 9, 9,  //
                               7, 7, 7, 7, 7, 7});
  auto got =
      CompileAndRun(OneOpGraph("mode", {x.type()},
                               {Type(ir::INT64, {3}), Type(ir::INT64, {3})},
                               {{"dim", IntA(-1)}}),
                    {x});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {1, 4, 7}, "mode values");
  ExpectExact((*got)[1], {5, 2, 5}, "mode indices");
  for (ir::DType dtype : {ir::FLOAT16, ir::BOOL, ir::BFLOAT16}) {
    const HostTensor y = Tensor(dtype, {2, 4}, {1, 0, 1, 0, 0, 1, 1, 1});
    auto m =
        CompileAndRun(OneOpGraph("mode", {y.type()},
                                 {Type(dtype, {2, 1}), Type(ir::INT64, {2, 1})},
                                 {{"dim", IntA(1)}, {"keepdim", BoolA(true)}}),
                      {y});
    ASSERT_TRUE(m.ok()) << m.status();
    ExpectExact((*m)[0], {0, 1}, "mode " + DTypeText(dtype));
    ExpectExact((*m)[1], {3, 3}, "mode " + DTypeText(dtype));
  }
}

TEST(SortOpsTest, OutOfRangeKIsAnError) {
  const HostTensor x = Random(ir::FLOAT32, {2, 3}, 1);
  auto got =
      CompileAndRun(OneOpGraph("kthvalue", {x.type()},
                               {Type(ir::FLOAT32, {2}), Type(ir::INT64, {2})},
                               {{"k", IntA(4)}}),
                    {x});
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("selected index k out of range"));
}

}  // namespace
}  // namespace rbln::compiler

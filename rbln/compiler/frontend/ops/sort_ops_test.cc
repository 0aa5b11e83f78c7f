// spec: P3
// sort, topk, kthvalue, median, nanmedian and mode, exactly (values and the
// indices of ties), against the algorithms ATen's CPU kernels run:
// std::stable_sort / std::sort / std::partial_sort / std::nth_element of
// (value, index) pairs with ATen's comparators (libstdc++'s, as torch's
// wheel), ATen's quick select for kthvalue, and the stable order for median.
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
#include "rbln/compiler/frontend/ops/reduction_reference.h"
#include "rbln/compiler/testing/op_test_util.h"

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

using Pair = std::pair<double, int64_t>;

// ATen's KeyValueCompAsc / KeyValueCompDesc.
bool PairLess(const Pair& a, const Pair& b, bool descending) {
  const double x = a.first, y = b.first;
  if (descending) return (std::isnan(x) && !std::isnan(y)) || x > y;
  return (!std::isnan(x) && std::isnan(y)) || x < y;
}

std::vector<Pair> Pairs(const std::vector<double>& row) {
  std::vector<Pair> pairs;
  for (size_t j = 0; j < row.size(); ++j) pairs.push_back({row[j], j});
  return pairs;
}

// ATen's sort kernel: std::sort, or std::stable_sort when stable.
std::vector<Pair> AtenSort(const std::vector<double>& row, bool descending,
                           bool stable) {
  std::vector<Pair> q = Pairs(row);
  auto comp = [&](const Pair& a, const Pair& b) {
    return PairLess(a, b, descending);
  };
  if (stable) {
    std::stable_sort(q.begin(), q.end(), comp);
  } else {
    std::sort(q.begin(), q.end(), comp);
  }
  return q;
}

// ATen's topk_impl_loop.
std::vector<Pair> AtenTopk(const std::vector<double>& row, int64_t k,
                           bool largest, bool sorted) {
  std::vector<Pair> q = Pairs(row);
  const int64_t n = row.size();
  auto comp = [&](const Pair& a, const Pair& b) {
    return PairLess(a, b, largest);
  };
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), comp);
  } else {
    std::nth_element(q.begin(), q.begin() + k - 1, q.end(), comp);
    if (sorted) std::sort(q.begin(), q.begin() + k - 1, comp);
  }
  q.resize(k);
  return q;
}

// ATen's quick_select_template (kthvalue), k 0-based.
Pair AtenKth(const std::vector<double>& row, int64_t k) {
  std::vector<Pair> a = Pairs(row);
  auto gt = [](const Pair& x, const Pair& y) { return PairLess(x, y, true); };
  int64_t L = 0, R = static_cast<int64_t>(a.size()) - 1;
  while (R > L) {
    if (R == L + 1) {
      if (gt(a[L], a[R])) std::swap(a[L], a[R]);
      break;
    }
    const int64_t P = L + (R - L) / 2;
    std::swap(a[P], a[L + 1]);
    if (gt(a[L + 1], a[R])) std::swap(a[L + 1], a[R]);
    if (gt(a[L], a[R])) std::swap(a[L], a[R]);
    if (gt(a[L + 1], a[L])) std::swap(a[L + 1], a[L]);
    int64_t i = L + 1, j = R;
    const Pair piv = a[L];
    while (true) {
      do {
        ++i;
      } while (gt(piv, a[i]));
      do {
        --j;
      } while (gt(a[j], piv));
      if (j < i) break;
      std::swap(a[i], a[j]);
    }
    std::swap(a[L], a[j]);
    if (j <= k) L = i;
    if (j >= k) R = j - 1;
  }
  return a[k];
}

// ATen's mode kernel: std::sort by value (plain <), then the first value
// with the highest count, at the index of the last element of its run.
Pair AtenMode(const std::vector<double>& row) {
  std::vector<Pair> e = Pairs(row);
  std::sort(e.begin(), e.end(),
            [](const Pair& i, const Pair& j) { return i.first < j.first; });
  Pair mode = {0, 0};
  int64_t freq = 0, best = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    ++freq;
    if (i == e.size() - 1 || e[i].first != e[i + 1].first) {
      if (freq > best) {
        mode = e[i];
        best = freq;
      }
      freq = 0;
    }
  }
  return mode;
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

TEST(SortOpsTest, SortMatchesAtenStableAndUnstable) {
  // Every dtype on two shapes; float32 and float16 on more.
  const std::vector<std::pair<Shape, int>> few = {{{5, 5, 5}, -1},
                                                  {{2, 70}, 1}};
  const std::vector<std::pair<Shape, int>> more = {
      {{5, 5, 5}, 0}, {{1000}, 0}, {{3, 1}, 1}, {{17}, 0}};
  for (ir::DType dtype : kAll) {
    std::vector<std::pair<Shape, int>> cases = few;
    if (dtype == ir::FLOAT32 || dtype == ir::FLOAT16) {
      cases.insert(cases.end(), more.begin(), more.end());
    }
    for (const auto& [shape, dim] : cases) {
      const int d = dim < 0 ? dim + shape.size() : dim;
      const HostTensor x = WithTies(dtype, shape, shape.size() + 3);
      for (bool descending : {false, true}) {
        for (bool stable : {false, true}) {
          std::vector<std::vector<double>> values, indices;
          for (const auto& row : Rows(x, d)) {
            std::vector<double> v, i;
            for (const Pair& p : AtenSort(row, descending, stable)) {
              v.push_back(p.first);
              i.push_back(p.second);
            }
            values.push_back(v);
            indices.push_back(i);
          }
          const std::string what = absl::StrCat(
              "sort ", DTypeText(dtype), ShapeText(shape), " dim=", dim,
              descending ? " descending" : "", stable ? " stable" : "");
          auto got = CompileAndRun(
              OneOpGraph("sort", {x.type()},
                         {Type(dtype, shape), Type(ir::INT64, shape)},
                         {{"dim", IntA(dim)},
                          {"descending", BoolA(descending)},
                          {"stable", BoolA(stable)}}),
              {x});
          ASSERT_TRUE(got.ok()) << what << ": " << got.status();
          ExpectExact((*got)[0], FromRows(values, shape, d), what);
          ExpectExact((*got)[1], FromRows(indices, shape, d), what);
        }
      }
    }
  }
}

// Musser's median-of-three killer exhausts introsort's depth limit
// (2 log2 n) twice on 600 elements: those ranges are heapsorted, as in
// libstdc++; halving the values adds ties.
TEST(SortOpsTest, UnstableSortFollowsTheHeapsortFallback) {
  const int n = 600, k = n / 2;
  for (int divisor : {1, 2}) {
    std::vector<double> row(n);
    for (int i = 1; i <= k; ++i) {
      row[i - 1] = (i % 2 ? i : k + i - 1) / divisor;
      row[k + i - 1] = 2 * i / divisor;
    }
    const HostTensor x = Tensor(ir::FLOAT32, {n}, row);
    std::vector<double> values, indices;
    for (const Pair& p : AtenSort(row, false, false)) {
      values.push_back(p.first);
      indices.push_back(p.second);
    }
    auto got = CompileAndRun(
        OneOpGraph("sort", {x.type()}, {x.type(), Type(ir::INT64, {n})}), {x});
    ASSERT_TRUE(got.ok()) << got.status();
    const std::string what = absl::StrCat("values / ", divisor);
    ExpectExact((*got)[0], values, what);
    ExpectExact((*got)[1], indices, what);
  }
}

TEST(SortOpsTest, TopkSelectsAsAten) {
  // k * 64 <= n takes partial_sort (a heap), else nth_element (+ sort).
  struct Case {
    ir::DType dtype;
    Shape shape;
    int64_t k;
  };
  const std::vector<Case> cases = {
      {ir::FLOAT32, {3, 20}, 1},  {ir::FLOAT32, {3, 20}, 5},
      {ir::FLOAT32, {3, 20}, 20}, {ir::FLOAT32, {2, 300}, 4},
      {ir::FLOAT32, {3, 20}, 0},  {ir::FLOAT16, {2, 300}, 20},
      {ir::INT64, {2, 300}, 3},   {ir::BFLOAT16, {3, 40}, 7}};
  for (const Case& c : cases) {
    const HostTensor x = WithTies(c.dtype, c.shape, 4);
    for (bool largest : {true, false}) {
      for (bool sorted : {true, false}) {
        std::vector<std::vector<double>> values, indices;
        for (const auto& row : Rows(x, 1)) {
          std::vector<double> v, i;
          if (c.k > 0) {
            for (const Pair& p : AtenTopk(row, c.k, largest, sorted)) {
              v.push_back(p.first);
              i.push_back(p.second);
            }
          }
          values.push_back(v);
          indices.push_back(i);
        }
        const Shape out = {c.shape[0], c.k};
        const std::string what = absl::StrCat(
            "topk ", DTypeText(c.dtype), ShapeText(c.shape), " k=", c.k,
            largest ? " largest" : "", sorted ? " sorted" : "");
        auto got =
            CompileAndRun(OneOpGraph("topk", {x.type()},
                                     {Type(c.dtype, out), Type(ir::INT64, out)},
                                     {{"k", IntA(c.k)},
                                      {"largest", BoolA(largest)},
                                      {"sorted", BoolA(sorted)}}),
                          {x});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        if (c.k == 0) continue;
        ExpectExact((*got)[0], FromRows(values, out, 1), what);
        ExpectExact((*got)[1], FromRows(indices, out, 1), what);
      }
    }
  }
}

// Outputs gathered back from the sorted rows on 1-D and 3-D inputs
// (a middle dim), k below and at n.
TEST(SortOpsTest, TopkAndKthvalueOnOtherRanks) {
  for (const auto& [shape, dim] :
       std::vector<std::pair<Shape, int>>{{{50}, 0}, {{3, 9, 4}, 1}}) {
    const HostTensor x = WithTies(ir::FLOAT32, shape, 9);
    for (int64_t k : {int64_t{3}, shape[dim]}) {
      std::vector<std::vector<double>> values, indices;
      std::vector<double> kv, ki;
      for (const auto& row : Rows(x, dim)) {
        std::vector<double> v, i;
        for (const Pair& p : AtenTopk(row, k, true, true)) {
          v.push_back(p.first);
          i.push_back(p.second);
        }
        values.push_back(v);
        indices.push_back(i);
        const Pair kth = AtenKth(row, k - 1);
        kv.push_back(kth.first);
        ki.push_back(kth.second);
      }
      Shape out = shape;
      out[dim] = k;
      const std::string what = absl::StrCat(ShapeText(shape), " k=", k);
      auto got = CompileAndRun(
          OneOpGraph("topk", {x.type()},
                     {Type(ir::FLOAT32, out), Type(ir::INT64, out)},
                     {{"k", IntA(k)}, {"dim", IntA(dim)}}),
          {x});
      ASSERT_TRUE(got.ok()) << "topk " << what << ": " << got.status();
      ExpectExact((*got)[0], FromRows(values, out, dim), "topk " + what);
      ExpectExact((*got)[1], FromRows(indices, out, dim), "topk " + what);
      std::vector<bool> reduced(shape.size(), false);
      reduced[dim] = true;
      const Shape kshape = ReducedShapeOf(shape, reduced, false);
      auto kth = CompileAndRun(
          OneOpGraph("kthvalue", {x.type()},
                     {Type(ir::FLOAT32, kshape), Type(ir::INT64, kshape)},
                     {{"k", IntA(k)}, {"dim", IntA(dim)}}),
          {x});
      ASSERT_TRUE(kth.ok()) << "kthvalue " << what << ": " << kth.status();
      ExpectExact((*kth)[0], kv, "kthvalue " + what);
      ExpectExact((*kth)[1], ki, "kthvalue " + what);
    }
  }
}

// kthvalue, median and nanmedian read one position of the ascending sort.
TEST(SortOpsTest, SelectionsReadTheSortedRow) {
  for (ir::DType dtype : {ir::FLOAT32, ir::BFLOAT16, ir::INT32}) {
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
          const Pair kth = AtenKth(row, 2);
          kv.push_back(kth.first);
          ki.push_back(kth.second);
          const std::vector<int64_t> order = StableOrder(row, false);
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

// mode: the most frequent value, the smallest on ties; rows of at most 16
// are insertion-sorted (stable), so the index is its last occurrence.
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

// Rows longer than 16 (introsort, not only insertion sort) with many ties.
TEST(SortOpsTest, ModeMatchesAtensSortAndScan) {
  for (ir::DType dtype : {ir::FLOAT32, ir::BFLOAT16, ir::INT32, ir::BOOL}) {
    for (const Shape& shape : {Shape{4, 9}, Shape{3, 100}, Shape{500}}) {
      HostTensor x =
          Random(dtype, shape, 6, 0.0, dtype == ir::BOOL ? 2.0 : 5.0);
      for (double& v : x.values) v = RoundTo(dtype, std::floor(v));
      const int dim = shape.size() - 1;
      std::vector<double> values, indices;
      for (const auto& row : Rows(x, dim)) {
        const Pair m = AtenMode(row);
        values.push_back(m.first);
        indices.push_back(m.second);
      }
      Shape out(shape.begin(), shape.end() - 1);
      const std::string what = "mode " + DTypeText(dtype) + ShapeText(shape);
      auto got =
          CompileAndRun(OneOpGraph("mode", {x.type()},
                                   {Type(dtype, out), Type(ir::INT64, out)},
                                   {{"dim", IntA(-1)}}),
                        {x});
      ASSERT_TRUE(got.ok()) << what << ": " << got.status();
      ExpectExact((*got)[0], values, what);
      ExpectExact((*got)[1], indices, what);
    }
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

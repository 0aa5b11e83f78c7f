// spec: P3, P5
// _grouped_mm (torch._grouped_mm) against a double-precision reference of
// ATen's loop of mm_out over Tensor.slice'd groups: 2-D x 3-D with offsets
// (MoE experts; B plain and read transposed from a transpose's source),
// 3-D x 2-D, 2-D x 2-D (K by group), 3-D x 3-D; f32, bf16, f16; int32 and
// int64 offsets, empty groups, rows past the last offset (zero), offsets
// that decrease; bad shapes and dtypes raise.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

// Tensor.slice bounds of group g over `extent`.
std::pair<int64_t, int64_t> Bounds(const std::vector<double>& offs, int64_t g,
                                   int64_t extent) {
  auto wrap = [&](int64_t v) { return v < 0 ? v + extent : v; };
  const int64_t start = g == 0 ? 0 : static_cast<int64_t>(offs[g - 1]);
  const int64_t s = std::min(std::max<int64_t>(wrap(start), 0), extent);
  const int64_t e = std::min(std::max<int64_t>(wrap(offs[g]), s), extent);
  return {s, e};
}

// a [M, K] x b [G, K, N] (b_t: stored [G, N, K]).
std::vector<double> RowGroupsRef(const HostTensor& a, const HostTensor& b, bool b_t,
                                 const std::vector<double>& offs, int64_t m,
                                 int64_t k, int64_t n, ir::DType t) {
  std::vector<double> c(m * n, 0.0);
  for (size_t g = 0; g < offs.size(); ++g) {
    auto [s, e] = Bounds(offs, g, m);
    for (int64_t i = s; i < e; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l) {
          sum += a.values[i * k + l] *
                 (b_t ? b.values[(g * n + j) * k + l] : b.values[(g * k + l) * n + j]);
        }
        c[i * n + j] = RoundTo(t, sum);
      }
    }
  }
  return c;
}

std::vector<double> Tolerance(const std::vector<double>& want, ir::DType t, int64_t k) {
  std::vector<double> tol;
  for (double w : want) tol.push_back(2 * UnitRoundoff(t) * std::fabs(w) + 1e-5 * k);
  return tol;
}

TEST(GroupedMatmulOpsTest, RowGroupsMatchTheReference) {
  const int64_t g = 4, m = 24, k = 40, n = 36;
  const std::vector<std::vector<double>> offsets = {
      {5, 5, 12, 20},   // an empty group; rows 20.. past the last offset
      {0, 0, 0, 24},    // every row in the last group
      {10, 4, 18, 30},  // a decreasing offset; one past the rows
  };
  uint32_t seed = 1;
  for (ir::DType t : {ir::FLOAT32, ir::BFLOAT16, ir::FLOAT16}) {
    for (bool b_t : {false, true}) {
      for (ir::DType ot : {ir::INT32, ir::INT64}) {
        for (const std::vector<double>& offs : offsets) {
          const HostTensor a = Random(t, {m, k}, seed++, -1, 1);
          const HostTensor b = Random(t, b_t ? Shape{g, n, k} : Shape{g, k, n}, seed++, -1, 1);
          const HostTensor o = Tensor(ot, {g}, offs);
          const std::string what = absl::StrCat(DTypeText(t), b_t ? " b transposed " : " ",
                                                DTypeText(ot), " offs ", offs[0], ",",
                                                offs[1], ",", offs[2], ",", offs[3]);
          const HostTensor got = RunOne(GroupedMmGraph(t, ot, g, m, k, n, b_t), {a, b, o});
          const std::vector<double> want = RowGroupsRef(a, b, b_t, offs, m, k, n, t);
          ExpectClose(got, want, Tolerance(want, t, k), what);
        }
      }
    }
  }
}

TEST(GroupedMatmulOpsTest, OtherFormsMatchTheReference) {
  const int64_t g = 3, m = 8, k = 12, n = 10;
  for (ir::DType t : {ir::FLOAT32, ir::BFLOAT16}) {
    // 3-D x 2-D: a[g] times group g's columns of b.
    {
      const HostTensor a = Random(t, {g, m, k}, 11, -1, 1);
      const HostTensor b = Random(t, {k, n}, 12, -1, 1);
      const std::vector<double> offs = {3, 3, 8};  // columns 8.. in no group
      const HostTensor o = Tensor(ir::INT32, {g}, offs);
      std::vector<double> want(m * n, 0.0);
      for (int64_t gi = 0; gi < g; ++gi) {
        auto [s, e] = Bounds(offs, gi, n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = s; j < e; ++j) {
            double sum = 0;
            for (int64_t l = 0; l < k; ++l) sum += a.values[(gi * m + i) * k + l] * b.values[l * n + j];
            want[i * n + j] = RoundTo(t, sum);
          }
      }
      const HostTensor got = RunOne(
          OneOpGraph("_grouped_mm", {a.type(), b.type(), o.type()}, {Type(t, {m, n})}), {a, b, o});
      ExpectClose(got, want, Tolerance(want, t, k), "3d x 2d " + DTypeText(t));
    }
    // 2-D x 2-D: group g's range of K, one output per group.
    {
      const HostTensor a = Random(t, {m, k}, 13, -1, 1);
      const HostTensor b = Random(t, {k, n}, 14, -1, 1);
      const std::vector<double> offs = {4, 4, 12};  // group 1 empty: zeros
      const HostTensor o = Tensor(ir::INT64, {g}, offs);
      std::vector<double> want(g * m * n, 0.0);
      for (int64_t gi = 0; gi < g; ++gi) {
        auto [s, e] = Bounds(offs, gi, k);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (int64_t l = s; l < e; ++l) sum += a.values[i * k + l] * b.values[l * n + j];
            want[(gi * m + i) * n + j] = RoundTo(t, sum);
          }
      }
      const HostTensor got = RunOne(
          OneOpGraph("_grouped_mm", {a.type(), b.type(), o.type()}, {Type(t, {g, m, n})}),
          {a, b, o});
      ExpectClose(got, want, Tolerance(want, t, k), "2d x 2d " + DTypeText(t));
    }
    // 3-D x 3-D: a batch of products.
    {
      const HostTensor a = Random(t, {g, m, k}, 15, -1, 1);
      const HostTensor b = Random(t, {g, k, n}, 16, -1, 1);
      std::vector<double> want(g * m * n, 0.0);
      for (int64_t gi = 0; gi < g; ++gi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (int64_t l = 0; l < k; ++l)
              sum += a.values[(gi * m + i) * k + l] * b.values[(gi * k + l) * n + j];
            want[(gi * m + i) * n + j] = RoundTo(t, sum);
          }
      const HostTensor got = RunOne(
          OneOpGraph("_grouped_mm", {a.type(), b.type()}, {Type(t, {g, m, n})},
                     {{"has_offs", BoolA(false)}}),
          {a, b});
      ExpectClose(got, want, Tolerance(want, t, k), "3d x 3d " + DTypeText(t));
    }
  }
}

TEST(GroupedMatmulOpsTest, BadOperandsRaise) {
  auto error = [](const ir::Graph& g, const std::vector<HostTensor>& in) {
    auto got = CompileAndRun(g, in);
    return got.ok() ? std::string("ok") : std::string(got.status().message());
  };
  const HostTensor a = Random(ir::FLOAT32, {8, 12}, 1);
  const HostTensor b = Random(ir::FLOAT32, {3, 10, 6}, 2);  // K 10 != 12
  const HostTensor o = Tensor(ir::INT32, {3}, {2, 4, 8});
  EXPECT_THAT(error(OneOpGraph("_grouped_mm", {a.type(), b.type(), o.type()},
                               {Type(ir::FLOAT32, {8, 6})}),
                    {a, b, o}),
              HasSubstr("contraction dimension"));
  const HostTensor bi = Random(ir::INT32, {3, 12, 6}, 3);
  EXPECT_THAT(error(OneOpGraph("_grouped_mm", {a.type(), bi.type(), o.type()},
                               {Type(ir::FLOAT32, {8, 6})}),
                    {a, bi, o}),
              HasSubstr("Float32, BFloat16 or Float16"));
  const HostTensor b2 = Random(ir::FLOAT32, {3, 12, 6}, 4);
  const HostTensor of = Tensor(ir::FLOAT32, {3}, {2, 4, 8});
  EXPECT_THAT(error(OneOpGraph("_grouped_mm", {a.type(), b2.type(), of.type()},
                               {Type(ir::FLOAT32, {8, 6})}),
                    {a, b2, of}),
              HasSubstr("Offsets have to be int32"));
}

}  // namespace
}  // namespace rbln::compiler

// spec: P2, P8
// Max, average and adaptive pools (2-D and 3-D, batched or not) and their
// backward ops against references that follow ATen's CPU kernels.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const ir::DType kFloatTypes[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16};

// One output position's window: the input positions it reads (flat in the
// plane, in ATen's loop order), its divisor (average pools) and its first
// valid position (max pools' initial index).
struct Window {
  std::vector<int64_t> positions;
  int64_t divisor = 1;
  int64_t first = 0;
};

struct Geometry {
  Shape in, out;
  std::vector<Window> windows;  // row-major over `out`
};

std::string Join(const std::vector<int64_t>& v) { return absl::StrJoin(v, ","); }

int64_t Pooled(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d,
               bool ceil) {
  const int64_t num = in + 2 * pad - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t out =
      static_cast<int64_t>(std::floor(static_cast<double>(num) / s)) + 1;
  if (ceil && (out - 1) * s >= in + pad) --out;
  return out;
}

// Enumerates the multi-indices of `shape` in row-major order.
std::vector<std::vector<int64_t>> Indices(const Shape& shape) {
  std::vector<std::vector<int64_t>> all;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t n = NumElements(shape), i = 0; i < n; ++i) {
    all.push_back(idx);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return all;
}

int64_t FlatOf(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// Per dim, the positions a window covers, then their product in row-major
// order.
Window Product(const std::vector<std::vector<int64_t>>& per_dim,
               const Shape& in) {
  Window w;
  Shape counts;
  for (const auto& v : per_dim) counts.push_back(v.size());
  if (NumElements(counts) == 0) return w;
  for (const auto& k : Indices(counts)) {
    std::vector<int64_t> pos;
    for (size_t d = 0; d < k.size(); ++d) pos.push_back(per_dim[d][k[d]]);
    w.positions.push_back(FlatOf(pos, in));
  }
  return w;
}

Geometry MaxGeometry(const Shape& in, const Shape& k, const Shape& s,
                     const Shape& p, const Shape& d, bool ceil) {
  Geometry g{in, {}, {}};
  for (size_t i = 0; i < in.size(); ++i) {
    g.out.push_back(Pooled(in[i], k[i], p[i], s[i], d[i], ceil));
  }
  for (const auto& o : Indices(g.out)) {
    std::vector<std::vector<int64_t>> per_dim;
    std::vector<int64_t> first;
    for (size_t i = 0; i < in.size(); ++i) {
      int64_t start = o[i] * s[i] - p[i];
      const int64_t end = std::min(start + (k[i] - 1) * d[i] + 1, in[i]);
      while (start < 0) start += d[i];
      first.push_back(start);
      std::vector<int64_t> v;
      for (int64_t j = start; j < end; j += d[i]) v.push_back(j);
      per_dim.push_back(v);
    }
    Window w = Product(per_dim, in);
    w.first = FlatOf(first, in);
    g.windows.push_back(w);
  }
  return g;
}

Geometry AvgGeometry(const Shape& in, const Shape& k, const Shape& s,
                     const Shape& p, bool ceil, bool count_include_pad,
                     int64_t divisor_override) {
  Geometry g{in, {}, {}};
  for (size_t i = 0; i < in.size(); ++i) {
    g.out.push_back(Pooled(in[i], k[i], p[i], s[i], 1, ceil));
  }
  for (const auto& o : Indices(g.out)) {
    std::vector<std::vector<int64_t>> per_dim;
    int64_t pool_size = 1, clipped = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      int64_t start = o[i] * s[i] - p[i];
      int64_t end = std::min(start + k[i], in[i] + p[i]);
      pool_size *= end - start;
      start = std::max<int64_t>(start, 0);
      end = std::min(end, in[i]);
      clipped *= std::max<int64_t>(end - start, 0);
      std::vector<int64_t> v;
      for (int64_t j = start; j < end; ++j) v.push_back(j);
      per_dim.push_back(v);
    }
    Window w = Product(per_dim, in);
    w.divisor = divisor_override ? divisor_override
                                 : (count_include_pad ? pool_size : clipped);
    g.windows.push_back(w);
  }
  return g;
}

Geometry AdaptiveGeometry(const Shape& in, const Shape& out) {
  Geometry g{in, out, {}};
  for (const auto& o : Indices(out)) {
    std::vector<std::vector<int64_t>> per_dim;
    std::vector<int64_t> first;
    int64_t size = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t start = (o[i] * in[i]) / out[i];
      const int64_t end = ((o[i] + 1) * in[i] + out[i] - 1) / out[i];
      std::vector<int64_t> v;
      for (int64_t j = start; j < end; ++j) v.push_back(j);
      per_dim.push_back(v);
      first.push_back(start);
      size *= end - start;
    }
    Window w = Product(per_dim, in);
    w.first = FlatOf(first, in);
    w.divisor = size;
    g.windows.push_back(w);
  }
  return g;
}

Shape Full(const Shape& lead, const Shape& spatial) {
  Shape s = lead;
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

// ATen's max pool: the first maximum in window order; a NaN replaces it.
void RefMax(const HostTensor& x, const Shape& lead, const Geometry& g,
            std::vector<double>* values, std::vector<double>* indices) {
  const int64_t plane = NumElements(g.in), planes = NumElements(lead);
  const bool is_float = x.dtype == ir::FLOAT32 || x.dtype == ir::FLOAT16 ||
                        x.dtype == ir::BFLOAT16;
  const double smallest =
      is_float ? -kInf
               : (x.dtype == ir::INT32
                      ? std::numeric_limits<int32_t>::min()
                      : static_cast<double>(std::numeric_limits<int64_t>::min()));
  for (int64_t b = 0; b < planes; ++b) {
    for (const Window& w : g.windows) {
      double best = smallest;
      int64_t at = w.first;
      for (int64_t pos : w.positions) {
        const double v = x.values[b * plane + pos];
        if (v > best || std::isnan(v)) {
          best = v;
          at = pos;
        }
      }
      values->push_back(best);
      indices->push_back(at);
    }
  }
}

std::vector<double> Tolerance(ir::DType t, const std::vector<double>& want,
                              const std::vector<double>& abs_sum) {
  std::vector<double> tol;
  for (size_t i = 0; i < want.size(); ++i) {
    tol.push_back(UnitRoundoff(t) * std::fabs(want[i]) * 1.01 +
                  abs_sum[i] * 1e-6 + 1e-30);
  }
  return tol;
}

struct MaxCase {
  Shape lead, in, k, s, p, d;
  bool ceil = false;
};

std::vector<MaxCase> MaxCases() {
  return {
      {{2, 3}, {6, 7}, {2, 2}, {2, 2}, {0, 0}, {1, 1}},
      {{3}, {7, 5}, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true},
      {{1, 2}, {5, 5}, {3, 3}, {2, 2}, {1, 1}, {2, 1}, true},
      {{1, 2}, {4, 5, 3}, {2, 3, 2}, {2, 1, 1}, {1, 1, 0}, {1, 1, 2}},
      {{2}, {5, 4, 6}, {3, 2, 2}, {2, 2, 3}, {0, 1, 1}, {1, 1, 1}, true},
  };
}

ir::Graph MaxGraph(const MaxCase& c, ir::DType t, const Shape& out) {
  const std::string op = c.in.size() == 3 ? "max_pool3d_with_indices"
                                          : "max_pool2d_with_indices";
  return OneOpGraph(op, {Type(t, Full(c.lead, c.in))},
                    {Type(t, Full(c.lead, out)), Type(ir::INT64, Full(c.lead, out))},
                    {{"kernel_size", StrA(Join(c.k))},
                     {"stride", StrA(Join(c.s))},
                     {"padding", StrA(Join(c.p))},
                     {"dilation", StrA(Join(c.d))},
                     {"ceil_mode", BoolA(c.ceil)}});
}

TEST(PoolingOpsTest, MaxPoolWithIndicesMatchesAten) {
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32,
                      ir::INT64}) {
    for (const MaxCase& c : MaxCases()) {
      const Geometry g = MaxGeometry(c.in, c.k, c.s, c.p, c.d, c.ceil);
      HostTensor x = Random(t, Full(c.lead, c.in), 7, -4, 4);
      if (t == ir::FLOAT32) {
        // NaN wins (the last one), -inf never does, ties keep the first.
        x.values[1] = kNan;
        x.values[3] = -kInf;
        x.values[4] = x.values[5] = 10;
      }
      const std::string what = absl::StrCat(
          DTypeText(t), " in", ShapeText(Full(c.lead, c.in)), " k", Join(c.k),
          " s", Join(c.s), " p", Join(c.p), " d", Join(c.d),
          c.ceil ? " ceil" : "");
      auto out = CompileAndRun(MaxGraph(c, t, g.out), {x});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      std::vector<double> values, indices;
      RefMax(x, c.lead, g, &values, &indices);
      ExpectExact((*out)[0], values, what + " values");
      ExpectExact((*out)[1], indices, what + " indices");
    }
  }
}

TEST(PoolingOpsTest, MaxPoolOfAllMinusInfinityKeepsTheFirstPosition) {
  const MaxCase c{{1}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}};
  const Geometry g = MaxGeometry(c.in, c.k, c.s, c.p, c.d, c.ceil);
  HostTensor x = Tensor(ir::FLOAT32, {1, 3, 3},
                        std::vector<double>(9, -kInf));
  auto out = CompileAndRun(MaxGraph(c, ir::FLOAT32, g.out), {x});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> values, indices;
  RefMax(x, c.lead, g, &values, &indices);
  ExpectExact((*out)[1], indices, "indices");
}

TEST(PoolingOpsTest, MaxPoolBackwardAddsAtTheIndices) {
  for (ir::DType t : kFloatTypes) {
    for (const MaxCase& c : MaxCases()) {
      const Geometry g = MaxGeometry(c.in, c.k, c.s, c.p, c.d, c.ceil);
      const HostTensor x = Random(t, Full(c.lead, c.in), 8, -4, 4);
      std::vector<double> values, indices;
      RefMax(x, c.lead, g, &values, &indices);
      const HostTensor go = Random(t, Full(c.lead, g.out), 9);
      const HostTensor idx =
          Tensor(ir::INT64, Full(c.lead, g.out), indices);
      const int64_t plane = NumElements(c.in);
      const int64_t outs = NumElements(g.out);
      std::vector<double> want(x.values.size()), abs_sum(x.values.size());
      for (size_t i = 0; i < indices.size(); ++i) {
        const int64_t at = (i / outs) * plane + static_cast<int64_t>(indices[i]);
        want[at] += go.values[i];
        abs_sum[at] += std::fabs(go.values[i]);
      }
      const std::string op = c.in.size() == 3
                                 ? "max_pool3d_with_indices_backward"
                                 : "max_pool2d_with_indices_backward";
      const std::string what = absl::StrCat(op, " ", DTypeText(t),
                                            ShapeText(Full(c.lead, c.in)));
      auto out = CompileAndRun(
          OneOpGraph(op, {go.type(), x.type(), idx.type()}, {x.type()},
                     {{"kernel_size", StrA(Join(c.k))},
                      {"stride", StrA(Join(c.s))},
                      {"padding", StrA(Join(c.p))},
                      {"dilation", StrA(Join(c.d))},
                      {"ceil_mode", BoolA(c.ceil)}}),
          {go, x, idx});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectClose((*out)[0], want, Tolerance(t, want, abs_sum), what);
    }
  }
}

TEST(PoolingOpsTest, MaxPoolBackwardRangeChecksIndices) {
  // spec: P8 -- an index outside the plane raises instead of writing.
  const HostTensor go = Random(ir::FLOAT32, {1, 2, 2}, 1);
  const HostTensor x = Random(ir::FLOAT32, {1, 4, 4}, 2);
  const HostTensor idx = Tensor(ir::INT64, {1, 2, 2}, {0, 3, 16, 5});
  auto out = CompileAndRun(
      OneOpGraph("max_pool2d_with_indices_backward",
                 {go.type(), x.type(), idx.type()}, {x.type()},
                 {{"kernel_size", StrA("2")}}),
      {go, x, idx});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("out of range"));
}

struct AvgCase {
  Shape lead, in, k, s, p;
  bool ceil = false, count_include_pad = true;
  int64_t divisor_override = 0;
};

std::vector<AvgCase> AvgCases() {
  return {
      {{2, 3}, {6, 7}, {2, 2}, {2, 2}, {0, 0}},
      {{3}, {7, 5}, {3, 2}, {2, 1}, {1, 1}, true, true},
      {{1, 2}, {5, 5}, {3, 3}, {2, 2}, {1, 1}, true, false},
      {{1, 2}, {5, 6}, {2, 3}, {2, 2}, {1, 1}, false, true, 5},
      {{1, 2}, {4, 5, 3}, {2, 3, 2}, {2, 1, 1}, {1, 1, 0}},
      {{2}, {5, 4, 6}, {3, 2, 2}, {2, 2, 3}, {0, 1, 1}, true, false},
  };
}

Attrs AvgAttrs(const AvgCase& c) {
  Attrs a = {{"kernel_size", StrA(Join(c.k))},
             {"stride", StrA(Join(c.s))},
             {"padding", StrA(Join(c.p))},
             {"ceil_mode", BoolA(c.ceil)},
             {"count_include_pad", BoolA(c.count_include_pad)}};
  if (c.divisor_override) a["divisor_override"] = IntA(c.divisor_override);
  return a;
}

TEST(PoolingOpsTest, AvgPoolMatchesAten) {
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT64}) {
    for (const AvgCase& c : AvgCases()) {
      const Geometry g = AvgGeometry(c.in, c.k, c.s, c.p, c.ceil,
                                     c.count_include_pad, c.divisor_override);
      const HostTensor x = Random(t, Full(c.lead, c.in), 3, -9, 9);
      const int64_t plane = NumElements(c.in);
      std::vector<double> want, abs_sum;
      for (int64_t b = 0; b < NumElements(c.lead); ++b) {
        for (const Window& w : g.windows) {
          double sum = 0, abs = 0;
          for (int64_t pos : w.positions) {
            sum += x.values[b * plane + pos];
            abs += std::fabs(x.values[b * plane + pos]);
          }
          if (t == ir::INT64) {
            want.push_back(w.positions.empty()
                               ? 0
                               : static_cast<double>(
                                     static_cast<int64_t>(sum) / w.divisor));
          } else {
            want.push_back(w.positions.empty() ? 0 : sum / w.divisor);
          }
          abs_sum.push_back(abs / w.divisor);
        }
      }
      const std::string op =
          c.in.size() == 3 ? "avg_pool3d" : "avg_pool2d";
      const std::string what =
          absl::StrCat(op, " ", DTypeText(t), ShapeText(Full(c.lead, c.in)),
                       " k", Join(c.k), " s", Join(c.s), " p", Join(c.p),
                       c.ceil ? " ceil" : "",
                       c.count_include_pad ? "" : " exclude_pad", " div",
                       c.divisor_override);
      auto out = CompileAndRun(
          OneOpGraph(op, {x.type()}, {Type(t, Full(c.lead, g.out))},
                     AvgAttrs(c)),
          {x});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectClose((*out)[0], want, Tolerance(t, want, abs_sum), what);
    }
  }
}

TEST(PoolingOpsTest, AvgPoolBackwardMatchesAten) {
  for (ir::DType t : kFloatTypes) {
    for (const AvgCase& c : AvgCases()) {
      const Geometry g = AvgGeometry(c.in, c.k, c.s, c.p, c.ceil,
                                     c.count_include_pad, c.divisor_override);
      const HostTensor x = Random(t, Full(c.lead, c.in), 4);
      const HostTensor go = Random(t, Full(c.lead, g.out), 5);
      const int64_t plane = NumElements(c.in), outs = g.windows.size();
      std::vector<double> want(x.values.size()), abs_sum(x.values.size());
      for (int64_t b = 0; b < NumElements(c.lead); ++b) {
        for (int64_t o = 0; o < outs; ++o) {
          const Window& w = g.windows[o];
          for (int64_t pos : w.positions) {
            want[b * plane + pos] += go.values[b * outs + o] / w.divisor;
            abs_sum[b * plane + pos] +=
                std::fabs(go.values[b * outs + o] / w.divisor);
          }
        }
      }
      const std::string op =
          c.in.size() == 3 ? "avg_pool3d_backward" : "avg_pool2d_backward";
      const std::string what = absl::StrCat(op, " ", DTypeText(t),
                                            ShapeText(Full(c.lead, c.in)));
      auto out = CompileAndRun(
          OneOpGraph(op, {go.type(), x.type()}, {x.type()}, AvgAttrs(c)),
          {go, x});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectClose((*out)[0], want, Tolerance(t, want, abs_sum), what);
    }
  }
}

struct AdaptiveCase {
  Shape lead, in, out;
};

std::vector<AdaptiveCase> AdaptiveCases() {
  return {
      {{2, 3}, {6, 7}, {3, 3}},
      {{3}, {7, 5}, {4, 5}},
      {{1, 2}, {5, 5}, {7, 2}},
      {{1, 2}, {4, 5, 3}, {3, 2, 3}},
  };
}

TEST(PoolingOpsTest, AdaptivePoolsMatchAten) {
  for (ir::DType t : kFloatTypes) {
    for (const AdaptiveCase& c : AdaptiveCases()) {
      const Geometry g = AdaptiveGeometry(c.in, c.out);
      const HostTensor x = Random(t, Full(c.lead, c.in), 11, -4, 4);
      const int64_t plane = NumElements(c.in);
      std::vector<double> avg, abs_sum, values, indices;
      for (int64_t b = 0; b < NumElements(c.lead); ++b) {
        for (const Window& w : g.windows) {
          double sum = 0, abs = 0;
          for (int64_t pos : w.positions) {
            sum += x.values[b * plane + pos];
            abs += std::fabs(x.values[b * plane + pos]);
          }
          avg.push_back(sum / w.divisor);
          abs_sum.push_back(abs / w.divisor);
        }
      }
      RefMax(x, c.lead, g, &values, &indices);
      const bool three = c.in.size() == 3;
      const std::string what = absl::StrCat(
          DTypeText(t), ShapeText(Full(c.lead, c.in)), " -> ", Join(c.out));
      const Shape out_shape = Full(c.lead, c.out);
      auto out = CompileAndRun(
          OneOpGraph(three ? "_adaptive_avg_pool3d" : "_adaptive_avg_pool2d",
                     {x.type()}, {Type(t, out_shape)},
                     {{"output_size", StrA(Join(c.out))}}),
          {x});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectClose((*out)[0], avg, Tolerance(t, avg, abs_sum), "avg " + what);
      out = CompileAndRun(
          OneOpGraph(three ? "adaptive_max_pool3d" : "adaptive_max_pool2d",
                     {x.type()},
                     {Type(t, out_shape), Type(ir::INT64, out_shape)},
                     {{"output_size", StrA(Join(c.out))}}),
          {x});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectExact((*out)[0], values, "max " + what);
      ExpectExact((*out)[1], indices, "max indices " + what);

      // Backward: each input sums grad / window size over its windows.
      const HostTensor go = Random(t, out_shape, 12);
      const int64_t outs = g.windows.size();
      std::vector<double> want(x.values.size()), gabs(x.values.size());
      for (int64_t b = 0; b < NumElements(c.lead); ++b) {
        for (int64_t o = 0; o < outs; ++o) {
          for (int64_t pos : g.windows[o].positions) {
            const double share =
                go.values[b * outs + o] / g.windows[o].divisor;
            want[b * plane + pos] += share;
            gabs[b * plane + pos] += std::fabs(share);
          }
        }
      }
      out = CompileAndRun(
          OneOpGraph(three ? "_adaptive_avg_pool3d_backward"
                           : "_adaptive_avg_pool2d_backward",
                     {go.type(), x.type()}, {x.type()}),
          {go, x});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectClose((*out)[0], want, Tolerance(t, want, gabs),
                  "avg backward " + what);
    }
  }
}

TEST(PoolingOpsTest, BadArgumentsNameTheProblem) {
  const HostTensor x = Random(ir::FLOAT32, {1, 2, 4, 4}, 1);
  auto out = CompileAndRun(
      OneOpGraph("max_pool2d_with_indices", {x.type()},
                 {Type(ir::FLOAT32, {1, 2, 3, 3}),
                  Type(ir::INT64, {1, 2, 3, 3})},
                 {{"kernel_size", StrA("2")}, {"padding", StrA("2")}}),
      {x});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("pad should be at most half"));
  const HostTensor b = Random(ir::BOOL, {1, 2, 4, 4}, 1, 0, 2);
  out = CompileAndRun(
      OneOpGraph("max_pool2d_with_indices", {b.type()},
                 {Type(ir::BOOL, {1, 2, 2, 2}), Type(ir::INT64, {1, 2, 2, 2})},
                 {{"kernel_size", StrA("2")}}),
      {b});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("PyTorch's CPU kernel takes"));
}

}  // namespace
}  // namespace rbln::compiler

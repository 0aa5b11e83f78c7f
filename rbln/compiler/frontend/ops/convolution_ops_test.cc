// spec: P2, P3
// convolution and convolution_backward (1-3 spatial dims, groups, stride,
// padding, dilation, transposed with output_padding) against a
// double-precision reference, in every float dtype.
#include <cmath>
#include <cstdint>
#include <functional>
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

const ir::DType kFloatTypes[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16};

struct Conv {
  Shape x, w;  // input [N, C, *I]; weight [F, C/G, *K] or [C, F/G, *K]
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
  bool bias = true;

  int spatial() const { return x.size() - 2; }
  int64_t out_channels() const {
    return transposed ? w[1] * groups : w[0];
  }
  Shape out() const {
    Shape o = {x[0], out_channels()};
    for (int i = 0; i < spatial(); ++i) {
      const int64_t span = dilation[i] * (w[2 + i] - 1) + 1;
      o.push_back(transposed ? (x[2 + i] - 1) * stride[i] - 2 * padding[i] +
                                   span + output_padding[i]
                             : (x[2 + i] + 2 * padding[i] - span) / stride[i] +
                                   1);
    }
    return o;
  }
  std::string Text() const {
    return absl::StrCat("x", ShapeText(x), " w", ShapeText(w), " s[",
                        absl::StrJoin(stride, ","), "] p[",
                        absl::StrJoin(padding, ","), "] d[",
                        absl::StrJoin(dilation, ","), "] op[",
                        absl::StrJoin(output_padding, ","), "] g", groups,
                        transposed ? " transposed" : "", bias ? " bias" : "");
  }
  Attrs attrs() const {
    return {{"stride", StrA(absl::StrJoin(stride, ","))},
            {"padding", StrA(absl::StrJoin(padding, ","))},
            {"dilation", StrA(absl::StrJoin(dilation, ","))},
            {"output_padding", StrA(absl::StrJoin(output_padding, ","))},
            {"transposed", BoolA(transposed)},
            {"groups", IntA(groups)}};
  }
};

int64_t Flat(const Shape& shape, const std::vector<int64_t>& index) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + index[d];
  return f;
}

// Calls term(x_index, w_index, out_index, out_channel) for every product
// x * w that the convolution sums (ATen's definition, both directions).
void ForEachTerm(const Conv& c,
                 const std::function<void(int64_t, int64_t, int64_t,
                                          int64_t)>& term) {
  const Shape out = c.out();
  const int s = c.spatial();
  const int64_t g = c.groups;
  const int64_t x_group = c.x[1] / g;
  const int64_t out_group = c.out_channels() / g;
  Shape in(c.x.begin() + 2, c.x.end()), k(c.w.begin() + 2, c.w.end());
  // Enumerates (n, ci, i..., co, k...) and finds the output position
  // o * stride - padding + k * dilation = i (plain) or
  // i * stride - padding + k * dilation = o (transposed).
  std::vector<int64_t> i_idx(s, 0), k_idx(s, 0);
  const int64_t in_count = NumElements(in), k_count = NumElements(k);
  for (int64_t n = 0; n < c.x[0]; ++n) {
    for (int64_t ci = 0; ci < c.x[1]; ++ci) {
      const int64_t grp = ci / x_group;
      for (int64_t ii = 0; ii < in_count; ++ii) {
        for (int64_t r = ii, d = s - 1; d >= 0; --d) {
          i_idx[d] = r % in[d];
          r /= in[d];
        }
        for (int64_t kk = 0; kk < k_count; ++kk) {
          for (int64_t r = kk, d = s - 1; d >= 0; --d) {
            k_idx[d] = r % k[d];
            r /= k[d];
          }
          std::vector<int64_t> o_idx(s);
          bool valid = true;
          for (int d = 0; d < s && valid; ++d) {
            if (c.transposed) {
              o_idx[d] = i_idx[d] * c.stride[d] - c.padding[d] +
                         k_idx[d] * c.dilation[d];
              valid = o_idx[d] >= 0 && o_idx[d] < out[2 + d];
            } else {
              const int64_t num = i_idx[d] + c.padding[d] -
                                  k_idx[d] * c.dilation[d];
              valid = num >= 0 && num % c.stride[d] == 0 &&
                      num / c.stride[d] < out[2 + d];
              o_idx[d] = valid ? num / c.stride[d] : 0;
            }
          }
          if (!valid) continue;
          std::vector<int64_t> xi = {n, ci};
          xi.insert(xi.end(), i_idx.begin(), i_idx.end());
          for (int64_t fo = 0; fo < out_group; ++fo) {
            const int64_t co = grp * out_group + fo;
            std::vector<int64_t> wi =
                c.transposed ? std::vector<int64_t>{ci, fo}
                             : std::vector<int64_t>{co, ci % x_group};
            wi.insert(wi.end(), k_idx.begin(), k_idx.end());
            std::vector<int64_t> oi = {n, co};
            oi.insert(oi.end(), o_idx.begin(), o_idx.end());
            term(Flat(c.x, xi), Flat(c.w, wi), Flat(out, oi), co);
          }
        }
      }
    }
  }
}

// |error| bound: one rounding of the result and f32 accumulation.
std::vector<double> Tolerance(ir::DType t, const std::vector<double>& want,
                              const std::vector<double>& abs_sum) {
  std::vector<double> tol;
  for (size_t i = 0; i < want.size(); ++i) {
    tol.push_back(UnitRoundoff(t) * std::fabs(want[i]) * 1.01 +
                  abs_sum[i] * 1e-6 + 1e-30);
  }
  return tol;
}

ir::Graph ConvGraph(const Conv& c, ir::DType t) {
  std::vector<ir::TensorType> in = {Type(t, c.x), Type(t, c.w)};
  if (c.bias) in.push_back(Type(t, {c.out_channels()}));
  return OneOpGraph("convolution", in, {Type(t, c.out())}, c.attrs());
}

std::vector<Conv> Cases() {
  std::vector<Conv> cases = {
      // 2-D: plain, strided/padded/dilated, grouped, depthwise.
      {{2, 3, 6, 7}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, {0, 0}},
      {{1, 2, 7, 8}, {3, 2, 3, 2}, {2, 3}, {1, 2}, {2, 1}, {0, 0}},
      {{1, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, 2},
      {{2, 3, 5, 4}, {3, 1, 2, 2}, {1, 1}, {0, 1}, {1, 1}, {0, 0}, 3, false,
       false},
      // 1-D and 3-D.
      {{2, 2, 9}, {3, 2, 3}, {2}, {1}, {2}, {0}},
      {{1, 4, 7}, {2, 2, 2}, {1}, {0}, {1}, {0}, 2, false, false},
      {{1, 2, 4, 5, 3}, {4, 1, 2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {1, 1, 2},
       {0, 0, 0}, 2},
      // Transposed, with output padding and groups.
      {{1, 3, 4, 5}, {3, 2, 3, 3}, {2, 2}, {1, 0}, {1, 1}, {1, 0}, 1, true},
      {{2, 4, 3, 3}, {4, 1, 2, 3}, {1, 2}, {0, 1}, {2, 1}, {0, 1}, 2, true},
      {{1, 2, 5}, {2, 3, 4}, {3}, {2}, {1}, {2}, 1, true, false},
      {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 2}, {2, 1, 2}, {0, 1, 0}, {1, 1, 1},
       {1, 0, 0}, 1, true},
      // Padding larger than the dilated kernel crops (transposed).
      {{1, 1, 6, 6}, {1, 1, 2, 2}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, 1, true},
  };
  return cases;
}

TEST(ConvolutionOpsTest, ForwardMatchesTheReference) {
  for (ir::DType t : kFloatTypes) {
    for (const Conv& c : Cases()) {
      const std::string what = absl::StrCat(DTypeText(t), " ", c.Text());
      const HostTensor x = Random(t, c.x, 1), w = Random(t, c.w, 2),
                       b = Random(t, {c.out_channels()}, 3);
      const int64_t n_out = NumElements(c.out());
      std::vector<double> want(n_out, 0.0), abs_sum(n_out, 0.0);
      ForEachTerm(c, [&](int64_t xi, int64_t wi, int64_t oi, int64_t) {
        want[oi] += x.values[xi] * w.values[wi];
        abs_sum[oi] += std::fabs(x.values[xi] * w.values[wi]);
      });
      if (c.bias) {
        const int64_t plane = n_out / (c.x[0] * c.out_channels());
        for (int64_t i = 0; i < n_out; ++i) {
          want[i] += b.values[(i / plane) % c.out_channels()];
        }
      }
      std::vector<HostTensor> inputs = {x, w};
      if (c.bias) inputs.push_back(b);
      auto out = CompileAndRun(ConvGraph(c, t), inputs);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectClose((*out)[0], want, Tolerance(t, want, abs_sum), what);
    }
  }
}

// PyTorch's CPU convolution takes integers too: exact sums in the type.
TEST(ConvolutionOpsTest, IntegerForwardIsExact) {
  for (ir::DType t : {ir::INT32, ir::INT64}) {
    for (const Conv& c : Cases()) {
      const std::string what = absl::StrCat(DTypeText(t), " ", c.Text());
      const HostTensor x = Random(t, c.x, 1, -5, 5), w = Random(t, c.w, 2, -5, 5),
                       b = Random(t, {c.out_channels()}, 3, -5, 5);
      std::vector<double> want(NumElements(c.out()), 0.0);
      ForEachTerm(c, [&](int64_t xi, int64_t wi, int64_t oi, int64_t) {
        want[oi] += x.values[xi] * w.values[wi];
      });
      if (c.bias) {
        const int64_t plane =
            NumElements(c.out()) / (c.x[0] * c.out_channels());
        for (size_t i = 0; i < want.size(); ++i) {
          want[i] += b.values[(i / plane) % c.out_channels()];
        }
      }
      std::vector<HostTensor> inputs = {x, w};
      if (c.bias) inputs.push_back(b);
      auto out = CompileAndRun(ConvGraph(c, t), inputs);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      ExpectExact((*out)[0], want, what);
    }
  }
}

TEST(ConvolutionOpsTest, BackwardMatchesTheReference) {
  for (ir::DType t : kFloatTypes) {
    for (const Conv& c : Cases()) {
      const std::string what =
          absl::StrCat("backward ", DTypeText(t), " ", c.Text());
      const HostTensor x = Random(t, c.x, 4), w = Random(t, c.w, 5),
                       go = Random(t, c.out(), 6);
      std::vector<double> gx(x.values.size()), gx_abs(x.values.size()),
          gw(w.values.size()), gw_abs(w.values.size()),
          gb(c.out_channels()), gb_abs(c.out_channels());
      ForEachTerm(c, [&](int64_t xi, int64_t wi, int64_t oi, int64_t) {
        gx[xi] += go.values[oi] * w.values[wi];
        gx_abs[xi] += std::fabs(go.values[oi] * w.values[wi]);
        gw[wi] += go.values[oi] * x.values[xi];
        gw_abs[wi] += std::fabs(go.values[oi] * x.values[xi]);
      });
      const int64_t plane = NumElements(c.out()) / (c.x[0] * c.out_channels());
      for (size_t i = 0; i < go.values.size(); ++i) {
        gb[(i / plane) % c.out_channels()] += go.values[i];
        gb_abs[(i / plane) % c.out_channels()] += std::fabs(go.values[i]);
      }
      // All three, then each alone (the node's outputs follow output_mask).
      for (const std::string mask : {"1,1,1", "1,0,0", "0,1,0", "0,0,1",
                                     "0,1,1"}) {
        Attrs attrs = c.attrs();
        attrs["output_mask"] = StrA(mask);
        std::vector<ir::TensorType> outs;
        if (mask[0] == '1') outs.push_back(Type(t, c.x));
        if (mask[2] == '1') outs.push_back(Type(t, c.w));
        if (mask[4] == '1') outs.push_back(Type(t, {c.out_channels()}));
        auto out = CompileAndRun(
            OneOpGraph("convolution_backward",
                       {go.type(), x.type(), w.type()}, outs, attrs),
            {go, x, w});
        const std::string m = absl::StrCat(what, " mask ", mask);
        ASSERT_TRUE(out.ok()) << m << ": " << out.status();
        int next = 0;
        if (mask[0] == '1') {
          ExpectClose((*out)[next++], gx, Tolerance(t, gx, gx_abs),
                      m + " grad_input");
        }
        if (mask[2] == '1') {
          ExpectClose((*out)[next++], gw, Tolerance(t, gw, gw_abs),
                      m + " grad_weight");
        }
        if (mask[4] == '1') {
          ExpectClose((*out)[next++], gb, Tolerance(t, gb, gb_abs),
                      m + " grad_bias");
        }
        if (t != ir::FLOAT32) break;  // Masks once per case is enough.
      }
    }
  }
}

TEST(ConvolutionOpsTest, EmptyInputGivesTheBias) {
  const Conv c{{0, 2, 4}, {3, 2, 2}, {1}, {0}, {1}, {0}};
  auto out = CompileAndRun(
      ConvGraph(c, ir::FLOAT32),
      {Random(ir::FLOAT32, c.x, 1), Random(ir::FLOAT32, c.w, 2),
       Random(ir::FLOAT32, {3}, 3)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].values.empty());
  // No input channels: every output is the bias.
  const Conv z{{1, 0, 3}, {2, 0, 2}, {1}, {0}, {1}, {0}};
  const HostTensor b = Tensor(ir::FLOAT32, {2}, {1.5, -2});
  out = CompileAndRun(ConvGraph(z, ir::FLOAT32),
                      {Random(ir::FLOAT32, z.x, 1),
                       Random(ir::FLOAT32, z.w, 2), b});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], {1.5, 1.5, -2, -2}, "no input channels");
}

TEST(ConvolutionOpsTest, BadArgumentsNameTheProblem) {
  const HostTensor x = Random(ir::FLOAT32, {1, 3, 5, 5}, 1);
  // Channels that do not match the weight.
  auto out = CompileAndRun(
      OneOpGraph("convolution", {x.type(), Type(ir::FLOAT32, {2, 2, 3, 3})},
                 {Type(ir::FLOAT32, {1, 2, 3, 3})}, {}),
      {x, Random(ir::FLOAT32, {2, 2, 3, 3}, 2)});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("to have 2 channels"));
  // A kernel larger than the padded input.
  out = CompileAndRun(
      OneOpGraph("convolution", {x.type(), Type(ir::FLOAT32, {2, 3, 7, 7})},
                 {Type(ir::FLOAT32, {1, 2, 1, 1})}, {}),
      {x, Random(ir::FLOAT32, {2, 3, 7, 7}, 2)});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(),
              HasSubstr("Kernel size can't be greater than actual input size"));
  // Bool inputs (PyTorch's CPU convolution takes floats and integers).
  const HostTensor xb = Random(ir::BOOL, {1, 1, 4}, 1, 0, 2);
  out = CompileAndRun(
      OneOpGraph("convolution", {xb.type(), Type(ir::BOOL, {1, 1, 2})},
                 {Type(ir::BOOL, {1, 1, 3})}, {}),
      {xb, Random(ir::BOOL, {1, 1, 2}, 2, 0, 2)});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("float and integer"));
}

}  // namespace
}  // namespace rbln::compiler

// spec: P2, P3
// Batch norm (every ATen form, training and evaluation, running stats) and
// group norm against double-precision references.
#include <cmath>
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

const ir::DType kFloatTypes[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16};

std::vector<double> RelTolerance(ir::DType t, const std::vector<double>& want,
                                 double abs) {
  std::vector<double> tol;
  for (double w : want) tol.push_back(UnitRoundoff(t) * std::fabs(w) * 1.01 + abs);
  return tol;
}

// Per-channel statistics of x [N, C, *] in double.
struct Stats {
  std::vector<double> mean, var;  // biased variance
  int64_t count = 0;
};

Stats ChannelStats(const HostTensor& x) {
  const int64_t c = x.shape[1];
  const int64_t inner = NumElements(x.shape) / (x.shape[0] * c);
  Stats s{std::vector<double>(c), std::vector<double>(c), x.shape[0] * inner};
  for (size_t i = 0; i < x.values.size(); ++i) {
    s.mean[(i / inner) % c] += x.values[i] / s.count;
  }
  for (size_t i = 0; i < x.values.size(); ++i) {
    const double d = x.values[i] - s.mean[(i / inner) % c];
    s.var[(i / inner) % c] += d * d / s.count;
  }
  return s;
}

struct BatchNormCase {
  std::string op;
  bool training;
  bool weight, bias;
  int outputs;
};

TEST(NormOpsTest, BatchNormFormsMatchTheReference) {
  const std::vector<BatchNormCase> cases = {
      {"_native_batch_norm_legit_functional", true, true, true, 5},
      {"_native_batch_norm_legit_functional", false, true, false, 5},
      {"_native_batch_norm_legit_functional", true, false, true, 5},
      {"_native_batch_norm_legit_no_training", false, false, false, 3},
      {"_native_batch_norm_legit", true, true, true, 3},
      {"native_batch_norm", true, false, true, 3},
      {"_batch_norm_with_update_functional", true, true, true, 5},
  };
  const double eps = 1e-3, momentum = 0.2;
  for (ir::DType t : kFloatTypes) {
    for (const BatchNormCase& c : cases) {
      const Shape shape = {3, 4, 5, 2};
      const HostTensor x = Random(t, shape, 1, -3, 5);
      const HostTensor w = Random(t, {4}, 2), b = Random(t, {4}, 3);
      // Running stats in float32 (mixed precision, as modules keep them).
      const HostTensor rm = Random(ir::FLOAT32, {4}, 4, -1, 1);
      const HostTensor rv = Random(ir::FLOAT32, {4}, 5, 0.5, 2);
      const bool has_stats = c.op != "_native_batch_norm_legit";
      std::vector<HostTensor> inputs = {x};
      Attrs attrs = {{"eps", FloatA(eps)}, {"momentum", FloatA(momentum)}};
      if (c.op != "_native_batch_norm_legit_no_training" &&
          c.op != "_batch_norm_with_update_functional") {
        attrs["training"] = BoolA(c.training);
      }
      if (c.weight) {
        inputs.push_back(w);
      } else {
        attrs["has_weight"] = BoolA(false);
      }
      if (c.bias) {
        inputs.push_back(b);
      } else {
        attrs["has_bias"] = BoolA(false);
      }
      if (has_stats) {
        inputs.push_back(rm);
        inputs.push_back(rv);
      }
      const Stats s = ChannelStats(x);
      const Shape stat = c.training ? Shape{4} : Shape{0};
      const ir::DType stat_t = has_stats ? ir::FLOAT32 : t;
      std::vector<ir::TensorType> outs = {x.type(), Type(stat_t, stat),
                                          Type(stat_t, stat)};
      if (c.outputs == 5) {
        outs.push_back(rm.type());
        outs.push_back(rv.type());
      }
      std::vector<ir::TensorType> types;
      for (const HostTensor& in : inputs) types.push_back(in.type());
      const std::string what = absl::StrCat(c.op, " ", DTypeText(t),
                                            c.training ? " train" : " eval",
                                            c.weight ? " w" : "", c.bias ? " b" : "");
      auto out = CompileAndRun(OneOpGraph(c.op, types, outs, attrs), inputs);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      std::vector<double> y, mean, invstd;
      for (int ch = 0; ch < 4; ++ch) {
        const double m = c.training ? s.mean[ch] : rm.values[ch];
        const double v = c.training ? s.var[ch] : rv.values[ch];
        mean.push_back(m);
        invstd.push_back(1 / std::sqrt(v + eps));
      }
      for (size_t i = 0; i < x.values.size(); ++i) {
        const int ch = (i / 10) % 4;
        double v = (x.values[i] - mean[ch]) * invstd[ch];
        if (c.weight) v *= w.values[ch];
        if (c.bias) v += b.values[ch];
        y.push_back(v);
      }
      ExpectClose((*out)[0], y, RelTolerance(t, y, 2e-5), what + " out");
      if (c.training) {
        ExpectClose((*out)[1], mean, RelTolerance(stat_t, mean, 1e-5),
                    what + " save_mean");
        ExpectClose((*out)[2], invstd, RelTolerance(stat_t, invstd, 1e-5),
                    what + " save_invstd");
      } else {
        EXPECT_TRUE((*out)[1].values.empty() && (*out)[2].values.empty());
      }
      if (c.outputs == 5) {
        std::vector<double> new_rm, new_rv;
        for (int ch = 0; ch < 4; ++ch) {
          if (c.training) {
            new_rm.push_back((1 - momentum) * rm.values[ch] +
                             momentum * s.mean[ch]);
            new_rv.push_back((1 - momentum) * rv.values[ch] +
                             momentum * s.var[ch] * s.count / (s.count - 1));
          } else {
            new_rm.push_back(rm.values[ch]);
            new_rv.push_back(rv.values[ch]);
          }
        }
        ExpectClose((*out)[3], new_rm, RelTolerance(ir::FLOAT32, new_rm, 1e-6),
                    what + " running_mean");
        ExpectClose((*out)[4], new_rv, RelTolerance(ir::FLOAT32, new_rv, 1e-6),
                    what + " running_var");
      }
    }
  }
}

TEST(NormOpsTest, BatchNormNeedsRunningStatsToEvaluate) {
  const HostTensor x = Random(ir::FLOAT32, {2, 3}, 1);
  auto out = CompileAndRun(
      OneOpGraph("native_batch_norm", {x.type()},
                 {x.type(), Type(ir::FLOAT32, {0}), Type(ir::FLOAT32, {0})},
                 {{"training", BoolA(false)},
                  {"has_weight", BoolA(false)},
                  {"has_bias", BoolA(false)},
                  {"has_running_mean", BoolA(false)},
                  {"has_running_var", BoolA(false)}}),
      {x});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("running_mean must be defined"));
}

TEST(NormOpsTest, GroupNormMatchesTheReference) {
  struct Case {
    Shape shape;
    int64_t groups;
    bool weight, bias;
  };
  const double eps = 1e-5;
  for (ir::DType t : kFloatTypes) {
    for (const Case& c : std::vector<Case>{{{2, 6, 5}, 3, true, true},
                                           {{3, 4, 2, 3}, 2, false, true},
                                           {{2, 4}, 4, true, false},
                                           {{1, 6, 7}, 1, false, false}}) {
      const HostTensor x = Random(t, c.shape, 1, -3, 5);
      const int64_t n = c.shape[0], ch = c.shape[1];
      const int64_t hw = NumElements(c.shape) / (n * ch);
      const HostTensor w = Random(t, {ch}, 2), b = Random(t, {ch}, 3);
      std::vector<HostTensor> inputs = {x};
      Attrs attrs = {{"N", IntA(n)},          {"C", IntA(ch)},
                     {"HxW", IntA(hw)},       {"group", IntA(c.groups)},
                     {"eps", FloatA(eps)}};
      if (c.weight) {
        inputs.push_back(w);
      } else {
        attrs["has_weight"] = BoolA(false);
      }
      if (c.bias) {
        inputs.push_back(b);
      } else {
        attrs["has_bias"] = BoolA(false);
      }
      std::vector<ir::TensorType> types;
      for (const HostTensor& in : inputs) types.push_back(in.type());
      const std::string what = absl::StrCat("group_norm ", DTypeText(t),
                                            ShapeText(c.shape), " g", c.groups);
      auto out = CompileAndRun(
          OneOpGraph("native_group_norm", types,
                     {x.type(), Type(t, {n, c.groups}), Type(t, {n, c.groups})},
                     attrs),
          inputs);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      const int64_t per_group = ch / c.groups * hw;
      std::vector<double> mean(n * c.groups), var(n * c.groups), rstd, y;
      for (size_t i = 0; i < x.values.size(); ++i) {
        mean[i / per_group] += x.values[i] / per_group;
      }
      for (size_t i = 0; i < x.values.size(); ++i) {
        const double d = x.values[i] - mean[i / per_group];
        var[i / per_group] += d * d / per_group;
      }
      for (double v : var) rstd.push_back(1 / std::sqrt(v + eps));
      for (size_t i = 0; i < x.values.size(); ++i) {
        const int64_t g = i / per_group, channel = (i / hw) % ch;
        double v = (x.values[i] - mean[g]) * rstd[g];
        if (c.weight) v *= w.values[channel];
        if (c.bias) v += b.values[channel];
        y.push_back(v);
      }
      ExpectClose((*out)[0], y, RelTolerance(t, y, 2e-5), what + " out");
      ExpectClose((*out)[1], mean, RelTolerance(t, mean, 1e-5), what + " mean");
      ExpectClose((*out)[2], rstd, RelTolerance(t, rstd, 1e-5), what + " rstd");
    }
  }
}

}  // namespace
}  // namespace rbln::compiler

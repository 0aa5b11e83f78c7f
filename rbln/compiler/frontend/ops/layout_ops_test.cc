// flip, repeat, unfold and constant_pad_nd against index-arithmetic
// references on host vectors, over every dtype.
// spec: J6 (the Core ATen ops compile)
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

constexpr ir::DType kAllDTypes[] = {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32,
                                    ir::INT32,   ir::INT64,    ir::BOOL};

HostTensor Values(ir::DType dtype, Shape shape, uint32_t seed) {
  if (dtype == ir::BOOL) return Random(dtype, std::move(shape), seed, 0.0, 2.0);
  HostTensor t = Random(dtype, std::move(shape), seed, -50.0, 50.0);
  if (dtype == ir::FLOAT16 || dtype == ir::BFLOAT16 || dtype == ir::FLOAT32) {
    if (!t.values.empty()) t.values[0] = std::nan("");
  }
  return t;
}

// out[i] = x[source(i)] for every multi-index i of `out_shape`.
std::vector<double> Gather(
    const HostTensor& x, const Shape& out_shape,
    const std::function<std::vector<int64_t>(std::vector<int64_t>)>& source) {
  std::vector<double> out;
  for (int64_t i = 0; i < NumElements(out_shape); ++i) {
    out.push_back(x.values[Flatten(source(Unflatten(i, out_shape)), x.shape)]);
  }
  return out;
}

TEST(LayoutOpsTest, FlipReversesTheGivenDims) {
  const Shape in = {2, 1, 3, 4};
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, in, 1);
    for (const std::vector<int>& dims :
         std::vector<std::vector<int>>{{0, 2}, {-1}, {1, 3, 0}, {}}) {
      std::string list;
      std::vector<bool> flipped(4, false);
      for (int d : dims) {
        list += (list.empty() ? "" : ",") + std::to_string(d);
        flipped[(d + 4) % 4] = true;
      }
      ir::Graph g = OneOpGraph("flip", {x.type()}, {x.type()}, {{"dims", StrA(list)}});
      ExpectExact(RunOne(g, {x}),
                  Gather(x, in,
                         [&](std::vector<int64_t> i) {
                           for (int d = 0; d < 4; ++d) {
                             if (flipped[d]) i[d] = in[d] - 1 - i[d];
                           }
                           return i;
                         }),
                  ir::ToText(g));
    }
  }
}

TEST(LayoutOpsTest, RepeatTilesAndAddsLeadingDims) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {2, 3}, 2);
    ir::Graph g = OneOpGraph("repeat", {x.type()}, {Type(dtype, {2, 2, 9})},
                             {{"repeats", StrA("2,1,3")}});
    ExpectExact(RunOne(g, {x}),
                Gather(x, {2, 2, 9},
                       [](std::vector<int64_t> i) {
                         return std::vector<int64_t>{i[1] % 2, i[2] % 3};
                       }),
                ir::ToText(g));
    g = OneOpGraph("repeat", {x.type()}, {Type(dtype, {0, 3})}, {{"repeats", StrA("0,1")}});
    EXPECT_TRUE(CompileAndRun(g, {x}).ok());
  }
  HostTensor s = Tensor(ir::FLOAT32, {}, {4});
  ir::Graph g = OneOpGraph("repeat", {s.type()}, {Type(ir::FLOAT32, {3})},
                           {{"repeats", StrA("3")}});
  ExpectExact(RunOne(g, {s}), {4, 4, 4}, "repeat of a 0-d tensor");
}

TEST(LayoutOpsTest, UnfoldTakesWindows) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {5, 3}, 3);
    struct Case {
      int dim;
      int64_t size, step;
      Shape out;
    };
    for (const Case& c : {Case{0, 2, 2, {2, 3, 2}}, Case{-1, 3, 1, {5, 1, 3}},
                          Case{0, 1, 3, {2, 3, 1}}}) {
      const int d = (c.dim + 2) % 2;
      ir::Graph g = OneOpGraph(
          "unfold", {x.type()}, {Type(dtype, c.out)},
          {{"dimension", IntA(c.dim)}, {"size", IntA(c.size)}, {"step", IntA(c.step)}});
      ExpectExact(RunOne(g, {x}),
                  Gather(x, c.out,
                         [&](std::vector<int64_t> i) {
                           std::vector<int64_t> at = {i[0], i[1]};
                           at[d] = i[d] * c.step + i[2];
                           return at;
                         }),
                  ir::ToText(g));
    }
  }
}

TEST(LayoutOpsTest, ConstantPadNdPadsAndCrops) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {3, 4}, 4);
    // Last dim: 1 before, 2 after; first dim: crop 1 before, 1 after.
    ir::Graph g = OneOpGraph("constant_pad_nd", {x.type()}, {Type(dtype, {3, 7})},
                             {{"pad", StrA("1,2,-1,1")}, {"value", FloatA(2.5)}});
    const double fill = RoundTo(dtype, dtype == ir::BOOL ? 1 : 2.5);
    std::vector<double> want;
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < 7; ++c) {
        const int64_t xr = r + 1, xc = c - 1;
        want.push_back(xr < 3 && xc >= 0 && xc < 4 ? x.values[xr * 4 + xc] : fill);
      }
    }
    ExpectExact(RunOne(g, {x}), want, ir::ToText(g));
  }
  // A pad wider than the input on both sides of a 1-D tensor; then only
  // crops.
  HostTensor v = Tensor(ir::INT64, {2}, {7, 8});
  ir::Graph g = OneOpGraph("constant_pad_nd", {v.type()}, {Type(ir::INT64, {6})},
                           {{"pad", StrA("3,1")}});
  ExpectExact(RunOne(g, {v}), {0, 0, 0, 7, 8, 0}, "pad 3,1");
  HostTensor m = Values(ir::FLOAT32, {4, 4}, 5);
  g = OneOpGraph("constant_pad_nd", {m.type()}, {Type(ir::FLOAT32, {2, 1})},
                 {{"pad", StrA("-2,-1,0,-2")}});
  ExpectExact(RunOne(g, {m}), {m.values[2], m.values[6]}, "negative pads");
  g = OneOpGraph("constant_pad_nd", {m.type()}, {Type(ir::FLOAT32, {4, 4})},
                 {{"pad", StrA("-3,-2")}});
  EXPECT_FALSE(CompileAndRun(g, {m}).ok()) << "a negative output size is an error";
}

}  // namespace
}  // namespace rbln::compiler::testing

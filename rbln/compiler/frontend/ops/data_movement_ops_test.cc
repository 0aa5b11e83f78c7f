// Data movement ops against hand-written references (index arithmetic on
// host vectors), over every dtype, several shapes and edge values.
// spec: P8 (gather index range checks)
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

constexpr ir::DType kAllDTypes[] = {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32,
                                    ir::INT32,   ir::INT64,    ir::BOOL};

// Values in `dtype` with NaN, +-inf and -0.0 mixed in for float types.
HostTensor Values(ir::DType dtype, Shape shape, uint32_t seed) {
  if (dtype == ir::BOOL) return Random(dtype, std::move(shape), seed, 0.0, 2.0);
  HostTensor t = Random(dtype, std::move(shape), seed, -50.0, 50.0);
  if (IsFloatDType(dtype)) {
    const double specials[] = {std::nan(""), INFINITY, -INFINITY, -0.0};
    for (size_t i = 0; i < t.values.size() && i < 4; ++i) {
      t.values[i * 3 % t.values.size()] = specials[i];
    }
  }
  return t;
}

// out[i] = x[source(i)] for every multi-index i of `out_shape`.
std::vector<double> Gather(
    const HostTensor& x, const Shape& out_shape,
    const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& source) {
  std::vector<double> out;
  for (int64_t i = 0; i < NumElements(out_shape); ++i) {
    out.push_back(x.values[Flatten(source(Unflatten(i, out_shape)), x.shape)]);
  }
  return out;
}

std::string What(const ir::Graph& g) { return ir::ToText(g); }

// --- Reshapes. -------------------------------------------------------------

TEST(DataMovementOpsTest, ReshapesKeepRowMajorOrder) {
  struct Case {
    std::string op;
    Shape in, out;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"view", {2, 3}, {3, 2}, {{"size", StrA("3,-1")}}},
      {"reshape", {6}, {1, 2, 3}, {{"shape", StrA("1,2,3")}}},
      {"_unsafe_view", {2, 3, 4}, {6, 4}, {}},
      {"view", {}, {1}, {}},
      {"view", {1}, {}, {{"size", StrA("")}}},
      {"view", {0, 3}, {3, 0}, {}},
      {"flatten", {2, 3, 2}, {12}, {}},
      {"squeeze", {1, 3, 1}, {3}, {}},
      {"squeeze", {1, 3, 1}, {1, 3}, {{"dim", IntA(-1)}}},
      {"squeeze", {1, 3, 1}, {3}, {{"dim", StrA("0,2")}}},
      // squeeze.dims with an empty list squeezes nothing (OpInfo
      // squeeze.multiple).
      {"squeeze", {1, 1, 1}, {1, 1, 1}, {{"dim", StrA("")}}},
      {"unsqueeze", {2, 3}, {2, 3, 1}, {{"dim", IntA(-1)}}},
      {"unsqueeze", {2, 3}, {1, 2, 3}, {{"dim", IntA(0)}}},
  };
  for (ir::DType dtype : kAllDTypes) {
    for (const Case& c : cases) {
      HostTensor x = Values(dtype, c.in, 1);
      ir::Graph g = OneOpGraph(c.op, {x.type()}, {Type(dtype, c.out)}, c.attrs);
      HostTensor got = RunOne(g, {x});
      ExpectExact(got, x.values, What(g));
    }
  }
}

TEST(DataMovementOpsTest, ReshapeRejectsWrongElementCountAndSize) {
  ir::Graph g = OneOpGraph("view", {Type(ir::FLOAT32, {2, 3})},
                           {Type(ir::FLOAT32, {4})});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {Values(ir::FLOAT32, {2, 3}, 0)});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("cannot reshape"), std::string::npos)
      << out.status();
  g = OneOpGraph("unsqueeze", {Type(ir::FLOAT32, {2, 3})},
                 {Type(ir::FLOAT32, {2, 1, 3})}, {{"dim", IntA(0)}});
  EXPECT_FALSE(CompileAndRun(g, {Values(ir::FLOAT32, {2, 3}, 0)}).ok());
}

// Tensor.view(dtype): the bits of each element read as the other type.
TEST(DataMovementOpsTest, ViewAsDTypeOfTheSameSizeReinterpretsBits) {
  // e8m0 scales as float32 exponents (MXFP4): (s << 23) viewed as float32
  // is 2^(s - 127); 0x3F800000 is 1.0, 0x80000000 is -0.0.
  HostTensor bits = Tensor(ir::INT32, {2, 3},
                           {127 << 23, 1 << 23, 254 << 23, 0x3FC00000, INT32_MIN, 0});
  ir::Graph g = OneOpGraph("view", {bits.type()}, {Type(ir::FLOAT32, {2, 3})},
                           {{"dtype", StrA("float32")}});
  ExpectExact(RunOne(g, {bits}),
              {1.0, std::ldexp(1.0, -126), std::ldexp(1.0, 127), 1.5, -0.0, 0.0}, What(g));
  // And back: float32 -> int32 (1.0 is 0x3F800000, -2.0 is 0xC0000000).
  HostTensor f = Tensor(ir::FLOAT32, {3}, {1.0, -2.0, 0.0});
  g = OneOpGraph("view", {f.type()}, {Type(ir::INT32, {3})}, {{"dtype", StrA("int32")}});
  ExpectExact(RunOne(g, {f}), {0x3F800000, static_cast<double>(INT32_MIN) + 0x40000000, 0},
              What(g));
  // bfloat16 <-> float16: the same 16 bits (bf16 1.0 is 0x3F80, which as
  // float16 is 1.875).
  HostTensor h = Tensor(ir::BFLOAT16, {2}, {1.0, -0.0});
  g = OneOpGraph("view", {h.type()}, {Type(ir::FLOAT16, {2})}, {{"dtype", StrA("float16")}});
  ExpectExact(RunOne(g, {h}), {1.875, -0.0}, What(g));
  // Another element size changes the shape: not supported, said so.
  g = OneOpGraph("view", {Type(ir::FLOAT32, {2})}, {Type(ir::INT64, {1})},
                 {{"dtype", StrA("int64")}});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {Values(ir::FLOAT32, {2}, 0)});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("same element size"), std::string::npos)
      << out.status();
}

// --- Permutations, expand, slices. -----------------------------------------

TEST(DataMovementOpsTest, PermuteTransposeAndT) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {2, 3, 4}, 2);
    ir::Graph g = OneOpGraph("permute", {x.type()}, {Type(dtype, {4, 2, 3})},
                             {{"dims", StrA("2,0,-2")}});
    ExpectExact(RunOne(g, {x}),
                Gather(x, {4, 2, 3},
                       [](const std::vector<int64_t>& i) {
                         return std::vector<int64_t>{i[1], i[2], i[0]};
                       }),
                What(g));
    g = OneOpGraph("transpose", {x.type()}, {Type(dtype, {4, 3, 2})},
                   {{"dim0", IntA(-1)}, {"dim1", IntA(0)}});
    ExpectExact(RunOne(g, {x}),
                Gather(x, {4, 3, 2},
                       [](const std::vector<int64_t>& i) {
                         return std::vector<int64_t>{i[2], i[1], i[0]};
                       }),
                What(g));
    HostTensor m = Values(dtype, {3, 5}, 3);
    g = OneOpGraph("t", {m.type()}, {Type(dtype, {5, 3})});
    ExpectExact(RunOne(g, {m}),
                Gather(m, {5, 3},
                       [](const std::vector<int64_t>& i) {
                         return std::vector<int64_t>{i[1], i[0]};
                       }),
                What(g));
    HostTensor v = Values(dtype, {4}, 4);
    g = OneOpGraph("t", {v.type()}, {v.type()});
    ExpectExact(RunOne(g, {v}), v.values, What(g));
  }
  ir::Graph bad = OneOpGraph("permute", {Type(ir::FLOAT32, {2, 3})},
                             {Type(ir::FLOAT32, {3, 2})},
                             {{"dims", StrA("1,1")}});
  EXPECT_FALSE(CompileAndRun(bad, {Values(ir::FLOAT32, {2, 3}, 0)}).ok());
}

TEST(DataMovementOpsTest, ExpandBroadcastsSizeOneAndNewDims) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {3, 1}, 5);
    ir::Graph g = OneOpGraph("expand", {x.type()}, {Type(dtype, {2, 3, 4})},
                             {{"size", StrA("2,-1,4")}});
    ExpectExact(RunOne(g, {x}),
                Gather(x, {2, 3, 4},
                       [](const std::vector<int64_t>& i) {
                         return std::vector<int64_t>{i[1], 0};
                       }),
                What(g));
    HostTensor s = Values(dtype, {}, 6);
    g = OneOpGraph("expand", {s.type()}, {Type(dtype, {3, 2})});
    ExpectExact(RunOne(g, {s}), std::vector<double>(6, s.values[0]), What(g));
  }
  ir::Graph bad = OneOpGraph("expand", {Type(ir::FLOAT32, {3})},
                             {Type(ir::FLOAT32, {2, 4})});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(bad, {Values(ir::FLOAT32, {3}, 0)});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("non-singleton dimension 1"),
            std::string::npos)
      << out.status();
}

// PyTorch's slice bounds: negative counts from the end; both clamp.
int64_t SliceLength(int64_t size, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::min(std::max<int64_t>(start, 0), size);
  end = std::min(std::max(end, start), size);
  return (end - start + step - 1) / step;
}

TEST(DataMovementOpsTest, SliceWithNegativeClampedAndStepped) {
  struct Case {
    int64_t dim, start, end, step;
  };
  const std::vector<Case> cases = {
      {0, 0, 5, 1},     {1, 1, 6, 2},     {1, -3, -1, 1},
      {1, 0, 3, 1},     {0, 0, 2, 1},     {1, 4, 7, 1},
      {-1, -100, 100, 3}, {0, 3, 1, 1},   {1, 7, 100, 1},
      {1, 0, std::numeric_limits<int64_t>::max(), 4},
  };
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {5, 7}, 7);
    for (const Case& c : cases) {
      const int dim = c.dim < 0 ? c.dim + 2 : c.dim;
      const int64_t size = x.shape[dim];
      const int64_t len = SliceLength(size, c.start, c.end, c.step);
      int64_t start = c.start < 0 ? c.start + size : c.start;
      start = std::min(std::max<int64_t>(start, 0), size);
      Shape out = x.shape;
      out[dim] = len;
      ir::Graph g = OneOpGraph("slice", {x.type()}, {Type(dtype, out)},
                               {{"dim", IntA(c.dim)},
                                {"start", IntA(c.start)},
                                {"end", IntA(c.end)},
                                {"step", IntA(c.step)}});
      ExpectExact(RunOne(g, {x}),
                  Gather(x, out,
                         [&](std::vector<int64_t> i) {
                           i[dim] = start + i[dim] * c.step;
                           return i;
                         }),
                  What(g));
    }
    ir::Graph g = OneOpGraph("narrow", {x.type()}, {Type(dtype, {5, 3})},
                             {{"dim", IntA(1)}, {"start", IntA(-4)},
                              {"length", IntA(3)}});
    ExpectExact(RunOne(g, {x}),
                Gather(x, {5, 3},
                       [](std::vector<int64_t> i) {
                         i[1] += 3;
                         return i;
                       }),
                What(g));
    g = OneOpGraph("select", {x.type()}, {Type(dtype, {5})},
                   {{"dim", IntA(1)}, {"index", IntA(-2)}});
    ExpectExact(RunOne(g, {x}),
                Gather(x, {5},
                       [](const std::vector<int64_t>& i) {
                         return std::vector<int64_t>{i[0], 5};
                       }),
                What(g));
  }
  ir::Graph bad = OneOpGraph("select", {Type(ir::FLOAT32, {5, 7})},
                             {Type(ir::FLOAT32, {7})},
                             {{"dim", IntA(0)}, {"index", IntA(5)}});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(bad, {Values(ir::FLOAT32, {5, 7}, 0)});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index 5 out of range"),
            std::string::npos)
      << out.status();
}

// --- cat, clone, casts. -------------------------------------------------------

TEST(DataMovementOpsTest, CatAlongEachDimWithPromotionAndEmptyInputs) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor a = Values(dtype, {2, 3}, 8), b = Values(dtype, {2, 1}, 9),
               c = Values(dtype, {2, 2}, 10);
    HostTensor empty_legacy = Values(dtype, {0}, 11);
    ir::Graph g = OneOpGraph(
        "cat", {a.type(), empty_legacy.type(), b.type(), c.type()},
        {Type(dtype, {2, 6})}, {{"dim", IntA(-1)}});
    std::vector<double> want;
    for (int r = 0; r < 2; ++r) {
      for (int j = 0; j < 3; ++j) want.push_back(a.values[r * 3 + j]);
      want.push_back(b.values[r]);
      for (int j = 0; j < 2; ++j) want.push_back(c.values[r * 2 + j]);
    }
    ExpectExact(RunOne(g, {a, empty_legacy, b, c}), want, What(g));
    HostTensor z = Values(dtype, {0, 3}, 12);
    g = OneOpGraph("cat", {a.type(), z.type(), a.type()}, {Type(dtype, {4, 3})},
                   {{"dim", IntA(0)}});
    want = a.values;
    want.insert(want.end(), a.values.begin(), a.values.end());
    ExpectExact(RunOne(g, {a, z, a}), want, What(g));
  }
  // int32 with float16 promotes to float16 (the output dtype).
  HostTensor i = Tensor(ir::INT32, {2}, {70000, -3});
  HostTensor h = Tensor(ir::FLOAT16, {1}, {0.5});
  ir::Graph g = OneOpGraph("cat", {i.type(), h.type()},
                           {Type(ir::FLOAT16, {3})}, {{"dim", IntA(0)}});
  ExpectExact(RunOne(g, {i, h}), {INFINITY, -3, 0.5}, What(g));
}

TEST(DataMovementOpsTest, CloneAndCasts) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {3, 4}, 13);
    ir::Graph g = OneOpGraph("clone", {x.type()}, {x.type()});
    ExpectExact(RunOne(g, {x}), x.values, What(g));
  }
  // int32 -> float16 rounds to nearest even and overflows to inf.
  HostTensor i = Tensor(ir::INT32, {5}, {2049, 2051, 65504, 65520, -70000});
  ir::Graph g = OneOpGraph("_to_copy", {i.type()}, {Type(ir::FLOAT16, {5})},
                           {{"dtype", StrA("float16")}});
  ExpectExact(RunOne(g, {i}), {2048, 2052, 65504, INFINITY, -INFINITY}, What(g));
  // To bool: non-zero (NaN included) is true, -0.0 is false.
  HostTensor f = Tensor(ir::FLOAT32, {5}, {0.0, -0.0, std::nan(""), 0.25, -INFINITY});
  g = OneOpGraph("_to_copy", {f.type()}, {Type(ir::BOOL, {5})});
  ExpectExact(RunOne(g, {f}), {0, 0, 1, 1, 1}, What(g));
  HostTensor b = Tensor(ir::BOOL, {3}, {1, 0, 1});
  for (ir::DType to : {ir::FLOAT16, ir::BFLOAT16, ir::INT64}) {
    g = OneOpGraph("_to_copy", {b.type()}, {Type(to, {3})});
    ExpectExact(RunOne(g, {b}), {1, 0, 1}, What(g));
  }
}

// --- Fills and arange. ----------------------------------------------------------

TEST(DataMovementOpsTest, FillFullAndLikes) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {2, 3}, 14);
    const double want = dtype == ir::BOOL ? 1 : RoundTo(dtype, 2.7);
    ir::Graph g = OneOpGraph("fill", {x.type()}, {x.type()},
                             {{"value", FloatA(2.7)}});
    ExpectExact(RunOne(g, {x}), std::vector<double>(6, want), What(g));
    g = OneOpGraph("full", {}, {Type(dtype, {3, 1})},
                   {{"fill_value", FloatA(2.7)}});
    ExpectExact(RunOne(g, {}), std::vector<double>(3, want), What(g));
    g = OneOpGraph("ones_like", {x.type()}, {x.type()});
    ExpectExact(RunOne(g, {x}), std::vector<double>(6, 1), What(g));
    g = OneOpGraph("zeros", {}, {Type(dtype, {4})});
    ExpectExact(RunOne(g, {}), std::vector<double>(4, 0), What(g));
    // fill with a 0-d tensor value of another dtype.
    HostTensor v = Tensor(ir::FLOAT32, {}, {-3.0});
    g = OneOpGraph("fill", {x.type(), v.type()}, {x.type()});
    ExpectExact(RunOne(g, {x, v}),
                std::vector<double>(6, dtype == ir::BOOL ? 1 : -3), What(g));
  }
  // Large int64 values are exact (not through a double).
  ir::Graph g = OneOpGraph("full", {}, {Type(ir::INT64, {2})},
                           {{"fill_value", IntA(9007199254740993)}});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {});
  ASSERT_TRUE(out.ok()) << out.status();
  // The test decoder goes through double; check the neighbourhood instead.
  EXPECT_NEAR((*out)[0].values[0], 9007199254740993.0, 2.0);
  // NaN and infinity fill a float tensor.
  g = OneOpGraph("full", {}, {Type(ir::FLOAT16, {2})},
                 {{"fill_value", FloatA(std::nan(""))}});
  ExpectExact(RunOne(g, {}), {std::nan(""), std::nan("")}, What(g));
}

TEST(DataMovementOpsTest, ArangeIntegerAndFloat) {
  struct Case {
    ir::DType dtype;
    double start, end, step;
  };
  const std::vector<Case> cases = {
      {ir::INT64, 0, 10, 1},   {ir::INT32, -5, 7, 3},  {ir::INT64, 10, 0, -3},
      {ir::FLOAT32, 0, 1, 0.1}, {ir::FLOAT16, -1, 1, 0.25},
      {ir::BFLOAT16, 0, 5, 0.5}, {ir::FLOAT32, 3, 3, 1},
  };
  for (const Case& c : cases) {
    const int64_t n = static_cast<int64_t>(std::ceil((c.end - c.start) / c.step));
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i) {
      double v = c.start + i * c.step;
      if (c.dtype == ir::FLOAT16 || c.dtype == ir::BFLOAT16) {
        v = static_cast<float>(c.start) + static_cast<float>(i) * static_cast<float>(c.step);
      }
      want.push_back(RoundTo(c.dtype, v));
    }
    Attrs attrs = {{"end", FloatA(c.end)}, {"step", FloatA(c.step)},
                   {"start", FloatA(c.start)}};
    if (!IsFloatDType(c.dtype)) {
      attrs = {{"end", IntA(c.end)}, {"step", IntA(c.step)}, {"start", IntA(c.start)}};
    }
    ir::Graph g = OneOpGraph("arange", {}, {Type(c.dtype, {n})}, attrs);
    ExpectExact(RunOne(g, {}), want, What(g));
  }
}

// --- Gathers. ---------------------------------------------------------------------

// Runs index_select(x, index % x.shape[dim], dim), expects every selected
// slice exactly, and returns the one-op graph.
ir::Graph ExpectIndexSelect(const HostTensor& x, const HostTensor& index, int dim) {
  HostTensor idx = index;
  for (double& v : idx.values) v = std::fmod(v, x.shape[dim]);
  Shape out = x.shape;
  out[dim] = static_cast<int64_t>(idx.values.size());
  ir::Graph g = OneOpGraph("index_select", {x.type(), idx.type()},
                           {Type(x.dtype, out)}, {{"dim", IntA(dim)}});
  ExpectExact(RunOne(g, {x, idx}),
              Gather(x, out,
                     [&](std::vector<int64_t> i) {
                       i[dim] = static_cast<int64_t>(idx.values[i[dim]]);
                       return i;
                     }),
              What(g));
  return g;
}

TEST(DataMovementOpsTest, IndexSelectAlongEachDim) {
  for (ir::DType dtype : kAllDTypes) {
    for (ir::DType index_dtype : {ir::INT32, ir::INT64}) {
      HostTensor x = Values(dtype, {4, 3, 2}, 15);
      HostTensor index = Tensor(index_dtype, {5}, {2, 0, 2, 1, 0});
      for (int dim = 0; dim < 3; ++dim) ExpectIndexSelect(x, index, dim);
    }
  }
}

// Slices with a contiguous inner run of >= 32 elements (a paged KV cache's
// blocks gathered by a block table) are copied whole by a loop over the
// indices (slice_copies.h), along any dim, repeats and all; the imported IR
// has that loop and no per-element generic. An index out of range fails
// the same way as the generic path's.
// spec: P8
TEST(DataMovementOpsTest, IndexSelectCopiesWholeSlices) {
  const HostTensor index = Tensor(ir::INT64, {6}, {3, 0, 3, 2, 1, 0});
  for (ir::DType dtype : {ir::BFLOAT16, ir::FLOAT32, ir::INT64, ir::BOOL}) {
    HostTensor x = Values(dtype, {2, 4, 4, 32}, 40);
    for (int dim = 0; dim < 3; ++dim) {
      const ir::Graph g = ExpectIndexSelect(x, index, dim);
      auto context = CreateCompilerContext();
      absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
          ImportGraph(g, context.get());
      ASSERT_TRUE(module.ok()) << module.status();
      int generics = 0, slice_copies = 0;
      (*module)->walk([&](mlir::linalg::GenericOp) { ++generics; });
      (*module)->walk([&](mlir::scf::ForOp loop) {
        loop.getBody()->walk([&](mlir::linalg::CopyOp) { ++slice_copies; });
      });
      EXPECT_EQ(generics, 0) << What(g);
      EXPECT_EQ(slice_copies, 1) << What(g);
    }
  }
  HostTensor x = Values(ir::FLOAT16, {5, 64}, 41);
  ir::Graph g = OneOpGraph("index_select", {x.type(), Type(ir::INT32, {2})},
                           {Type(ir::FLOAT16, {2, 64})}, {{"dim", IntA(0)}});
  for (double bad : {5.0, -1.0}) {
    absl::StatusOr<std::vector<HostTensor>> out =
        CompileAndRun(g, {x, Tensor(ir::INT32, {2}, {1, bad})});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_NE(out.status().message().find("index_select"), std::string::npos)
        << out.status();
    EXPECT_NE(out.status().message().find("[0, 5)"), std::string::npos)
        << out.status();
  }
}

// A 0-d x with a one-element 1-D index gives a 0-d result (OpInfo
// index_select's first sample; the index map once referred to a loop the
// 0-d output does not have).
TEST(DataMovementOpsTest, IndexSelectOfAScalar) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {}, 3);
    for (const Shape& index_shape : {Shape{1}, Shape{}}) {
      HostTensor idx = Tensor(ir::INT64, index_shape, {0});
      ir::Graph g = OneOpGraph("index_select", {x.type(), idx.type()},
                               {Type(dtype, {})}, {{"dim", IntA(0)}});
      ExpectExact(RunOne(g, {x, idx}), x.values, What(g));
    }
  }
}

TEST(DataMovementOpsTest, EmbeddingGathersRows) {
  for (ir::DType dtype : {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32}) {
    HostTensor w = Values(dtype, {10, 4}, 16);
    HostTensor ids = Tensor(ir::INT64, {2, 3}, {9, 0, 3, 3, 7, 1});
    ir::Graph g = OneOpGraph("embedding", {w.type(), ids.type()},
                             {Type(dtype, {2, 3, 4})});
    ExpectExact(RunOne(g, {w, ids}),
                Gather(w, {2, 3, 4},
                       [&](const std::vector<int64_t>& i) {
                         return std::vector<int64_t>{
                             static_cast<int64_t>(ids.values[i[0] * 3 + i[1]]),
                             i[2]};
                       }),
                What(g));
  }
}

// SPEC P8: an index out of range raises with the op, value and valid range,
// and the kernel never reads outside its input.
TEST(DataMovementOpsTest, GatherIndicesAreRangeCheckedAtRunTime) {
  HostTensor w = Values(ir::FLOAT32, {10, 4}, 17);
  ir::Graph g = OneOpGraph("embedding", {w.type(), Type(ir::INT64, {3})},
                           {Type(ir::FLOAT32, {3, 4})});
  for (double bad : {10.0, -1.0, 1e12}) {
    HostTensor ids = Tensor(ir::INT64, {3}, {1, bad, 2});
    absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {w, ids});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
    const std::string msg(out.status().message());
    EXPECT_NE(msg.find("embedding"), std::string::npos) << msg;
    EXPECT_NE(msg.find(absl::StrFormat("index %d ", static_cast<int64_t>(bad))),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
  }
  // The same compiled program works again with good indices.
  HostTensor ids = Tensor(ir::INT64, {3}, {1, 9, 2});
  EXPECT_TRUE(CompileAndRun(g, {w, ids}).ok());

  HostTensor x = Values(ir::FLOAT16, {3, 5}, 18);
  g = OneOpGraph("index_select", {x.type(), Type(ir::INT32, {2})},
                 {Type(ir::FLOAT16, {3, 2})}, {{"dim", IntA(1)}});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {x, Tensor(ir::INT32, {2}, {4, 5})});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index_select"), std::string::npos);
  EXPECT_NE(out.status().message().find("index 5 is not in the valid range [0, 5)"),
            std::string::npos)
      << out.status();

  HostTensor src = Values(ir::FLOAT16, {3, 1}, 19);
  g = OneOpGraph("index_copy", {x.type(), Type(ir::INT64, {1}), src.type()},
                 {x.type()}, {{"dim", IntA(1)}});
  out = CompileAndRun(g, {x, Tensor(ir::INT64, {1}, {-2}), src});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index_copy"), std::string::npos)
      << out.status();
}

TEST(DataMovementOpsTest, IndexCopyLastRepeatedIndexWins) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {4, 3}, 20);
    HostTensor src = Values(dtype, {4, 3}, 21);
    HostTensor index = Tensor(ir::INT64, {3}, {2, 0, 2});
    ir::Graph g = OneOpGraph("index_copy",
                             {x.type(), index.type(), Type(dtype, {4, 3})},
                             {x.type()}, {{"dim", IntA(-1)}});
    std::vector<double> want = x.values;
    for (int r = 0; r < 4; ++r) {
      for (int i = 0; i < 3; ++i) {
        want[r * 3 + static_cast<int>(index.values[i])] = src.values[r * 3 + i];
      }
    }
    ExpectExact(RunOne(g, {x, index, src}), want, What(g));
    // Along dim 0 with a KV-cache style single row.
    HostTensor row = Values(dtype, {1, 3}, 22);
    g = OneOpGraph("index_copy", {x.type(), Type(ir::INT32, {1}), row.type()},
                   {x.type()}, {{"dim", IntA(0)}});
    want = x.values;
    for (int j = 0; j < 3; ++j) want[3 * 3 + j] = row.values[j];
    ExpectExact(RunOne(g, {x, Tensor(ir::INT32, {1}, {3}), row}), want, What(g));
  }
}

// index_copy costs O(numel + k * slice): one copy of x over the output and
// a loop of k iterations that each touch one slice, never a scan of the k
// indices per output element (O(numel * k), which made a 4096-slot KV-cache
// update cost 4096x a copy). Checked on the imported IR and, with many
// repeated indices along either dim, against the reference.
TEST(DataMovementOpsTest, IndexCopyWritesOneSlicePerIndex) {
  struct Case {
    Shape x;
    int dim;
    std::vector<double> index;
  };
  std::vector<double> many;
  for (int i = 0; i < 100; ++i) many.push_back((i * 37) % 45);  // repeats
  const std::vector<Case> cases = {
      {{48, 16}, 0, many}, {{6, 45}, 1, many}, {{3, 5, 4}, -2, {4, 0, 4, 1}}};
  for (const Case& c : cases) {
    for (ir::DType dtype : {ir::FLOAT16, ir::FLOAT32, ir::INT64, ir::BOOL}) {
      const int rank = c.x.size();
      const int d = c.dim < 0 ? c.dim + rank : c.dim;
      const int64_t k = c.index.size();
      Shape src_shape = c.x;
      src_shape[d] = k;
      HostTensor x = Values(dtype, c.x, 30);
      HostTensor src = Values(dtype, src_shape, 31);
      HostTensor index = Tensor(ir::INT64, {k}, c.index);
      ir::Graph g =
          OneOpGraph("index_copy", {x.type(), index.type(), src.type()},
                     {x.type()}, {{"dim", IntA(c.dim)}});
      std::vector<double> want = x.values;
      for (int64_t s = 0; s < NumElements(src_shape); ++s) {
        std::vector<int64_t> at = Unflatten(s, src_shape);
        at[d] = static_cast<int64_t>(index.values[at[d]]);
        int64_t flat = 0;
        for (int j = 0; j < rank; ++j) flat = flat * c.x[j] + at[j];
        want[flat] = src.values[s];  // in order: the last repeat wins
      }
      ExpectExact(RunOne(g, {x, index, src}), want, What(g));

      auto context = CreateCompilerContext();
      absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
          ImportGraph(g, context.get());
      ASSERT_TRUE(module.ok()) << module.status();
      int loops_in_generics = 0, slice_loops = 0, slice_copies = 0;
      (*module)->walk([&](mlir::scf::ForOp loop) {
        if (loop->getParentOfType<mlir::linalg::GenericOp>()) {
          ++loops_in_generics;
          return;
        }
        ++slice_loops;
        loop.getBody()->walk([&](mlir::linalg::CopyOp slice) {
          ++slice_copies;
          Shape one = c.x;
          one[d] = 1;
          EXPECT_EQ(Shape(slice.getResult(0)
                              .getType()
                              .cast<mlir::RankedTensorType>()
                              .getShape()),
                    one)
              << What(g);
        });
      });
      EXPECT_EQ(loops_in_generics, 0) << What(g);
      EXPECT_EQ(slice_loops, 1) << What(g);
      EXPECT_EQ(slice_copies, 1) << What(g);
    }
  }
}

TEST(DataMovementOpsTest, RepeatInterleaveWithAndWithoutDim) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {2, 3}, 23);
    ir::Graph g = OneOpGraph("repeat_interleave", {x.type()},
                             {Type(dtype, {2, 6})},
                             {{"repeats", IntA(2)}, {"dim", IntA(1)}});
    ExpectExact(RunOne(g, {x}),
                Gather(x, {2, 6},
                       [](std::vector<int64_t> i) {
                         i[1] /= 2;
                         return i;
                       }),
                What(g));
    g = OneOpGraph("repeat_interleave", {x.type()}, {Type(dtype, {18})},
                   {{"repeats", IntA(3)}});
    std::vector<double> want;
    for (double v : x.values) want.insert(want.end(), 3, v);
    ExpectExact(RunOne(g, {x}), want, What(g));
    g = OneOpGraph("repeat_interleave", {x.type()}, {Type(dtype, {0, 3})},
                   {{"repeats", IntA(0)}, {"dim", IntA(0)}});
    ExpectExact(RunOne(g, {x}), {}, What(g));
  }
  ir::Graph g = OneOpGraph("repeat_interleave",
                           {Type(ir::FLOAT32, {3}), Type(ir::INT64, {3})},
                           {Type(ir::FLOAT32, {6})});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(
      g, {Values(ir::FLOAT32, {3}, 0), Tensor(ir::INT64, {3}, {1, 2, 3})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
}

// split's pieces: slices from 0 with step 1 (the input map of a generic
// would fold to the loop dim and mismatch the extents), fed to an add and
// returned directly.
TEST(DataMovementOpsTest, SplitLikeSlicesFeedOtherOps) {
  for (ir::DType dtype : {ir::FLOAT16, ir::FLOAT32, ir::INT64}) {
    HostTensor x = Values(dtype, {2, 3, 12}, 25);
    if (IsFloatDType(dtype)) x = Random(dtype, {2, 3, 12}, 25);
    ir::Graph g;
    g.set_name("split");
    AddInput(g, "x", x.type());
    for (int i = 0; i < 3; ++i) {
      ir::Node* n = g.add_nodes();
      n->set_op("slice");
      n->add_inputs("x");
      ir::Value* v = n->add_outputs();
      v->set_name("s" + std::to_string(i));
      *v->mutable_type() = Type(dtype, {2, 3, 4});
      (*n->mutable_attrs())["dim"] = IntA(-1);
      (*n->mutable_attrs())["start"] = IntA(4 * i);
      (*n->mutable_attrs())["end"] = IntA(4 * i + 4);
    }
    AddNode(g, "add", {"s0", "s1"}, "sum", Type(dtype, {2, 3, 4}));
    g.add_outputs("sum");
    g.add_outputs("s2");
    absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<double> sum, s2;
    for (int r = 0; r < 6; ++r) {
      for (int j = 0; j < 4; ++j) {
        sum.push_back(RoundTo(dtype, x.values[r * 12 + j] + x.values[r * 12 + 4 + j]));
        s2.push_back(x.values[r * 12 + 8 + j]);
      }
    }
    ExpectExact((*out)[0], sum, What(g));
    ExpectExact((*out)[1], s2, What(g));
  }
}

// Movement ops chained in one graph (a transformer-style head split), fused
// by the pipeline: view -> permute -> slice -> cat.
TEST(DataMovementOpsTest, ChainOfMovementsInOneGraph) {
  HostTensor x = Values(ir::FLOAT32, {2, 4, 6}, 24);
  ir::Graph g;
  g.set_name("heads");
  AddInput(g, "x", x.type());
  auto node = [&](const std::string& op, const std::vector<std::string>& ins,
                  const std::string& out, Shape shape, Attrs attrs) {
    ir::Node* n = g.add_nodes();
    n->set_op(op);
    for (const std::string& in : ins) n->add_inputs(in);
    ir::Value* v = n->add_outputs();
    v->set_name(out);
    *v->mutable_type() = Type(ir::FLOAT32, shape);
    for (const auto& [k, a] : attrs) (*n->mutable_attrs())[k] = a;
  };
  node("view", {"x"}, "v", {2, 4, 2, 3}, {});
  node("permute", {"v"}, "p", {2, 2, 4, 3}, {{"dims", StrA("0,2,1,3")}});
  node("slice", {"p"}, "s", {2, 2, 2, 3},
       {{"dim", IntA(2)}, {"start", IntA(1)}, {"step", IntA(2)}});
  node("cat", {"s", "s"}, "c", {2, 2, 2, 6}, {{"dim", IntA(-1)}});
  g.add_outputs("c");
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 2; ++t)
        for (int j = 0; j < 6; ++j)
          want.push_back(x.values[b * 24 + (1 + 2 * t) * 6 + h * 3 + j % 3]);
  ExpectExact(RunOne(g, {x}), want, What(g));
}

}  // namespace
}  // namespace rbln::compiler::testing

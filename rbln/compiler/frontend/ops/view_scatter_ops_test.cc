// Views as copies and their scatters (diagonal, as_strided, *_copy,
// unbind_copy, slice/select/diagonal/as_strided_scatter) against
// index-arithmetic references, over every dtype.
// spec: J6 (the Core ATen ops compile)
#include <algorithm>
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
    if (t.values.size() > 1) t.values[1] = std::nan("");
  }
  return t;
}

struct DiagCase {
  int64_t offset;
  int dim1, dim2;
};

// x.diagonal(offset, dim1, dim2) of a [3, 4, 5] tensor: its shape and, for
// each of its elements, the flat position in x.
Shape DiagonalOf(const Shape& in, const DiagCase& c, std::vector<int64_t>* positions) {
  const int d1 = (c.dim1 + 3) % 3, d2 = (c.dim2 + 3) % 3;
  const int64_t n1 = in[d1], n2 = in[d2];
  const int64_t len = std::max<int64_t>(
      0, c.offset >= 0 ? std::min(n1, n2 - c.offset) : std::min(n1 + c.offset, n2));
  int other = 3 - d1 - d2;
  Shape out = {in[other], len};
  for (int64_t i = 0; i < NumElements(out); ++i) {
    const std::vector<int64_t> o = Unflatten(i, out);
    std::vector<int64_t> at(3);
    at[other] = o[0];
    at[d1] = o[1] + std::max<int64_t>(-c.offset, 0);
    at[d2] = o[1] + std::max<int64_t>(c.offset, 0);
    positions->push_back(Flatten(at, in));
  }
  return out;
}

const std::vector<DiagCase> kDiagCases = {{0, 0, 1}, {1, 0, 2}, {-2, 2, 1}, {2, -1, 0}, {7, 0, 2}};

TEST(ViewScatterOpsTest, DiagonalAndDiagonalScatter) {
  const Shape in = {3, 4, 5};
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, in, 1);
    for (const DiagCase& c : kDiagCases) {
      std::vector<int64_t> positions;
      const Shape out = DiagonalOf(in, c, &positions);
      const Attrs attrs = {
          {"offset", IntA(c.offset)}, {"dim1", IntA(c.dim1)}, {"dim2", IntA(c.dim2)}};
      std::vector<double> want;
      for (int64_t p : positions) want.push_back(x.values[p]);
      ir::Graph g = OneOpGraph("diagonal", {x.type()}, {Type(dtype, out)}, attrs);
      ExpectExact(RunOne(g, {x}), want, ir::ToText(g));
      g = OneOpGraph("diagonal_copy", {x.type()}, {Type(dtype, out)}, attrs);
      ExpectExact(RunOne(g, {x}), want, ir::ToText(g));

      HostTensor src = Values(dtype, out, 2);
      std::vector<double> scattered = x.values;
      for (size_t i = 0; i < positions.size(); ++i) scattered[positions[i]] = src.values[i];
      g = OneOpGraph("diagonal_scatter", {x.type(), src.type()}, {x.type()}, attrs);
      ExpectExact(RunOne(g, {x, src}), scattered, ir::ToText(g));
    }
  }
}

TEST(ViewScatterOpsTest, SliceAndSelectScatter) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {3, 7}, 3);
    struct Case {
      int64_t start, end, step, length;
    };
    for (const Case& c : {Case{1, 6, 2, 3}, Case{-3, 100, 1, 3}, Case{0, 7, 3, 3}}) {
      HostTensor src = Values(dtype, {3, c.length}, 4);
      std::vector<double> want = x.values;
      const int64_t start = c.start < 0 ? c.start + 7 : c.start;
      for (int64_t r = 0; r < 3; ++r) {
        for (int64_t k = 0; k < c.length; ++k) {
          want[r * 7 + start + k * c.step] = src.values[r * c.length + k];
        }
      }
      ir::Graph g = OneOpGraph(
          "slice_scatter", {x.type(), src.type()}, {x.type()},
          {{"dim", IntA(1)}, {"start", IntA(c.start)}, {"end", IntA(c.end)},
           {"step", IntA(c.step)}});
      ExpectExact(RunOne(g, {x, src}), want, ir::ToText(g));
    }
    HostTensor row = Values(dtype, {7}, 5);
    std::vector<double> want = x.values;
    for (int64_t k = 0; k < 7; ++k) want[2 * 7 + k] = row.values[k];
    ir::Graph g = OneOpGraph("select_scatter", {x.type(), row.type()}, {x.type()},
                             {{"dim", IntA(0)}, {"index", IntA(-1)}});
    ExpectExact(RunOne(g, {x, row}), want, ir::ToText(g));
  }
}

TEST(ViewScatterOpsTest, AsStridedReadsAndScattersTheFlatInput) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {4, 3}, 6);
    // Overlapping (stride 0) and transposed views from element 2.
    const Attrs attrs = {{"size", StrA("2,2,2")},
                         {"stride", StrA("0,1,3")},
                         {"storage_offset", IntA(2)}};
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < 8; ++i) {
      const std::vector<int64_t> k = Unflatten(i, {2, 2, 2});
      positions.push_back(2 + k[1] + 3 * k[2]);
    }
    std::vector<double> want;
    for (int64_t p : positions) want.push_back(x.values[p]);
    for (const char* op : {"as_strided", "as_strided_copy"}) {
      ir::Graph g = OneOpGraph(op, {x.type()}, {Type(dtype, {2, 2, 2})}, attrs);
      ExpectExact(RunOne(g, {x}), want, ir::ToText(g));
    }
    // The last write of an overlapping view wins.
    HostTensor src = Values(dtype, {2, 2, 2}, 7);
    std::vector<double> scattered = x.values;
    for (size_t i = 0; i < positions.size(); ++i) scattered[positions[i]] = src.values[i];
    ir::Graph g = OneOpGraph("as_strided_scatter", {x.type(), src.type()}, {x.type()}, attrs);
    ExpectExact(RunOne(g, {x, src}), scattered, ir::ToText(g));
  }
  HostTensor x = Values(ir::FLOAT32, {4}, 8);
  ir::Graph g = OneOpGraph("as_strided", {x.type()}, {Type(ir::FLOAT32, {2})},
                           {{"size", StrA("2")}, {"stride", StrA("2")},
                            {"storage_offset", IntA(2)}});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {x});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("reaches element 4 of an input of 4 elements"),
            std::string::npos)
      << out.status();
}

TEST(ViewScatterOpsTest, ViewCopiesAreTheirViews) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {2, 3}, 9);
    ir::Graph g = OneOpGraph("view_copy", {x.type()}, {Type(dtype, {3, 2})},
                             {{"size", StrA("3,2")}});
    ExpectExact(RunOne(g, {x}), x.values, ir::ToText(g));
    g = OneOpGraph("permute_copy", {x.type()}, {Type(dtype, {3, 2})},
                   {{"dims", StrA("1,0")}});
    ExpectExact(RunOne(g, {x}),
                {x.values[0], x.values[3], x.values[1], x.values[4], x.values[2],
                 x.values[5]},
                ir::ToText(g));
    g = OneOpGraph("narrow_copy", {x.type()}, {Type(dtype, {2, 2})},
                   {{"dim", IntA(1)}, {"start", IntA(-2)}, {"length", IntA(2)}});
    ExpectExact(RunOne(g, {x}), {x.values[1], x.values[2], x.values[4], x.values[5]},
                ir::ToText(g));
    // unbind_copy: one output per row.
    g = OneOpGraph("unbind_copy", {x.type()}, {Type(dtype, {2}), Type(dtype, {2}),
                                               Type(dtype, {2})},
                   {{"dim", IntA(1)}});
    absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int i = 0; i < 3; ++i) {
      ExpectExact((*out)[i], {x.values[i], x.values[3 + i]}, ir::ToText(g));
    }
  }
}

}  // namespace
}  // namespace rbln::compiler::testing

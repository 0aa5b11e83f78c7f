// Advanced indexing (index, index_put, masked_scatter, nonzero_static)
// against references written from NumPy's indexing rule, over every dtype,
// None positions, broadcast and negative indices, repeated targets.
// spec: P8 (index range checks), J6 (the Core ATen ops compile)
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
  HostTensor t = Random(dtype, std::move(shape), seed, -8.0, 8.0);
  if (IsFloatDType(dtype) && t.values.size() > 1) t.values[1] = std::nan("");
  return t;
}

// The element of `t` at result coordinates `r` of a right-aligned
// broadcast into `rank` dims.
double Broadcast(const HostTensor& t, const std::vector<int64_t>& r) {
  std::vector<int64_t> c;
  for (size_t j = 0; j < t.shape.size(); ++j) {
    const size_t rd = r.size() - t.shape.size() + j;
    c.push_back(t.shape[j] == 1 ? 0 : r[rd]);
  }
  return t.values[Flatten(c, t.shape)];
}

// x[indices] by NumPy's rule: `present` marks the indexed dims; their index
// tensors broadcast to B, which replaces adjacent indexed dims in place or
// else comes first. Calls `visit(result coords, x flat position)` for each
// result element in row-major order; returns the result shape.
Shape IndexResult(const Shape& in, const std::vector<int>& present,
                  const std::vector<HostTensor>& indices,
                  const std::function<void(const std::vector<int64_t>&, int64_t)>& visit) {
  std::vector<int> dims;
  for (size_t d = 0; d < present.size(); ++d) {
    if (present[d]) dims.push_back(d);
  }
  size_t brank = 0;
  for (const HostTensor& t : indices) brank = std::max(brank, t.shape.size());
  Shape b(brank, 1);
  for (const HostTensor& t : indices) {
    for (size_t j = 0; j < t.shape.size(); ++j) {
      int64_t& e = b[brank - t.shape.size() + j];
      if (t.shape[j] != 1) e = t.shape[j];
    }
  }
  bool adjacent = true;
  for (size_t i = 1; i < dims.size(); ++i) adjacent &= dims[i] == dims[i - 1] + 1;
  const int at = adjacent ? dims.front() : 0;
  Shape result;
  std::vector<int> whole;  // x dim of each non-B result dim
  for (int d = 0; d < at; ++d) result.push_back(in[d]);
  result.insert(result.end(), b.begin(), b.end());
  for (size_t d = at; d < in.size(); ++d) {
    if (std::find(dims.begin(), dims.end(), static_cast<int>(d)) == dims.end()) {
      result.push_back(in[d]);
      whole.push_back(d);
    }
  }
  for (int64_t i = 0; i < NumElements(result); ++i) {
    const std::vector<int64_t> r = Unflatten(i, result);
    std::vector<int64_t> c(in.size());
    for (int d = 0; d < at; ++d) c[d] = r[d];
    for (size_t w = 0; w < whole.size(); ++w) c[whole[w]] = r[at + brank + w];
    const std::vector<int64_t> br(r.begin() + at, r.begin() + at + brank);
    for (size_t k = 0; k < dims.size(); ++k) {
      int64_t v = static_cast<int64_t>(Broadcast(indices[k], br));
      if (v < 0) v += in[dims[k]];
      c[dims[k]] = v;
    }
    visit(r, Flatten(c, in));
  }
  return result;
}

std::string PresentText(const std::vector<int>& present) {
  std::string s;
  for (size_t i = 0; i < present.size(); ++i) s += (i ? "," : "") + std::to_string(present[i]);
  return s;
}

struct IndexCase {
  std::vector<int> present;
  std::vector<Shape> index_shapes;
};

const std::vector<IndexCase>& IndexCases() {
  static const auto* cases = new std::vector<IndexCase>{
      {{1}, {{2, 3}}},                   // x[i]: B first
      {{0, 1}, {{2}}},                   // x[:, i]
      {{1, 0, 1}, {{2, 1}, {3}}},        // x[i, :, j]: apart, B first
      {{0, 1, 1}, {{2, 1}, {1, 3}}},     // x[:, i, j]: adjacent, in place
      {{1, 1, 1}, {{}, {4}, {1}}},       // a 0-d index among others
  };
  return *cases;
}

TEST(AdvancedIndexOpsTest, IndexWithNoneBroadcastAndNegativeIndices) {
  const Shape in = {3, 4, 5};
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, in, 1);
    for (ir::DType index_dtype : {ir::INT64, ir::INT32}) {
      for (const IndexCase& c : IndexCases()) {
        std::vector<HostTensor> indices;
        std::vector<ir::TensorType> types = {x.type()};
        int k = 0;
        for (size_t d = 0; d < c.present.size(); ++d) {
          if (!c.present[d]) continue;
          // Negative values from -size, positives up to size - 1.
          indices.push_back(Random(index_dtype, c.index_shapes[k++], 2 + d,
                                   -in[d], in[d]));
          types.push_back(indices.back().type());
        }
        std::vector<double> want;
        const Shape out = IndexResult(in, c.present, indices,
                                      [&](const std::vector<int64_t>&, int64_t at) {
                                        want.push_back(x.values[at]);
                                      });
        ir::Graph g = OneOpGraph("index", types, {Type(dtype, out)},
                                 {{"indices", StrA(PresentText(c.present))}});
        std::vector<HostTensor> inputs = {x};
        inputs.insert(inputs.end(), indices.begin(), indices.end());
        ExpectExact(RunOne(g, inputs), want, ir::ToText(g));
      }
    }
  }
}

// SPEC P8: out-of-range advanced indices raise; negative ones down to
// -size are valid.
TEST(AdvancedIndexOpsTest, IndexIsRangeCheckedAtRunTime) {
  HostTensor x = Values(ir::FLOAT32, {3, 4}, 3);
  ir::Graph g = OneOpGraph("index", {x.type(), Type(ir::INT64, {2})},
                           {Type(ir::FLOAT32, {3, 2})}, {{"indices", StrA("0,1")}});
  for (double bad : {4.0, -5.0}) {
    absl::StatusOr<std::vector<HostTensor>> out =
        CompileAndRun(g, {x, Tensor(ir::INT64, {2}, {-4, bad})});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_NE(out.status().message().find("is not in the valid range [-4, 4)"),
              std::string::npos)
        << out.status();
  }
  ExpectExact(RunOne(g, {x, Tensor(ir::INT64, {2}, {-4, 3})}),
              {x.values[0], x.values[3], x.values[4], x.values[7], x.values[8],
               x.values[11]},
              "x[:, [-4, 3]]");
}

TEST(AdvancedIndexOpsTest, BooleanMaskIndexIsAHostOp) {
  ir::Graph g = OneOpGraph("index", {Type(ir::FLOAT32, {3}), Type(ir::BOOL, {3})},
                           {Type(ir::FLOAT32, {2})});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(
      g, {Values(ir::FLOAT32, {3}, 4), Tensor(ir::BOOL, {3}, {1, 0, 1})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(out.status().message().find("boolean mask"), std::string::npos);
}

TEST(AdvancedIndexOpsTest, IndexPutLastValueWinsOrAccumulates) {
  const Shape in = {3, 4, 5};
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, in, 5);
    for (const IndexCase& c : IndexCases()) {
      std::vector<HostTensor> indices;
      std::vector<ir::TensorType> types = {x.type()};
      int k = 0;
      for (size_t d = 0; d < c.present.size(); ++d) {
        if (!c.present[d]) continue;
        // Few distinct values: repeated targets.
        indices.push_back(Random(ir::INT64, c.index_shapes[k++], 6 + d, -2, 2));
        types.push_back(indices.back().type());
      }
      const Shape result = IndexResult(in, c.present, indices,
                                       [](const std::vector<int64_t>&, int64_t) {});
      // Values broadcast over the result's leading dim.
      Shape vshape(result.begin() + 1, result.end());
      HostTensor values = Values(dtype, vshape, 7);
      for (bool accumulate : {false, true}) {
        std::vector<double> want = x.values;
        IndexResult(in, c.present, indices,
                    [&](const std::vector<int64_t>& r, int64_t at) {
                      const double v = Broadcast(values, r);
                      if (!accumulate) {
                        want[at] = v;
                      } else if (dtype == ir::BOOL) {
                        want[at] = want[at] != 0 || v != 0;
                      } else {
                        want[at] = RoundTo(dtype, want[at] + v);
                      }
                    });
        std::vector<ir::TensorType> all = types;
        all.push_back(values.type());
        ir::Graph g = OneOpGraph("index_put", all, {x.type()},
                                 {{"indices", StrA(PresentText(c.present))},
                                  {"accumulate", BoolA(accumulate)}});
        std::vector<HostTensor> inputs = {x};
        inputs.insert(inputs.end(), indices.begin(), indices.end());
        inputs.push_back(values);
        ExpectExact(RunOne(g, inputs), want, ir::ToText(g));
      }
    }
  }
}

// x[mask] = v and x[:, mask] += v: a boolean mask with values that do not
// vary along the selected elements.
TEST(AdvancedIndexOpsTest, IndexPutWithBooleanMask) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {3, 4}, 8);
    HostTensor mask = Tensor(ir::BOOL, {4}, {1, 0, 1, 1});
    for (bool accumulate : {false, true}) {
      // Mask over dim 0 (a row of values) and over dim 1 (a column).
      for (int k : {0, 1}) {
        const Shape mshape = {x.shape[k]};
        HostTensor m = k == 1 ? mask : Tensor(ir::BOOL, mshape, {0, 1, 1});
        HostTensor values = k == 0 ? Values(dtype, {4}, 9) : Values(dtype, {3, 1}, 9);
        std::vector<double> want = x.values;
        for (int64_t i = 0; i < 12; ++i) {
          const std::vector<int64_t> c = Unflatten(i, x.shape);
          if (!m.values[c[k]]) continue;
          const double v = k == 0 ? values.values[c[1]] : values.values[c[0]];
          want[i] = !accumulate         ? v
                    : dtype == ir::BOOL ? double(want[i] != 0 || v != 0)
                                        : RoundTo(dtype, want[i] + v);
        }
        ir::Graph g = OneOpGraph("index_put", {x.type(), m.type(), values.type()},
                                 {x.type()},
                                 {{"indices", StrA(k == 0 ? "1" : "0,1")},
                                  {"accumulate", BoolA(accumulate)}});
        ExpectExact(RunOne(g, {x, m, values}), want, ir::ToText(g));
      }
    }
  }
  // Values along the selection would need the mask's count.
  ir::Graph g = OneOpGraph("index_put",
                           {Type(ir::FLOAT32, {3}), Type(ir::BOOL, {3}),
                            Type(ir::FLOAT32, {2})},
                           {Type(ir::FLOAT32, {3})});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {Values(ir::FLOAT32, {3}, 1), Tensor(ir::BOOL, {3}, {1, 0, 1}),
                        Values(ir::FLOAT32, {2}, 2)});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(AdvancedIndexOpsTest, MaskedScatterTakesSourceInOrder) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Values(dtype, {2, 3}, 10);
    HostTensor mask = Tensor(ir::BOOL, {3}, {1, 0, 1});  // broadcast over rows
    HostTensor source = Values(dtype, {2, 3}, 11);
    std::vector<double> want = x.values;
    int next = 0;
    for (int i = 0; i < 6; ++i) {
      if (mask.values[i % 3]) want[i] = source.values[next++];
    }
    ir::Graph g = OneOpGraph("masked_scatter", {x.type(), mask.type(), source.type()},
                             {x.type()});
    ExpectExact(RunOne(g, {x, mask, source}), want, ir::ToText(g));
  }
  // SPEC P8: more true elements than source elements raises.
  HostTensor x = Values(ir::FLOAT32, {4}, 12);
  HostTensor source = Values(ir::FLOAT32, {2}, 13);
  ir::Graph g = OneOpGraph("masked_scatter",
                           {x.type(), Type(ir::BOOL, {4}), source.type()}, {x.type()});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {x, Tensor(ir::BOOL, {4}, {1, 1, 0, 1}), source});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("masked_scatter"), std::string::npos)
      << out.status();
  EXPECT_TRUE(CompileAndRun(g, {x, Tensor(ir::BOOL, {4}, {0, 1, 0, 1}), source}).ok());
}

TEST(AdvancedIndexOpsTest, NonzeroStaticPadsAndTruncates) {
  for (ir::DType dtype : kAllDTypes) {
    HostTensor x = Tensor(dtype, {2, 3}, {0, 1, 0, 1, 0, 1});
    for (int64_t size : {2, 5}) {
      std::vector<double> want;
      for (int64_t i : {1, 3, 5}) {
        if (static_cast<int64_t>(want.size()) == 2 * size) break;
        want.push_back(i / 3);
        want.push_back(i % 3);
      }
      while (static_cast<int64_t>(want.size()) < 2 * size) want.push_back(-7);
      ir::Graph g = OneOpGraph("nonzero_static", {x.type()}, {Type(ir::INT64, {size, 2})},
                               {{"size", IntA(size)}, {"fill_value", IntA(-7)}});
      ExpectExact(RunOne(g, {x}), want, ir::ToText(g));
    }
  }
}

}  // namespace
}  // namespace rbln::compiler::testing

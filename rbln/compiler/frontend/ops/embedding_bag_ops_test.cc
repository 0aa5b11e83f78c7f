// _embedding_bag and embedding_renorm against references that accumulate
// in float32 and round where ATen's CPU kernels round.
// spec: P8 (index and offset range checks), J6 (the Core ATen ops compile)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

constexpr ir::DType kFloatDTypes[] = {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32};

struct Bags {
  std::vector<double> output, bag_size, max_indices, offset2bag;
};

// The reference: bag b covers [offsets[b], offsets[b + 1]) (the last bag
// runs to the end unless include_last_offset).
Bags Reference(const HostTensor& w, const HostTensor& idx, const HostTensor& off,
               const HostTensor* psw, int mode, bool include_last, int64_t padding) {
  const int64_t D = w.shape[1], N = idx.shape[0];
  const int64_t B = include_last ? off.shape[0] - 1 : off.shape[0];
  Bags r;
  r.output.assign(B * D, 0);
  r.bag_size.assign(B, 0);
  r.max_indices.assign(B * D, 0);
  r.offset2bag.assign(N, -1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = off.values[b];
    const int64_t end = b + 1 < off.shape[0] ? static_cast<int64_t>(off.values[b + 1]) : N;
    for (int64_t i = start; i < end; ++i) {
      r.offset2bag[i] = b;
      const int64_t row = idx.values[i];
      if (row == padding) continue;
      for (int64_t d = 0; d < D; ++d) {
        double& acc = r.output[b * D + d];
        const double v = w.values[row * D + d];
        if (mode == 2) {
          if (r.bag_size[b] == 0 || v > acc) {
            acc = v;
            r.max_indices[b * D + d] = row;
          }
        } else {
          acc = RoundTo(ir::FLOAT32, acc + (psw ? RoundTo(ir::FLOAT32, v * psw->values[i]) : v));
        }
      }
      ++r.bag_size[b];
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      double& o = r.output[b * D + d];
      o = RoundTo(w.dtype, o);
      if (mode == 1) o = RoundTo(w.dtype, o / std::max<double>(r.bag_size[b], 1));
    }
  }
  return r;
}

ir::Graph BagGraph(const HostTensor& w, const HostTensor& idx, const HostTensor& off,
                   const HostTensor* psw, int mode, bool include_last, int64_t padding,
                   const std::vector<Shape>& out_shapes) {
  std::vector<ir::TensorType> inputs = {w.type(), idx.type(), off.type()};
  if (psw) inputs.push_back(psw->type());
  return OneOpGraph("_embedding_bag_forward_only", inputs,
                    {Type(w.dtype, out_shapes[0]), Type(ir::INT64, out_shapes[1]),
                     Type(ir::INT64, out_shapes[2]), Type(ir::INT64, out_shapes[3])},
                    {{"mode", IntA(mode)},
                     {"include_last_offset", BoolA(include_last)},
                     {"padding_idx", IntA(padding)}});
}

TEST(EmbeddingBagOpsTest, SumMeanMaxWithPaddingAndEmptyBags) {
  for (ir::DType dtype : kFloatDTypes) {
    HostTensor w = Random(dtype, {6, 3}, 1, -3, 3);
    HostTensor idx = Tensor(ir::INT64, {8}, {1, 2, 4, 5, 4, 3, 2, 2});
    // Bag 1 is empty; the last bag runs to the end.
    HostTensor off = Tensor(ir::INT64, {3}, {0, 4, 4});
    HostTensor psw = Random(dtype, {8}, 2, -2, 2);
    for (int mode : {0, 1, 2}) {
      for (int64_t padding : {-1, 2}) {
        for (bool weighted : {false, true}) {
          if (weighted && mode != 0) continue;
          const HostTensor* p = weighted ? &psw : nullptr;
          const Bags want = Reference(w, idx, off, p, mode, false, padding);
          const Shape max_shape = mode == 2 ? Shape{3, 3} : Shape{3};
          ir::Graph g = BagGraph(w, idx, off, p, mode, false, padding,
                                 {{3, 3}, {8}, {3}, max_shape});
          std::vector<HostTensor> inputs = {w, idx, off};
          if (p) inputs.push_back(psw);
          absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, inputs);
          ASSERT_TRUE(out.ok()) << out.status() << ir::ToText(g);
          ExpectExact((*out)[0], want.output, ir::ToText(g));
          ExpectExact((*out)[1], want.offset2bag, "offset2bag " + ir::ToText(g));
          if (mode == 0) {
            ExpectExact((*out)[2], {0, 0, 0}, "bag_size (sum) " + ir::ToText(g));
          } else {
            ExpectExact((*out)[2], want.bag_size, "bag_size " + ir::ToText(g));
          }
          if (mode == 2) ExpectExact((*out)[3], want.max_indices, ir::ToText(g));
          if (mode == 1) ExpectExact((*out)[3], want.bag_size, ir::ToText(g));
        }
      }
    }
  }
}

TEST(EmbeddingBagOpsTest, IncludeLastOffsetAndDeviceShapes) {
  HostTensor w = Random(ir::FLOAT16, {5, 4}, 3, -3, 3);
  HostTensor idx = Tensor(ir::INT32, {6}, {0, 1, 2, 3, 4, 0});
  HostTensor off = Tensor(ir::INT32, {3}, {0, 2, 5});
  const Bags want = Reference(w, idx, off, nullptr, 1, true, -1);
  // The meta function's shapes for devices: bag_size [B'] and an empty
  // max_indices; an empty offset2bag.
  ir::Graph g = OneOpGraph("_embedding_bag", {w.type(), idx.type(), off.type()},
                           {Type(ir::FLOAT16, {2, 4}), Type(ir::INT32, {0}),
                            Type(ir::INT32, {3}), Type(ir::INT32, {0})},
                           {{"mode", IntA(1)}, {"include_last_offset", BoolA(true)}});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {w, idx, off});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], want.output, ir::ToText(g));
  ExpectExact((*out)[2], {2, 3, 0}, "bag_size with its extra entry");
}

// SPEC P8: indices and offsets are checked.
TEST(EmbeddingBagOpsTest, IndicesAndOffsetsAreRangeChecked) {
  HostTensor w = Random(ir::FLOAT32, {5, 2}, 4, -3, 3);
  HostTensor off = Tensor(ir::INT64, {2}, {0, 2});
  ir::Graph g = BagGraph(w, Tensor(ir::INT64, {3}, {0, 0, 0}), off, nullptr, 0, false, -1,
                         {{2, 2}, {0}, {2}, {2}});
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(g, {w, Tensor(ir::INT64, {3}, {0, 5, 1}), off});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index 5 is not in the valid range [0, 5)"),
            std::string::npos)
      << out.status();
  out = CompileAndRun(g, {w, Tensor(ir::INT64, {3}, {0, 1, 1}), Tensor(ir::INT64, {2}, {0, 4})});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index 4 is not in the valid range [0, 4)"),
            std::string::npos)
      << out.status();
}

TEST(EmbeddingBagOpsTest, RenormScalesNamedRowsOnce) {
  for (ir::DType dtype : kFloatDTypes) {
    HostTensor w = Random(dtype, {5, 4}, 5, -3, 3);
    HostTensor idx = Tensor(ir::INT64, {2, 2}, {0, 3, 3, 4});
    for (double p : {2.0, 1.0}) {
      std::vector<double> want = w.values;
      for (int64_t row : {0, 3, 4}) {
        double norm = 0;
        for (int d = 0; d < 4; ++d) norm += std::pow(std::fabs(w.values[row * 4 + d]), p);
        norm = RoundTo(dtype, std::pow(norm, 1 / p));
        if (norm <= 1.0) continue;
        const float scale = static_cast<float>(1.0 / (norm + 1e-7));
        for (int d = 0; d < 4; ++d) {
          want[row * 4 + d] = RoundTo(dtype, static_cast<float>(w.values[row * 4 + d]) * scale);
        }
      }
      ir::Graph g = OneOpGraph("embedding_renorm", {w.type(), idx.type()}, {w.type()},
                               {{"max_norm", FloatA(1.0)}, {"norm_type", FloatA(p)}});
      absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {w, idx});
      ASSERT_TRUE(out.ok()) << out.status();
      // The norm's float32 sum rounds differently from this double one:
      // allow a few units of the dtype.
      std::vector<double> tol;
      for (double v : want) tol.push_back(std::fabs(v) * 8 * UnitRoundoff(dtype));
      ExpectClose((*out)[0], want, tol, ir::ToText(g));
    }
  }
}

}  // namespace
}  // namespace rbln::compiler::testing

// spec: P5, A2
// rbln_grouped_gemm against a double-precision reference: f32 and bf16
// operands, B plain and transposed, int32 and int64 offsets, empty groups,
// rows past the last offset left as they were, offsets that decrease or
// run past the rows (clamped as Tensor.slice clamps), in one block and in
// several (the count is fixed by the problem's shape, not the workers):
// column blocks, and runs of whole groups when there are many.
#include "rbln/compiler/kernels/grouped_gemm.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/compiler/kernels/onednn_library.h"
#include "rbln/compiler/kernels/test_operands.h"

namespace rbln::compiler {
namespace {

// Values as f32 (for the reference) and as passed (f32 or bf16 bits).
struct Operand {
  std::vector<float> values;
  std::vector<char> raw;
};

Operand Make(int64_t size, bool bf16, std::mt19937& rng) {
  Operand o;
  testing::FillOperand(size, bf16, rng, o.values, o.raw);
  return o;
}

struct Case {
  bool bf16 = false, trans_b = false, i64 = false;
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> offsets;
};

// C as the kernel must leave it, starting from `c0`: each group's rows
// (Tensor.slice bounds) overwritten by their product, in group order.
std::vector<double> Reference(const Case& t, const Operand& a, const Operand& b,
                              const std::vector<float>& c0) {
  std::vector<double> c(c0.begin(), c0.end());
  const int64_t groups = t.offsets.size();
  auto clamp = [&](int64_t v, int64_t low) {
    if (v < 0) v += t.m;
    return std::min(std::max(v, low), t.m);
  };
  int64_t start = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = clamp(start, 0), end = clamp(t.offsets[g], begin);
    start = t.offsets[g];
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < t.k; ++l) {
          const float bv = t.trans_b ? b.values[(g * t.n + j) * t.k + l]
                                     : b.values[(g * t.k + l) * t.n + j];
          sum += static_cast<double>(a.values[i * t.k + l]) * bv;
        }
        c[i * t.n + j] = sum;
      }
    }
  }
  return c;
}

std::vector<float> RunGrouped(const Case& t, const Operand& a, const Operand& b,
                       const std::vector<float>& c0, int64_t blocks) {
  GroupedGemmProblem p;
  p.type = t.bf16 ? GemmOperandType::kBF16 : GemmOperandType::kF32;
  p.trans_b = t.trans_b;
  p.offsets_i64 = t.i64;
  p.groups = t.offsets.size();
  p.m = t.m;
  p.n = t.n;
  p.k = t.k;
  p.lda = t.k;
  p.ldb = t.trans_b ? t.k : t.n;
  p.ldc = t.n;
  p.stride_b = t.k * t.n;
  std::vector<int32_t> offs32(t.offsets.begin(), t.offsets.end());
  const void* offs = t.i64 ? static_cast<const void*>(t.offsets.data())
                           : static_cast<const void*>(offs32.data());
  std::vector<float> c = c0;
  for (int64_t block = 0; block < blocks; ++block) {
    RunGroupedGemmBlock(p, a.raw.data(), b.raw.data(), offs, c.data(), block, blocks);
  }
  return c;
}

class GroupedGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LoadOnednn()) {
      GTEST_SKIP() << "oneDNN is not installed (" << OnednnDescription()
                   << "); scripts/setup installs libdnnl-dev";
    }
  }
};

TEST_F(GroupedGemmTest, MatchesReferenceInOneBlockAndInFour) {
  const std::vector<std::vector<int64_t>> offsets = {
      {3, 3, 10, 24},    // an empty group, rows past the last offset
      {0, 0, 0, 30},     // one group takes every row
      {12, 5, 20, 40},   // a decreasing offset, an offset past the rows
      {-20, 15, 15, 2},  // a negative offset counts from the end
  };
  uint32_t seed = 7;
  for (bool bf16 : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (bool i64 : {false, true}) {
        for (const std::vector<int64_t>& offs : offsets) {
          Case t{bf16, trans_b, i64, 30, 72, 48, offs};
          std::mt19937 rng(seed++);
          const Operand a = Make(t.m * t.k, bf16, rng);
          const Operand b = Make(int64_t(offs.size()) * t.k * t.n, bf16, rng);
          std::vector<float> c0(t.m * t.n);
          for (float& v : c0) v = std::uniform_real_distribution<float>(5, 6)(rng);
          const std::vector<double> want = Reference(t, a, b, c0);
          const std::string what = std::string(bf16 ? "bf16" : "f32") +
                                   (trans_b ? " trans_b" : "") + (i64 ? " i64" : " i32") +
                                   " offsets " + std::to_string(offs[0]) + "," +
                                   std::to_string(offs[1]) + "," + std::to_string(offs[2]) +
                                   "," + std::to_string(offs[3]);
          const std::vector<float> one = RunGrouped(t, a, b, c0, 1);
          const std::vector<float> four = RunGrouped(t, a, b, c0, 4);
          ASSERT_EQ(one.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i) {
            // f32 accumulation of k products of magnitude <= 1.
            ASSERT_NEAR(one[i], want[i], 1e-5 * t.k) << what << " element " << i;
            ASSERT_NEAR(four[i], want[i], 1e-5 * t.k) << what << " element " << i << " (4 blocks)";
          }
        }
      }
    }
  }
}

// Many groups (an MoE layer's experts): the blocks are runs of whole
// groups, every group's product one call over all columns; the same
// result in 1, 3 and 4 blocks, with empty groups, rows past the last
// offset, and the same groups overlapping (a decreasing offset), where the
// blocks are column ranges and the later group's product stays.
TEST_F(GroupedGemmTest, ManyGroupsMatchReferenceInAnyBlockCount) {
  const std::vector<std::vector<int64_t>> offsets = {
      {4, 4, 9, 15, 22, 22, 30, 31, 40, 47, 47, 50, 58, 60, 62, 62},
      {0, 0, 0, 0, 0, 0, 0, 64, 64, 64, 64, 64, 64, 64, 64, 64},  // one group
      {4, 9, 15, 22, 30, 31, 40, 47, 20, 50, 58, 60, 62, 63, 64, 64},  // overlap
  };
  uint32_t seed = 11;
  for (bool trans_b : {false, true}) {
    for (const std::vector<int64_t>& offs : offsets) {
      Case t{/*bf16=*/true, trans_b, /*i64=*/false, 64, 40, 32, offs};
      std::mt19937 rng(seed++);
      const Operand a = Make(t.m * t.k, true, rng);
      const Operand b = Make(int64_t(offs.size()) * t.k * t.n, true, rng);
      std::vector<float> c0(t.m * t.n, 5.0f);
      const std::vector<double> want = Reference(t, a, b, c0);
      const std::vector<float> one = RunGrouped(t, a, b, c0, 1);
      for (int64_t blocks : {3, 4}) {
        const std::vector<float> got = RunGrouped(t, a, b, c0, blocks);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5 * t.k)
              << (trans_b ? "trans_b " : "") << blocks << " blocks, offsets from "
              << offs[0] << ", element " << i;
        }
      }
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(one[i], want[i], 1e-5 * t.k) << "1 block, element " << i;
      }
    }
  }
}

TEST(GroupedGemmBlocksTest, RunsOfWholeGroupsBalancedByRowsAndWeights) {
  // 8 groups in 2 blocks: costs are rows + 64 / 8 for each non-empty group.
  std::vector<std::pair<int64_t, int64_t>> rows = {
      {0, 2}, {2, 2}, {2, 30}, {30, 32}, {32, 40}, {40, 48}, {48, 56}, {56, 64}};
  // Costs 10, 0, 36, 10, 16, 16, 16, 16 (total 120): middles 5, 10, 28,
  // 51, 64, 80, 96, 112 against the halves' boundary 60.
  EXPECT_EQ(GroupedGemmGroupBlocks(rows, 64, 2),
            (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  // Fewer than kMinGroupsPerBlock groups a block: column blocks.
  EXPECT_TRUE(GroupedGemmGroupBlocks(rows, 64, 5).empty());
  // Overlapping rows must run in order: column blocks.
  rows[4] = {20, 40};
  EXPECT_TRUE(GroupedGemmGroupBlocks(rows, 64, 2).empty());
  // No rows at all: every group (all empty) in block 0.
  const std::vector<std::pair<int64_t, int64_t>> none(8, {0, 0});
  EXPECT_EQ(GroupedGemmGroupBlocks(none, 64, 4), std::vector<int64_t>(8, 0));
}

TEST(GroupedGemmRowsTest, GroupRowsClampsAsTensorSlice) {
  const std::vector<int32_t> offs = {4, 2, 9, -1};
  const auto rows = GroupRows(offs.data(), false, 4, 8);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(rows[1], (std::pair<int64_t, int64_t>{4, 4}));  // end before start: empty
  EXPECT_EQ(rows[2], (std::pair<int64_t, int64_t>{2, 8}));  // starts at 2, past the end
  EXPECT_EQ(rows[3], (std::pair<int64_t, int64_t>{8, 8}));  // 9 -> 8; -1 -> 7 < 8: empty
}

}  // namespace
}  // namespace rbln::compiler

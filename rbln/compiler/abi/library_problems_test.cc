// The library problems as words and blocks: what a kernel's constant and
// its block arguments mean to the library (SPEC P5, A2).
// spec: P5, A2
#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/abi/attention_problem.h"
#include "rbln/compiler/abi/conv_problem.h"
#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/abi/library_epilogue.h"
#include "rbln/compiler/abi/problem_encoding.h"

namespace rbln::compiler {
namespace {

LibraryEpilogue SomeEpilogue() {
  LibraryEpilogue e;
  e.bias_row = 0;
  e.store = StoreType::kBF16;
  e.ops = {{false, static_cast<int64_t>(EltwiseFn::kLinear), 0.5f, 2.0f},
           {true, static_cast<int64_t>(BinaryFn::kMul), 0, 0, 1}};
  return e;
}

TEST(LibraryEpilogueTest, ParsesWhatItAppends) {
  const LibraryEpilogue e = SomeEpilogue();
  std::vector<int64_t> words = {7};
  e.AppendTo(words);
  words.push_back(-9);  // whatever follows stays unread
  const int64_t* at = words.data() + 1;
  EXPECT_EQ(LibraryEpilogue::Parse(at), e);
  EXPECT_EQ(*at, -9);
  EXPECT_EQ(e.SideRows(), 2);
  EXPECT_FALSE(e.IsPlain());
  EXPECT_TRUE(LibraryEpilogue().IsPlain());
}

TEST(LibraryEpilogueTest, AppliesBiasThenOpsInOrder) {
  LibraryEpilogue e = SomeEpilogue();
  // sides: row 0 the bias, row 1 the multiplier; 2 channels.
  const float sides[] = {1.0f, 2.0f, 3.0f, 4.0f};
  // channel 1: ((5 + 2) * 0.5 + 2) * 4
  EXPECT_FLOAT_EQ(e.Apply(5.0f, sides, 2, 1), 22.0f);
  EXPECT_EQ(RoundToBf16(1.0f), 0x3f80);
}

TEST(GemmProblemTest, EncodesAndDecodes) {
  GemmProblem p;
  p.type = GemmOperandType::kBF16;
  p.trans_b = true;
  p.accumulate = false;
  p.batch = 3;
  p.m = 5;
  p.n = 6;
  p.k = 7;
  p.lda = 7;
  p.ldb = 7;
  p.ldc = 6;
  p.stride_a = 35;
  p.stride_b = 42;
  p.stride_c = 30;
  p.epilogue = SomeEpilogue();
  const std::vector<int64_t> words = p.Encode();
  const GemmProblem q = GemmProblem::Decode(words.data());
  EXPECT_EQ(q.Encode(), words);
  EXPECT_EQ(q.type, p.type);
  EXPECT_TRUE(q.trans_b);
  EXPECT_FALSE(q.accumulate);
  EXPECT_EQ(q.epilogue, p.epilogue);
}

TEST(GemmProblemTest, WordsOfAnotherEncodingAbort) {
  std::vector<int64_t> words = GemmProblem().Encode();
  words[0] = 7;
  EXPECT_DEATH(GemmProblem::Decode(words.data()),
               "GEMM: problem encoding 7, expected 1");
  words = ConvProblem().Encode();
  words[0] = 7;
  EXPECT_DEATH(ConvProblem::Decode(words.data()),
               "convolution: problem encoding 7, expected 2");
}

TEST(GemmBlockOfTest, BlocksPartitionTheSplitDimension) {
  GemmProblem p;
  p.m = 10;
  p.n = 3;
  p.k = 4;
  p.lda = 4;
  p.ldb = 3;
  p.ldc = 3;
  // Tall: rows 3+3+3+1.
  int64_t rows = 0;
  for (int64_t block = 0; block < 4; ++block) {
    GemmBlock b = GemmBlockOf(p, block, 4);
    EXPECT_EQ(b.offset_c, rows * p.ldc);
    rows += b.problem.m;
  }
  EXPECT_EQ(rows, p.m);
  // Wide: whole 16-column parts, the last blocks empty.
  p.m = 2;
  p.n = 40;
  p.ldb = p.ldc = 40;
  EXPECT_EQ(GemmBlockOf(p, 0, 4).problem.n, 16);
  EXPECT_EQ(GemmBlockOf(p, 2, 4).problem.n, 8);
  EXPECT_EQ(GemmBlockOf(p, 2, 4).offset_c, 32);
  EXPECT_EQ(GemmBlockOf(p, 3, 4).problem.n, 0);
  // Batched: by matrices.
  p.batch = 5;
  p.stride_a = 100;
  EXPECT_EQ(GemmBlockOf(p, 1, 4).problem.batch, 2);
  EXPECT_EQ(GemmBlockOf(p, 1, 4).offset_a, 200);
  EXPECT_EQ(GemmBlockOf(p, 2, 4).problem.batch, 1);
  EXPECT_EQ(GemmBlockOf(p, 2, 4).problem.stride_a, 0);
}

TEST(BlockRangeTest, CoversTheExtentInOrder) {
  int64_t next = 0;
  for (int64_t block = 0; block < 4; ++block) {
    auto [begin, size] = BlockRange(10, CeilDiv(10, 4), block);
    EXPECT_EQ(begin, next);
    next += size;
  }
  EXPECT_EQ(next, 10);
  EXPECT_EQ(BlockRange(2, 1, 3), (std::pair<int64_t, int64_t>{2, 0}));
}

// Every field survives the words, the scale bit for bit.
TEST(MaskedAttentionProblemTest, DecodesWhatItEncodes) {
  MaskedAttentionProblem p;
  p.query_type = GemmOperandType::kBF16;
  p.kv_type = GemmOperandType::kF16;
  p.out_type = GemmOperandType::kF32;
  p.mask_type = AttentionMaskType::kBF16;
  p.causal = true;
  p.batch = 2, p.heads = 32, p.kv_heads = 8, p.q_len = 128, p.kv_len = 1024;
  p.head_dim = 64, p.value_dim = 48;
  p.scale = 0.125f + 1e-7f;
  for (int i = 0; i < 3; ++i) {
    p.query_strides[i] = 100 + i, p.key_strides[i] = 200 + i, p.value_strides[i] = 300 + i;
    p.out_strides[i] = 400 + i;
  }
  for (int i = 0; i < 4; ++i) p.mask_strides[i] = i == 1 ? 0 : 500 + i;
  const std::vector<int64_t> words = p.Encode();
  ASSERT_EQ(words.size(), static_cast<size_t>(MaskedAttentionProblem::kWords));
  const MaskedAttentionProblem q = MaskedAttentionProblem::Decode(words.data());
  EXPECT_EQ(q.Encode(), words);
  EXPECT_EQ(q.scale, p.scale);
  EXPECT_EQ(q.kv_type, GemmOperandType::kF16);
  EXPECT_EQ(q.mask_type, AttentionMaskType::kBF16);
  EXPECT_TRUE(q.causal);
  EXPECT_EQ(q.value_dim, 48);
  EXPECT_EQ(q.mask_strides[1], 0);
  EXPECT_EQ(q.out_strides[2], 402);
}

}  // namespace
}  // namespace rbln::compiler

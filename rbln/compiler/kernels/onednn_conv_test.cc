// spec: P5, A2
// rbln_conv against a double-precision reference: f32 and bf16 operands,
// strides, asymmetric padding, dilation, groups, batches, strided source and
// result, accumulate or overwrite, on the GEMM-based kernel and on blocked
// layouts; epilogues (bias, per-channel operands, element-wise functions,
// bf16 stores); blocks cover the problem once and give the same bits in
// sequence and on threads; kernels of program inputs reordered once per
// content version.
#include "rbln/compiler/kernels/onednn_conv.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/compiler/kernels/packed_weights.h"
#include "rbln/compiler/kernels/test_operands.h"
#include "rbln/compiler/testing/test_graphs.h"
#include "rbln/runtime/executable.h"

namespace rbln::compiler {
namespace {

// A problem of the given shape with contiguous operands, or with `pad`
// extra elements per source row and result channel.
ConvProblem Problem(ConvOperandType type, int64_t n, int64_t groups,
                    int64_t ic, int64_t oc, int64_t ih, int64_t iw, int64_t k,
                    int64_t stride, int64_t dilation, int64_t pad_tl,
                    int64_t pad_br, int64_t pad = 0) {
  ConvProblem p;
  p.type = type;
  p.n = n;
  p.groups = groups;
  p.ic = ic;
  p.oc = oc;
  p.ih = ih;
  p.iw = iw;
  p.kh = p.kw = k;
  p.stride_h = p.stride_w = stride;
  p.dilation_h = p.dilation_w = dilation;
  p.pad_top = p.pad_left = pad_tl;
  p.pad_bottom = p.pad_right = pad_br;
  const int64_t span = dilation * (k - 1) + 1;
  p.oh = (ih + pad_tl + pad_br - span) / stride + 1;
  p.ow = (iw + pad_tl + pad_br - span) / stride + 1;
  const int64_t row = iw + pad;
  p.src_strides[3] = 1;
  p.src_strides[2] = row;
  p.src_strides[1] = row * ih;
  p.src_strides[0] = row * ih * ic;
  const int64_t plane = p.oh * p.ow + pad;
  p.dst_strides[3] = 1;
  p.dst_strides[2] = p.ow;
  p.dst_strides[1] = plane;
  p.dst_strides[0] = plane * oc;
  return p;
}

struct Operands {
  std::vector<float> src, weights, dst_init, sides;
  std::vector<char> src_raw, weights_raw;
};

int64_t SrcSize(const ConvProblem& p) {
  return (p.n - 1) * p.src_strides[0] + (p.ic - 1) * p.src_strides[1] +
         (p.ih - 1) * p.src_strides[2] + p.iw;
}

int64_t DstSize(const ConvProblem& p) {
  return (p.n - 1) * p.dst_strides[0] + (p.oc - 1) * p.dst_strides[1] +
         (p.oh - 1) * p.dst_strides[2] + p.ow;
}

Operands Make(const ConvProblem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o;
  const bool bf16 = p.type == ConvOperandType::kBF16;
  testing::FillOperand(SrcSize(p), bf16, rng, o.src, o.src_raw);
  testing::FillOperand(p.oc * (p.ic / p.groups) * p.kh * p.kw, bf16, rng,
                       o.weights, o.weights_raw);
  o.dst_init.resize(DstSize(p));
  for (float& v : o.dst_init) v = dist(rng);
  o.sides.resize(4 * p.oc);
  for (float& v : o.sides) v = dist(rng) + 2.0f;  // no division by ~0
  return o;
}

// The expected result at every element of the dst buffer (as f32 before
// the store), untouched ones included.
std::vector<double> Reference(const ConvProblem& p, const Operands& o) {
  std::vector<double> out(o.dst_init.begin(), o.dst_init.end());
  const int64_t icg = p.ic / p.groups, ocg = p.oc / p.groups;
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t f = 0; f < p.oc; ++f) {
      const int64_t g = f / ocg;
      for (int64_t y = 0; y < p.oh; ++y) {
        for (int64_t x = 0; x < p.ow; ++x) {
          double sum = 0;
          for (int64_t c = 0; c < icg; ++c) {
            for (int64_t i = 0; i < p.kh; ++i) {
              for (int64_t j = 0; j < p.kw; ++j) {
                const int64_t yy = y * p.stride_h + i * p.dilation_h - p.pad_top;
                const int64_t xx = x * p.stride_w + j * p.dilation_w - p.pad_left;
                if (yy < 0 || yy >= p.ih || xx < 0 || xx >= p.iw) continue;
                sum += static_cast<double>(
                           o.src[n * p.src_strides[0] +
                                 (g * icg + c) * p.src_strides[1] +
                                 yy * p.src_strides[2] + xx]) *
                       o.weights[((f * icg + c) * p.kh + i) * p.kw + j];
              }
            }
          }
          double& v = out[n * p.dst_strides[0] + f * p.dst_strides[1] +
                          y * p.dst_strides[2] + x];
          v = p.accumulate ? v + sum
                           : p.epilogue.Apply(static_cast<float>(sum),
                                              o.sides.data(), p.oc, f);
        }
      }
    }
  }
  return out;
}

std::vector<ConvProblem> Problems() {
  std::vector<ConvProblem> all;
  for (ConvOperandType t : {ConvOperandType::kF32, ConvOperandType::kBF16}) {
    // Few output positions (the GEMM-based kernel on NCHW) and many (blocked
    // layouts); strides, dilation, asymmetric padding, groups, depthwise,
    // batches, strided operands.
    all.push_back(Problem(t, 1, 1, 3, 5, 7, 8, 3, 1, 1, 1, 1));
    all.push_back(Problem(t, 1, 1, 8, 32, 26, 26, 3, 1, 1, 1, 1));
    all.push_back(Problem(t, 2, 1, 6, 20, 11, 9, 3, 2, 1, 1, 0));
    all.push_back(Problem(t, 1, 1, 4, 16, 30, 30, 3, 1, 2, 2, 2));
    all.push_back(Problem(t, 1, 2, 6, 8, 9, 9, 3, 1, 1, 0, 0));
    all.push_back(Problem(t, 3, 4, 8, 8, 24, 24, 3, 1, 1, 1, 1));
    all.push_back(Problem(t, 1, 16, 16, 16, 28, 28, 3, 2, 1, 1, 1));
    all.push_back(Problem(t, 2, 1, 5, 17, 10, 10, 1, 1, 1, 0, 0, /*pad=*/3));
    all.push_back(Problem(t, 1, 1, 3, 24, 40, 40, 7, 2, 1, 3, 3, /*pad=*/5));
  }
  return all;
}

class OnednnConvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LoadOnednn()) {
      GTEST_SKIP() << "oneDNN is not installed (" << OnednnVersion()
                   << "); scripts/setup installs libdnnl-dev";
    }
  }
};

// Runs blocks [0, blocks) in sequence into `dst` (raw bytes of the store
// type).
void RunAll(const ConvProblem& p, const Operands& o, std::vector<char>& dst,
            int64_t blocks) {
  for (int64_t block = 0; block < blocks; ++block) {
    RunConvBlock(p, o.src_raw.data(), o.weights_raw.data(), dst.data(),
                 o.sides.data(), block, blocks);
  }
}

std::vector<char> InitialDst(const ConvProblem& p, const Operands& o) {
  const bool bf16 = p.epilogue.store == StoreType::kBF16;
  std::vector<char> raw(o.dst_init.size() * (bf16 ? 2 : 4));
  for (size_t i = 0; i < o.dst_init.size(); ++i) {
    p.epilogue.Store(o.dst_init[i], raw.data() + i * (bf16 ? 2 : 4));
  }
  return raw;
}

float Load(const ConvProblem& p, const std::vector<char>& raw, size_t i) {
  if (p.epilogue.store == StoreType::kBF16) {
    uint16_t bits;
    std::memcpy(&bits, raw.data() + 2 * i, 2);
    return testing::Bf16ToFloat(bits);
  }
  float f;
  std::memcpy(&f, raw.data() + 4 * i, 4);
  return f;
}

void ExpectMatches(const ConvProblem& p, uint32_t seed, int64_t blocks) {
  Operands o = Make(p, seed);
  // Untouched elements keep their initial (stored) values.
  for (size_t i = 0; i < o.dst_init.size(); ++i) {
    o.dst_init[i] = Load(p, InitialDst(p, o), i);
  }
  const std::vector<double> want = Reference(p, o);
  std::vector<char> dst = InitialDst(p, o);
  RunAll(p, o, dst, blocks);
  const double terms = p.ic / p.groups * p.kh * p.kw;
  const double store = p.epilogue.store == StoreType::kBF16 ? 1.0 / 128 : 0;
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 3; ++i) {
    const double got = Load(p, dst, i);
    const double tolerance = 2e-6 * (terms + 1) + store * std::fabs(want[i]);
    if (!(std::fabs(got - want[i]) <= tolerance)) {
      ++failures;
      ADD_FAILURE() << p.ToString() << " blocks " << blocks << " element " << i
                    << ": got " << got << ", want " << want[i] << " ("
                    << ConvImplementation(p) << ")";
    }
  }
}

TEST_F(OnednnConvTest, MatchesReferenceInOneBlockAndInFour) {
  uint32_t seed = 1;
  for (ConvProblem p : Problems()) {
    for (bool accumulate : {true, false}) {
      p.accumulate = accumulate;
      for (int64_t blocks : {1, 4}) ExpectMatches(p, seed++, blocks);
    }
  }
}

TEST_F(OnednnConvTest, UsesBlockedLayoutsForManyOutputPositions) {
  const auto t = ConvOperandType::kBF16;
  EXPECT_NE(ConvImplementation(Problem(t, 1, 1, 16, 32, 26, 26, 3, 1, 1, 1, 1))
                .find("blocked"),
            std::string::npos);
  EXPECT_EQ(ConvImplementation(Problem(t, 1, 1, 64, 64, 7, 7, 3, 1, 1, 1, 1))
                .find("blocked"),
            std::string::npos);
}

TEST_F(OnednnConvTest, AppliesEpilogues) {
  LibraryEpilogue bias_relu;
  bias_relu.bias_row = 0;
  bias_relu.ops.push_back({false, static_cast<int64_t>(EltwiseFn::kRelu)});
  // Batch norm's shape: (x - mean) * scale + shift, then an activation.
  LibraryEpilogue norm;
  norm.ops = {{true, static_cast<int64_t>(BinaryFn::kSub), 0, 0, 1},
              {true, static_cast<int64_t>(BinaryFn::kMul), 0, 0, 2},
              {true, static_cast<int64_t>(BinaryFn::kAdd), 0, 0, 3},
              {false, static_cast<int64_t>(EltwiseFn::kGeluErf)}};
  LibraryEpilogue others;
  others.ops = {{false, static_cast<int64_t>(EltwiseFn::kLinear), 0.5f, -0.25f},
                {true, static_cast<int64_t>(BinaryFn::kDiv), 0, 0, 2},
                {false, static_cast<int64_t>(EltwiseFn::kSilu)},
                {false, static_cast<int64_t>(EltwiseFn::kTanh)},
                {false, static_cast<int64_t>(EltwiseFn::kGeluTanh)},
                {false, static_cast<int64_t>(EltwiseFn::kSigmoid)}};
  uint32_t seed = 100;
  for (ConvProblem p : Problems()) {
    p.accumulate = false;
    for (LibraryEpilogue e : {bias_relu, norm, others}) {
      for (StoreType store : {StoreType::kF32, StoreType::kBF16}) {
        // bf16 results need bf16 operands (as the rewrite emits them).
        if (store == StoreType::kBF16 && p.type != ConvOperandType::kBF16) {
          continue;
        }
        e.store = store;
        p.epilogue = e;
        ExpectMatches(p, seed++, 4);
      }
    }
  }
}

// A kernel read from a registered program input: reordered into its blocked
// layout at its second use and kept while its version stays, reordered
// again after a write (a new version); every call matches the reference
// and gives the bits of the first.
TEST_F(OnednnConvTest, PackedKernelsFollowTheirContentVersion) {
  uint32_t seed = 300;
  const uint64_t packed_before = PackedWeightCache::Global().bytes();
  bool blocked = false;
  for (ConvProblem p : Problems()) {
    p.accumulate = false;
    blocked |= ConvImplementation(p).find("blocked") != std::string::npos;
    Operands o = Make(p, seed++);
    runtime::BufferView view;
    view.data = o.weights_raw.data();
    view.dtype = p.type == ConvOperandType::kBF16 ? DType::kBFloat16
                                                  : DType::kFloat32;
    view.sizes = {static_cast<int64_t>(o.weights.size())};
    view.strides = {1};
    view.content_address = 0x100000 * seed;
    for (uint64_t version : {1, 2}) {
      if (version == 2) {
        // The kernel is written: new bytes, new version.
        Operands fresh = Make(p, seed + 1000);
        o.weights = fresh.weights;
        std::memcpy(o.weights_raw.data(), fresh.weights_raw.data(),
                    o.weights_raw.size());
      }
      view.content_version = version;
      std::vector<runtime::BufferView> args = {view};
      std::vector<void*> data = {o.weights_raw.data()};
      InputContentScope scope(args, data, 1);
      for (int64_t blocks : {1, 4}) {
        std::vector<char> first;
        for (int call = 0; call < 3; ++call) {
          std::vector<char> dst = InitialDst(p, o);
          RunAll(p, o, dst, blocks);
          if (call == 0) {
            first = dst;
            const std::vector<double> want = Reference(p, o);
            const double terms = p.ic / p.groups * p.kh * p.kw;
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_NEAR(Load(p, dst, i), want[i], 2e-6 * (terms + 1))
                  << p.ToString() << " version " << version << " element " << i;
            }
          } else {
            EXPECT_EQ(dst, first) << p.ToString() << " version " << version
                                  << " call " << call << " blocks " << blocks;
          }
        }
      }
    }
  }
  if (blocked) EXPECT_GT(PackedWeightCache::Global().bytes(), packed_before);
}

TEST_F(OnednnConvTest, BlocksOnThreadsGiveTheSameBitsAsInSequence) {
  for (ConvProblem p : Problems()) {
    p.accumulate = false;
    p.epilogue.bias_row = 0;
    p.epilogue.ops = {{false, static_cast<int64_t>(EltwiseFn::kRelu)}};
    Operands o = Make(p, 7);
    std::vector<char> sequential = InitialDst(p, o), threaded = sequential;
    RunAll(p, o, sequential, 4);
    std::vector<std::thread> threads;
    for (int64_t block = 0; block < 4; ++block) {
      threads.emplace_back([&, block] {
        RunConvBlock(p, o.src_raw.data(), o.weights_raw.data(), threaded.data(),
                     o.sides.data(), block, 4);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(sequential, threaded) << p.ToString();
  }
}

TEST(ConvBlockOfTest, BlocksPartitionTheSplitDimension) {
  ConvProblem p = Problem(ConvOperandType::kF32, 5, 1, 4, 8, 6, 6, 3, 1, 1, 1, 1);
  int64_t images = 0;
  for (int64_t block = 0; block < 4; ++block) {
    ConvBlock b = ConvBlockOf(p, block, 4);
    EXPECT_EQ(b.offset_src, images * p.src_strides[0]);
    EXPECT_EQ(b.offset_dst, images * p.dst_strides[0]);
    images += b.problem.n;
  }
  EXPECT_EQ(images, 5);
  // One image: output channels in parts of 16.
  p = Problem(ConvOperandType::kF32, 1, 1, 4, 40, 6, 6, 3, 1, 1, 1, 1);
  EXPECT_EQ(ConvBlockOf(p, 0, 4).problem.oc, 16);
  EXPECT_EQ(ConvBlockOf(p, 2, 4).problem.oc, 8);
  EXPECT_EQ(ConvBlockOf(p, 2, 4).channel, 32);
  EXPECT_EQ(ConvBlockOf(p, 2, 4).offset_weights, 32 * 4 * 9);
  EXPECT_EQ(ConvBlockOf(p, 3, 4).problem.oc, 0);
  EXPECT_EQ(ConvSplitExtent(p), 3);
  // Groups.
  p = Problem(ConvOperandType::kF32, 1, 6, 12, 18, 6, 6, 3, 1, 1, 1, 1);
  ConvBlock b = ConvBlockOf(p, 1, 4);
  EXPECT_EQ(b.problem.groups, 2);
  EXPECT_EQ(b.problem.ic, 4);
  EXPECT_EQ(b.problem.oc, 6);
  EXPECT_EQ(b.channel, 6);
  EXPECT_EQ(b.offset_src, 4 * p.src_strides[1]);
  EXPECT_EQ(b.offset_weights, 6 * 2 * 9);
}

TEST(ConvProblemTest, EncodesAndDecodes) {
  ConvProblem p =
      Problem(ConvOperandType::kBF16, 2, 2, 4, 6, 9, 8, 3, 2, 1, 1, 0, 2);
  p.accumulate = false;
  p.epilogue.bias_row = 0;
  p.epilogue.store = StoreType::kBF16;
  p.epilogue.ops = {{false, static_cast<int64_t>(EltwiseFn::kLinear), 0.5f, 2.0f},
                    {true, static_cast<int64_t>(BinaryFn::kMul), 0, 0, 1}};
  const std::vector<int64_t> words = p.Encode();
  const ConvProblem q = ConvProblem::Decode(words.data());
  EXPECT_EQ(q.Encode(), words);
  EXPECT_EQ(q.epilogue, p.epilogue);
  EXPECT_EQ(q.ToString(), p.ToString());
  ConvProblem f = Problem(ConvOperandType::kF32, 1, 1, 4, 6, 9, 8, 3, 1, 1, 1, 1);
  f.f16_kernel = true;
  const ConvProblem g = ConvProblem::Decode(f.Encode().data());
  EXPECT_TRUE(g.f16_kernel);
  EXPECT_FALSE(g.accumulate != f.accumulate);
  EXPECT_EQ(g.Encode(), f.Encode());
}

// An f16 kernel, widened by the call, gives the bits of the f32 problem on
// its widening: kept per content version for a registered program input,
// or widened per call for another buffer.
TEST_F(OnednnConvTest, F16KernelsGiveTheBitsOfTheirWidening) {
  uint32_t seed = 500;
  for (ConvProblem p : Problems()) {
    if (p.type != ConvOperandType::kF32) continue;
    p.accumulate = false;
    Operands o = Make(p, seed++);
    // The kernel as f16 values (|w| < 1: exact in f16 after rounding).
    std::vector<char> kernel16(o.weights.size() * 2);
    for (size_t i = 0; i < o.weights.size(); ++i) {
      const _Float16 h = static_cast<_Float16>(o.weights[i]);
      o.weights[i] = static_cast<float>(h);
      std::memcpy(o.weights_raw.data() + 4 * i, &o.weights[i], 4);
      std::memcpy(kernel16.data() + 2 * i, &h, 2);
    }
    // (Per block count: a grouped problem cut into blocks runs other
    // primitives than whole.)
    std::vector<char> want1 = InitialDst(p, o), want4 = want1;
    RunAll(p, o, want1, 1);
    RunAll(p, o, want4, 4);
    ConvProblem h = p;
    h.f16_kernel = true;
    runtime::BufferView view;
    view.data = kernel16.data();
    view.dtype = DType::kFloat16;
    view.sizes = {static_cast<int64_t>(o.weights.size())};
    view.strides = {1};
    view.content_address = 0x100000 * seed;
    view.content_version = 1;
    for (bool registered : {false, true}) {
      std::optional<InputContentScope> scope;
      std::vector<runtime::BufferView> args = {view};
      std::vector<void*> data = {kernel16.data()};
      if (registered) scope.emplace(args, data, 1);
      for (int64_t blocks : {1, 4}) {
        for (int call = 0; call < 3; ++call) {
          std::vector<char> dst = InitialDst(h, o);
          for (int64_t block = 0; block < blocks; ++block) {
            RunConvBlock(h, o.src_raw.data(), kernel16.data(), dst.data(),
                         o.sides.data(), block, blocks);
          }
          EXPECT_EQ(dst, blocks == 1 ? want1 : want4)
              << h.ToString() << " registered " << registered
                               << " blocks " << blocks << " call " << call;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rbln::compiler

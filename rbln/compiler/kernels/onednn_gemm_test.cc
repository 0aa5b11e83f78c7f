// spec: P5, A2
// rbln_gemm against a double-precision reference: f32, bf16 and f16 operands
// (f16 on both routes: widened to f32 and as bf16x3 products),
// transposed B, batches, row and batch strides, accumulate or overwrite;
// blocks cover the problem exactly once and give the same bits on one
// thread or spread over threads; epilogues (bias, per-column operands,
// element-wise functions, bf16 stores) match the reference epilogue.
#include "rbln/compiler/kernels/onednn_gemm.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "rbln/compiler/kernels/bf16_skinny_gemm.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/compiler/kernels/onednn_library.h"
#include "rbln/compiler/kernels/packed_weights.h"
#include "rbln/compiler/kernels/test_operands.h"
#include "rbln/compiler/testing/test_graphs.h"
#include "rbln/runtime/executable.h"

namespace rbln::compiler {
namespace {

// Halves' values from their definition, independent of the library's
// conversion.
using testing::HalfValue;

// Operands of `p` filled with random values representable in its type;
// `a`/`b` hold them as f32 for the reference, `a_raw`/`b_raw` as passed.
struct Operands {
  std::vector<float> a, b, c;
  std::vector<char> a_raw, b_raw;
};

int64_t Span(int64_t batch, int64_t stride, int64_t rows, int64_t ld,
             int64_t cols) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

Operands Make(const GemmProblem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o;
  const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  o.a.resize(Span(p.batch, p.stride_a, p.m, p.lda, p.k));
  o.b.resize(Span(p.batch, p.stride_b, b_rows, p.ldb, b_cols));
  o.c.resize(Span(p.batch, p.stride_c, p.m, p.ldc, p.n));
  const bool bf16 = p.type == GemmOperandType::kBF16;
  const bool f16 = p.type == GemmOperandType::kF16;
  // Halves below 1 in magnitude: any sign and mantissa, exponents 0
  // (subnormals) to 14.
  std::uniform_int_distribution<int> sign(0, 1), exponent(0, 14),
      mantissa(0, 1023);
  auto fill = [&](std::vector<float>& v, std::vector<char>& raw) {
    if (!f16) {
      testing::FillOperand(v.size(), bf16, rng, v, raw);
      return;
    }
    raw.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t bits = static_cast<uint16_t>(
          sign(rng) << 15 | exponent(rng) << 10 | mantissa(rng));
      v[i] = HalfValue(bits);
      std::memcpy(raw.data() + 2 * i, &bits, 2);
    }
  };
  fill(o.a, o.a_raw);
  fill(o.b, o.b_raw);
  for (float& v : o.c) v = dist(rng);
  return o;
}

// The expected C (every element of the C buffer, untouched ones included).
std::vector<double> Reference(const GemmProblem& p, const Operands& o) {
  std::vector<double> c(o.c.begin(), o.c.end());
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const double a = o.a[bt * p.stride_a + i * p.lda + l];
          const double b = p.trans_b ? o.b[bt * p.stride_b + j * p.ldb + l]
                                     : o.b[bt * p.stride_b + l * p.ldb + j];
          sum += a * b;
        }
        double& out = c[bt * p.stride_c + i * p.ldc + j];
        out = p.accumulate ? out + sum : sum;
      }
    }
  }
  return c;
}

std::string Describe(const GemmProblem& p) {
  return absl::StrFormat(
      "type %d trans_b %d acc %d batch %d m %d n %d k %d ld %d/%d/%d (%s)",
      static_cast<int>(p.type), p.trans_b, p.accumulate, p.batch, p.m, p.n,
      p.k, p.lda, p.ldb, p.ldc, GemmImplementation(p));
}

// The f16 route forced while in scope (both are tested on every CPU).
class ForcedRoute {
 public:
  explicit ForcedRoute(std::optional<F16GemmRoute> route) {
    SetF16GemmRoute(route);
  }
  ~ForcedRoute() { SetF16GemmRoute(std::nullopt); }
};

// The routes to test `p` on: both for f16 operands.
std::vector<std::optional<F16GemmRoute>> RoutesFor(const GemmProblem& p) {
  if (p.type != GemmOperandType::kF16) return {std::nullopt};
  return {F16GemmRoute::kWidenedF32, F16GemmRoute::kBf16x3};
}

std::vector<GemmProblem> Problems() {
  std::vector<GemmProblem> all;
  for (GemmOperandType type : {GemmOperandType::kF32, GemmOperandType::kBF16,
                               GemmOperandType::kF16}) {
    for (bool trans_b : {false, true}) {
      for (bool accumulate : {false, true}) {
        // Plain, padded rows, tall (split by rows), wide (split by
        // columns), batched with gaps between matrices; deep and wide ones
        // whose f16 B is widened in chunks of columns (2 MB of f32), plain
        // and batched.
        for (auto [batch, m, n, k, pad] :
             {std::tuple{1, 7, 5, 3, 0}, {1, 33, 17, 65, 3}, {1, 130, 9, 40, 0},
              {1, 6, 70, 31, 1}, {3, 19, 23, 29, 2}, {1, 5, 600, 2048, 1},
              {3, 4, 300, 1024, 2}}) {
          GemmProblem p;
          p.type = type;
          p.trans_b = trans_b;
          p.accumulate = accumulate;
          p.batch = batch;
          p.m = m;
          p.n = n;
          p.k = k;
          p.lda = k + pad;
          p.ldb = (trans_b ? k : n) + pad;
          p.ldc = n + pad;
          if (batch > 1) {
            p.stride_a = p.m * p.lda + 5;
            p.stride_b = (trans_b ? n : k) * p.ldb + 7;
            p.stride_c = p.m * p.ldc + 11;
          }
          all.push_back(p);
        }
      }
    }
  }
  return all;
}

class OnednnGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LoadOnednn()) {
      GTEST_SKIP() << "oneDNN is not installed (" << OnednnDescription()
                   << "); scripts/setup installs libdnnl-dev";
    }
  }
};

TEST_F(OnednnGemmTest, MatchesReferenceInOneBlockAndInFour) {
  uint32_t seed = 1;
  for (const GemmProblem& p : Problems()) {
    for (std::optional<F16GemmRoute> route : RoutesFor(p)) {
      ForcedRoute forced(route);
      for (int64_t blocks : {1, 4}) {
        Operands o = Make(p, seed++);
        const std::vector<double> want = Reference(p, o);
        for (int64_t block = 0; block < blocks; ++block) {
          RunGemmBlock(p, o.a_raw.data(), o.b_raw.data(), o.c.data(), nullptr,
                       block, blocks);
        }
        // f32 accumulation of k products of values below 1.
        const double tolerance = 1e-6 * (p.k + 1) + 1e-6;
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(o.c[i], want[i], tolerance)
              << Describe(p) << " blocks " << blocks << " element " << i;
        }
      }
    }
  }
}

// B read from a registered program input: packed at its second use, the
// packed copy reused while the version stays, repacked after a write (a new
// version); results match the reference throughout.
TEST_F(OnednnGemmTest, PackedWeightsFollowTheirContentVersion) {
  uint32_t seed = 100;
  const uint64_t packed_before = PackedWeightCache::Global().bytes();
  for (const GemmProblem& p : Problems()) {
    if (p.batch != 1) continue;
    for (std::optional<F16GemmRoute> route : RoutesFor(p)) {
      ForcedRoute forced(route);
      Operands o = Make(p, seed++);
      runtime::BufferView b_view;
      b_view.data = o.b_raw.data();
      b_view.dtype = p.type == GemmOperandType::kBF16  ? DType::kBFloat16
                     : p.type == GemmOperandType::kF16 ? DType::kFloat16
                                                       : DType::kFloat32;
      b_view.sizes = {static_cast<int64_t>(o.b.size())};
      b_view.strides = {1};
      b_view.content_address = 0x100000 * seed;
      for (uint64_t version : {1, 2}) {
        if (version == 2) {
          // The weight is written: new bytes, new version.
          Operands fresh = Make(p, seed + 1000);
          o.b = fresh.b;
          std::memcpy(o.b_raw.data(), fresh.b_raw.data(), o.b_raw.size());
        }
        b_view.content_version = version;
        std::vector<runtime::BufferView> args = {b_view};
        std::vector<void*> data = {o.b_raw.data()};
        InputContentScope scope(args, data, 1);
        for (int call = 0; call < 3; ++call) {
          for (int64_t blocks : {1, 4}) {
            std::vector<float> c = o.c;
            Operands expected = o;
            const std::vector<double> want = Reference(p, expected);
            for (int64_t block = 0; block < blocks; ++block) {
              RunGemmBlock(p, o.a_raw.data(), o.b_raw.data(), c.data(), nullptr,
                           block, blocks);
            }
            const double tolerance = 1e-6 * (p.k + 1) + 1e-6;
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_NEAR(c[i], want[i], tolerance)
                  << Describe(p) << " version " << version << " call " << call
                  << " blocks " << blocks << " element " << i;
            }
          }
        }
      }
    }
  }
  // Packed where oneDNN's brgemm takes blocked weights: its effective ISA
  // (ONEDNN_MAX_CPU_ISA applied, as in onednn_gemm_avx2_test) from
  // avx512_core on, not merely a CPU with AVX-512.
  if (onednn::HasBf16(onednn::Library())) {
    EXPECT_GT(PackedWeightCache::Global().bytes(), packed_before);
  }
}

// One packed copy of a weight serves GEMMs of every M (a prefill of any
// length and the decode steps): a bf16 Linear weight [n, k] multiplied by
// 64, 1, 17 and again 64 and 1 rows is packed into the cache once (at its
// second use), reused by every later call, and its first call -- packed
// for that call alone -- gives the bits of the later ones.
TEST_F(OnednnGemmTest, OnePackedCopyServesEveryM) {
  if (!onednn::HasBf16(onednn::Library())) {
    GTEST_SKIP() << "oneDNN's brgemm takes blocked bf16 weights with "
                    "AVX-512 only (and bf16 blocks of few rows read B as "
                    "stored without it)";
  }
  constexpr int64_t kN = 128, kK = 256;
  auto problem = [&](int64_t m) {
    GemmProblem p;
    p.type = GemmOperandType::kBF16;
    p.trans_b = true;
    p.accumulate = false;
    p.m = m;
    p.n = kN;
    p.k = kK;
    p.lda = kK;
    p.ldb = kK;
    p.ldc = kN;
    return p;
  };
  Operands weight = Make(problem(1), 4242);
  runtime::BufferView b_view;
  b_view.data = weight.b_raw.data();
  b_view.dtype = DType::kBFloat16;
  b_view.sizes = {kN * kK};
  b_view.strides = {1};
  b_view.content_address = 0x7700000;
  b_view.content_version = 1;
  std::vector<runtime::BufferView> args = {b_view};
  std::vector<void*> data = {weight.b_raw.data()};
  InputContentScope scope(args, data, 1);
  const PackedWeightCache::Stats before = PackedWeightCache::Global().stats();
  std::vector<std::vector<float>> first_results(65);
  int64_t onednn_calls = 0;
  for (int64_t m : {64, 1, 17, 64, 1}) {
    const GemmProblem p = problem(m);
    // Few rows on AVX-512 BF16 read the weight as stored (skinny kernel).
    if (!SkinnyBf16Preferred(p, true)) ++onednn_calls;
    Operands o = Make(p, static_cast<uint32_t>(m));
    o.b = weight.b;
    o.b_raw = weight.b_raw;  // the values; B is read from `weight`
    const std::vector<double> want = Reference(p, o);
    RunGemmBlock(p, o.a_raw.data(), weight.b_raw.data(), o.c.data(), nullptr,
                 0, 1);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(o.c[i], want[i], 1e-6 * (kK + 1) + 1e-6)
          << Describe(p) << " element " << i;
    }
    if (first_results[m].empty()) {
      first_results[m] = o.c;
    } else {
      EXPECT_EQ(first_results[m], o.c) << "m " << m;
    }
  }
  const PackedWeightCache::Stats after = PackedWeightCache::Global().stats();
  // First use: packed for the call alone; second: packed and kept; then
  // hits, whatever M.
  EXPECT_EQ(after.packs_once - before.packs_once, 1);
  EXPECT_EQ(after.packs - before.packs, 1);
  EXPECT_EQ(after.hits - before.hits, onednn_calls - 2);
  EXPECT_EQ(after.evictions - before.evictions, 0);
  // One copy: the weight's bytes, padded to whole blocks at most 2x.
  const uint64_t kept = after.bytes - before.bytes;
  EXPECT_GE(kept, uint64_t{kN * kK * 2});
  EXPECT_LE(kept, uint64_t{2 * kN * kK * 2});
}

// Without bf16 kernels (AVX2 CPUs), and for a weight on CPUs with AVX-512
// BF16, bf16 problems of up to kSkinnyBf16MaxRows rows run on the skinny
// kernel, which reads a weight as stored: nothing is packed; more rows run
// on its packed f32 (or bf16) copy.
TEST_F(OnednnGemmTest, FewBf16RowsReadAWeightAsStored) {
  const bool bf16_kernels = onednn::HasBf16(onednn::Library());
  GemmProblem p;
  p.type = GemmOperandType::kBF16;
  p.trans_b = true;
  p.accumulate = false;
  p.m = 1;
  p.n = p.ldc = 40;
  p.k = p.lda = p.ldb = 300;
  if (!SkinnyBf16Preferred(p, bf16_kernels)) {
    GTEST_SKIP() << "oneDNN has bf16 kernels and the CPU no AVX-512 BF16";
  }
  Operands weight = Make(p, 99);
  runtime::BufferView b_view;
  b_view.data = weight.b_raw.data();
  b_view.dtype = DType::kBFloat16;
  b_view.sizes = {p.n * p.k};
  b_view.strides = {1};
  b_view.content_address = 0x7800000;
  b_view.content_version = 1;
  std::vector<runtime::BufferView> args = {b_view};
  std::vector<void*> data = {weight.b_raw.data()};
  InputContentScope scope(args, data, 1);
  const PackedWeightCache::Stats before = PackedWeightCache::Global().stats();
  const int64_t most_rows =
      bf16_kernels ? kSkinnyBf16MaxRowsBesideOnednn : kSkinnyBf16MaxRows;
  for (int64_t m : {int64_t{1}, most_rows, int64_t{1}}) {
    p.m = m;
    EXPECT_EQ(GemmImplementation(p).rfind("bf16 skinny", 0), 0u)
        << GemmImplementation(p);
    Operands o = Make(p, static_cast<uint32_t>(m));
    o.b = weight.b;
    const std::vector<double> want = Reference(p, o);
    RunGemmBlock(p, o.a_raw.data(), weight.b_raw.data(), o.c.data(), nullptr,
                 0, 1);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(o.c[i], want[i], 1e-6 * (p.k + 1) + 1e-6)
          << Describe(p) << " element " << i;
    }
  }
  const PackedWeightCache::Stats after = PackedWeightCache::Global().stats();
  EXPECT_EQ(after.packs_once, before.packs_once);
  EXPECT_EQ(after.packs, before.packs);
  EXPECT_EQ(after.hits, before.hits);
  p.m = most_rows + 1;
  EXPECT_EQ(GemmImplementation(p).rfind(bf16_kernels ? "brg" : "bf16->f32", 0),
            0u)
      << GemmImplementation(p);
}

TEST_F(OnednnGemmTest, BlocksOnThreadsGiveTheSameBitsAsInSequence) {
  for (const GemmProblem& p : Problems()) {
    for (std::optional<F16GemmRoute> route : RoutesFor(p)) {
      ForcedRoute forced(route);
      Operands o = Make(p, 7);
      std::vector<float> sequential = o.c, threaded = o.c;
      for (int64_t block = 0; block < 4; ++block) {
        RunGemmBlock(p, o.a_raw.data(), o.b_raw.data(), sequential.data(),
                     nullptr, block, 4);
      }
      std::vector<std::thread> threads;
      for (int64_t block = 0; block < 4; ++block) {
        threads.emplace_back([&, block] {
          RunGemmBlock(p, o.a_raw.data(), o.b_raw.data(), threaded.data(),
                       nullptr, block, 4);
        });
      }
      for (std::thread& t : threads) t.join();
      ASSERT_EQ(std::memcmp(sequential.data(), threaded.data(),
                            sequential.size() * sizeof(float)),
                0)
          << Describe(p);
    }
  }
}

// A GEMM on the user's thread must not change that thread's OpenMP thread
// count: it is PyTorch's torch.get_num_threads() (the same libgomp), and
// Dynamo recompiles every graph when it changes.
TEST_F(OnednnGemmTest, LeavesTheCallersOpenMpThreadCountAlone) {
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (gomp == nullptr) GTEST_SKIP() << "oneDNN does not use libgomp here";
  auto set = reinterpret_cast<void (*)(int)>(dlsym(gomp, "omp_set_num_threads"));
  auto get = reinterpret_cast<int (*)()>(dlsym(gomp, "omp_get_max_threads"));
  ASSERT_NE(set, nullptr);
  ASSERT_NE(get, nullptr);
  // A thread new to oneDNN, as the user's first GEMM sees it.
  std::thread([&] {
    set(3);
    GemmProblem p = Problems()[0];
    Operands o = Make(p, 3);
    RunGemmBlock(p, o.a_raw.data(), o.b_raw.data(), o.c.data(), nullptr, 0, 1);
    EXPECT_EQ(get(), 3);
    RunGemmBlock(p, o.a_raw.data(), o.b_raw.data(), o.c.data(), nullptr, 0, 1);
    EXPECT_NE(OnednnDescription().find("oneDNN"), std::string::npos);
    EXPECT_EQ(get(), 3);
  }).join();
}

// The reference epilogue (LibraryEpilogue::Apply/Store) on the f64 product,
// against the fused post-ops, in 1 and 4 blocks.
TEST_F(OnednnGemmTest, AppliesEpilogues) {
  LibraryEpilogue bias_gelu;
  bias_gelu.bias_row = 0;
  bias_gelu.ops.push_back({false, static_cast<int64_t>(EltwiseFn::kGeluTanh)});
  LibraryEpilogue others;
  others.bias_row = 1;
  others.ops = {{true, static_cast<int64_t>(BinaryFn::kMul), 0, 0, 0},
                {false, static_cast<int64_t>(EltwiseFn::kRelu)},
                {false, static_cast<int64_t>(EltwiseFn::kLinear), 0.5f, -0.25f},
                {true, static_cast<int64_t>(BinaryFn::kAdd), 0, 0, 2},
                {false, static_cast<int64_t>(EltwiseFn::kSilu)}};
  uint32_t seed = 200;
  for (GemmProblem p : Problems()) {
    if (p.accumulate) continue;  // epilogues only overwrite
    for (LibraryEpilogue e : {bias_gelu, others}) {
      for (StoreType store : {StoreType::kF32, StoreType::kBF16}) {
        if (store == StoreType::kBF16 && p.type != GemmOperandType::kBF16) {
          continue;
        }
        e.store = store;
        p.epilogue = e;
        for (std::optional<F16GemmRoute> route : RoutesFor(p)) {
          ForcedRoute forced(route);
          Operands o = Make(p, seed++);
          std::mt19937 rng(seed);
          std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
          std::vector<float> sides(3 * p.n);
          for (float& v : sides) v = dist(rng);
          const std::vector<double> product = Reference(p, o);
          const int64_t bytes = store == StoreType::kBF16 ? 2 : 4;
          for (int64_t blocks : {1, 4}) {
            std::vector<char> c(o.c.size() * bytes, 0);
            for (int64_t block = 0; block < blocks; ++block) {
              RunGemmBlock(p, o.a_raw.data(), o.b_raw.data(), c.data(),
                           sides.data(), block, blocks);
            }
            for (int64_t bt = 0; bt < p.batch; ++bt) {
              for (int64_t i = 0; i < p.m; ++i) {
                for (int64_t j = 0; j < p.n; ++j) {
                  const int64_t at = bt * p.stride_c + i * p.ldc + j;
                  const double want = e.Apply(static_cast<float>(product[at]),
                                              sides.data(), p.n, j);
                  double got;
                  if (bytes == 2) {
                    uint16_t bits;
                    std::memcpy(&bits, c.data() + 2 * at, 2);
                    got = testing::Bf16ToFloat(bits);
                  } else {
                    float f;
                    std::memcpy(&f, c.data() + 4 * at, 4);
                    got = f;
                  }
                  const double tolerance =
                      4e-6 * (p.k + 1) +
                      (bytes == 2 ? std::fabs(want) / 128 : 0);
                  ASSERT_NEAR(got, want, tolerance)
                      << Describe(p) << " epilogue " << e.ToString()
                      << " blocks " << blocks << " at " << bt << "," << i
                      << "," << j;
                }
              }
            }
          }
        }
      }
    }
  }
}

// f16 operands are widened per block into f32 and multiplied by the f32
// primitive, or split into K-tripled bf16 operands (no f16 matmul in oneDNN
// 2.6); by default the latter exactly where oneDNN's bf16 matmul runs on
// AMX.
TEST_F(OnednnGemmTest, F16OperandsRunOnTheChosenRoute) {
  GemmProblem p;
  p.type = GemmOperandType::kF16;
  p.m = p.n = p.k = p.lda = p.ldb = p.ldc = 64;
  {
    ForcedRoute forced(F16GemmRoute::kWidenedF32);
    EXPECT_EQ(GemmImplementation(p).rfind("f16->f32", 0), 0u)
        << GemmImplementation(p);
  }
  {
    // Where oneDNN has no bf16 kernels (AVX2 CPUs), the f32 route anyway.
    ForcedRoute forced(F16GemmRoute::kBf16x3);
    const bool bf16_kernels = onednn::HasBf16(onednn::Library());
    EXPECT_EQ(GemmImplementation(p).rfind(
                  bf16_kernels ? "f16->bf16x3" : "f16->f32", 0),
              0u)
        << GemmImplementation(p);
  }
  GemmProblem bf16 = p;
  bf16.type = GemmOperandType::kBF16;
  bf16.k = bf16.lda = 3 * p.k;
  const bool amx = GemmImplementation(bf16).find("amx") != std::string::npos;
  EXPECT_EQ(GemmImplementation(p).rfind(amx ? "f16->bf16x3" : "f16->f32", 0),
            0u)
      << GemmImplementation(p);
  // Few rows stream B: f32 (B's tripled bf16 copy is larger).
  p.m = 16;
  EXPECT_EQ(GemmImplementation(p).rfind("f16->f32", 0), 0u)
      << GemmImplementation(p);
}

// A half whose low 3 significand bits are 011: hi rounds down, so lo is
// about +3 ulp (a relative 2^-9 to 2^-8 of x), the same sign as x: a
// product that loses any lo term is off by that much, not by noise.
uint16_t HalfWithLowPart(std::mt19937& rng, bool negative) {
  std::uniform_int_distribution<int> exponent(10, 16), high(0, 127);
  return static_cast<uint16_t>(negative << 15 | exponent(rng) << 10 |
                               high(rng) << 3 | 0x3);
}

// bf16x3 against a double-precision reference: every element within
// f32-GEMM-like error, |c - ref| <= 4 * 2^-16 * sum_l |a_il b_lj| (the
// dropped Al*Bl is at most ~2^-16.8 of it here, f32 accumulation of 3k
// terms adds less); dropping any of the three products, or splitting
// wrongly, is off by ~2^-9 of it. Positive operands (every lo adds up) and
// mixed signs; plain, transposed, batched and column-blocked; B also as a
// packed weight. Prints the largest error seen, in units of 2^-16.
TEST_F(OnednnGemmTest, Bf16x3IsWithinF32GemmError) {
  std::mt19937 rng(5);
  double worst = 0;
  int64_t weights = 0;  // a content address per weight
  for (F16GemmRoute route :
       {F16GemmRoute::kBf16x3, F16GemmRoute::kWidenedF32}) {
    ForcedRoute forced(route);
    for (bool mixed_signs : {false, true}) {
      for (auto [trans_b, batch, m, n, k] :
           {std::tuple{false, 1, 33, 47, 256}, {true, 1, 20, 70, 1024},
            {false, 2, 9, 16, 100}, {true, 1, 3, 400, 77}}) {
        GemmProblem p;
        p.type = GemmOperandType::kF16;
        p.trans_b = trans_b;
        p.accumulate = false;
        p.batch = batch;
        p.m = m;
        p.n = n;
        p.k = k;
        p.lda = k;
        p.ldb = trans_b ? k : n;
        p.ldc = n;
        if (batch > 1) {
          p.stride_a = m * k;
          p.stride_b = k * n;
          p.stride_c = m * n;
        }
        std::bernoulli_distribution sign(mixed_signs ? 0.5 : 0.0);
        std::vector<uint16_t> a(batch * m * k), b(batch * k * n);
        for (uint16_t& x : a) x = HalfWithLowPart(rng, sign(rng));
        for (uint16_t& x : b) x = HalfWithLowPart(rng, sign(rng));
        auto at_b = [&](int64_t bt, int64_t l, int64_t j) {
          return HalfValue(b[bt * p.stride_b +
                             (trans_b ? j * p.ldb + l : l * p.ldb + j)]);
        };
        // As a plain operand, then as a weight (packed at the 2nd use).
        runtime::BufferView b_view;
        b_view.data = b.data();
        b_view.dtype = DType::kFloat16;
        b_view.sizes = {static_cast<int64_t>(b.size())};
        b_view.strides = {1};
        b_view.content_address = 0x7000000 + 0x100000 * ++weights;
        b_view.content_version = 1;
        std::vector<runtime::BufferView> args = {b_view};
        std::vector<void*> data = {b.data()};
        for (int call = 0; call < 4; ++call) {
          std::optional<InputContentScope> scope;
          if (call > 0 && batch == 1) scope.emplace(args, data, 1);
          for (int64_t blocks : {1, 3}) {
            std::vector<float> c(batch * m * n, -1.0f);
            for (int64_t block = 0; block < blocks; ++block) {
              RunGemmBlock(p, a.data(), b.data(), c.data(), nullptr, block,
                           blocks);
            }
            for (int64_t bt = 0; bt < batch; ++bt) {
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) {
                  double want = 0, magnitude = 0;
                  for (int64_t l = 0; l < k; ++l) {
                    const double product =
                        static_cast<double>(
                            HalfValue(a[bt * p.stride_a + i * k + l])) *
                        at_b(bt, l, j);
                    want += product;
                    magnitude += std::fabs(product);
                  }
                  const double error =
                      std::fabs(c[bt * p.stride_c + i * n + j] - want) /
                      (magnitude * 0x1p-16);
                  worst = std::max(worst, error);
                  ASSERT_LE(error, 4.0)
                      << Describe(p) << " mixed signs " << mixed_signs
                      << " call " << call << " blocks " << blocks << " at "
                      << bt << "," << i << "," << j;
                }
              }
            }
          }
        }
      }
    }
    std::printf("route %d: largest |c - ref| / (2^-16 sum|a b|) = %.3f\n",
                static_cast<int>(route), worst);
    worst = 0;
  }
}

// A float16 weight on the bf16x3 route is split once and packed as Bh and
// Bl: two bf16 copies, the bytes of its f32 widening rather than the three
// of [Bh ; Bh ; Bl]. Column chunks run as [Ah ; Al] x Bh, then Ah x Bl
// summed into it; every element stays within the bf16x3 error bound of the
// exact product. Covered: several chunks and a partial one, column blocks
// (C with gaps), accumulation into C, and a bias + ReLU epilogue.
TEST_F(OnednnGemmTest, F16WeightsArePackedAsTwoBf16Copies) {
  ForcedRoute forced(F16GemmRoute::kBf16x3);
  GemmProblem bf16;
  bf16.type = GemmOperandType::kBF16;
  bf16.m = bf16.n = bf16.k = bf16.lda = bf16.ldb = bf16.ldc = 64;
  const bool amx = GemmImplementation(bf16).find("amx") != std::string::npos;
  std::mt19937 rng(11);
  std::bernoulli_distribution sign(0.5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  int64_t address = 0xa000000;
  for (bool trans_b : {false, true}) {
    for (int mode = 0; mode < 3; ++mode) {  // overwrite, accumulate, epilogue
      GemmProblem p;
      p.type = GemmOperandType::kF16;
      p.trans_b = trans_b;
      p.accumulate = mode == 1;
      p.m = 300;  // 64-column chunks
      p.n = 400;
      p.k = 96;
      p.lda = p.k;
      p.ldb = trans_b ? p.k : p.n;
      p.ldc = p.n;
      if (mode == 2) {
        p.epilogue.bias_row = 0;
        p.epilogue.ops.push_back({false, static_cast<int64_t>(EltwiseFn::kRelu)});
      }
      std::vector<uint16_t> a(p.m * p.k), b(p.k * p.n);
      for (uint16_t& x : a) x = HalfWithLowPart(rng, sign(rng));
      for (uint16_t& x : b) x = HalfWithLowPart(rng, sign(rng));
      std::vector<float> c0(p.m * p.n), sides(p.n);
      for (float& x : c0) x = 64 * dist(rng);
      for (float& x : sides) x = 64 * dist(rng);
      std::vector<double> product(p.m * p.n), magnitude(p.m * p.n);
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) {
          for (int64_t l = 0; l < p.k; ++l) {
            const double ab =
                static_cast<double>(HalfValue(a[i * p.k + l])) *
                HalfValue(b[trans_b ? j * p.ldb + l : l * p.ldb + j]);
            product[i * p.n + j] += ab;
            magnitude[i * p.n + j] += std::fabs(ab);
          }
        }
      }
      runtime::BufferView b_view;
      b_view.data = b.data();
      b_view.dtype = DType::kFloat16;
      b_view.sizes = {static_cast<int64_t>(b.size())};
      b_view.strides = {1};
      b_view.content_address = address += 0x100000;
      b_view.content_version = 1;
      std::vector<runtime::BufferView> args = {b_view};
      std::vector<void*> data = {b.data()};
      InputContentScope scope(args, data, 1);
      for (int call = 0; call < 3; ++call) {  // packed at the second
        for (int64_t blocks : {1, 3}) {
          std::vector<float> c = c0;
          const uint64_t packed_before = PackedWeightCache::Global().bytes();
          for (int64_t block = 0; block < blocks; ++block) {
            RunGemmBlock(p, a.data(), b.data(), c.data(), sides.data(), block,
                         blocks);
          }
          if (amx && call == 1 && blocks == 1) {
            const uint64_t packed =
                PackedWeightCache::Global().bytes() - packed_before;
            const uint64_t copy = p.k * p.n * sizeof(uint16_t);
            EXPECT_GE(packed, 2 * copy) << Describe(p);
            EXPECT_LT(packed, 3 * copy) << Describe(p);
          }
          for (int64_t i = 0; i < p.m; ++i) {
            for (int64_t j = 0; j < p.n; ++j) {
              const int64_t at = i * p.n + j;
              double want = product[at] + (p.accumulate ? c0[at] : 0.0);
              if (mode == 2) {
                want = p.epilogue.Apply(static_cast<float>(want),
                                        sides.data(), p.n, j);
              }
              const double bound = 4 * 0x1p-16 * magnitude[at] +
                                   0x1p-22 * (std::fabs(want) + 64);
              ASSERT_NEAR(c[at], want, bound)
                  << Describe(p) << " call " << call << " blocks " << blocks
                  << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

// An infinity in A or B gives what the f32 route gives (inf, or NaN from
// inf - inf), not the NaN that inf * 0 in the cross terms would make.
TEST_F(OnednnGemmTest, Bf16x3KeepsInfinities) {
  ForcedRoute forced(F16GemmRoute::kBf16x3);
  for (bool trans_b : {false, true}) {
    for (bool in_a : {false, true}) {
      GemmProblem p;
      p.type = GemmOperandType::kF16;
      p.trans_b = trans_b;
      p.accumulate = false;
      p.m = 4;
      p.n = 40;
      p.k = 8;
      p.lda = p.k;
      p.ldb = trans_b ? p.k : p.n;
      p.ldc = p.n;
      // Ones (lo = 0: inf * lo would be NaN) and one infinity.
      std::vector<uint16_t> a(p.m * p.k, 0x3c00), b(p.k * p.n, 0x3c00);
      if (in_a) {
        a[1 * p.k + 2] = 0x7c00;  // A[1][2] = inf: row 1 of C is inf
      } else {
        b[trans_b ? 5 * p.ldb + 2 : 2 * p.ldb + 5] = 0x7c00;  // column 5
      }
      // B also as a weight, packed from its second use on.
      runtime::BufferView b_view;
      b_view.data = b.data();
      b_view.dtype = DType::kFloat16;
      b_view.sizes = {static_cast<int64_t>(b.size())};
      b_view.strides = {1};
      b_view.content_address = 0x9000000 + 0x100000 * (2 * trans_b + in_a);
      b_view.content_version = 1;
      std::vector<runtime::BufferView> args = {b_view};
      std::vector<void*> data = {b.data()};
      for (int call = 0; call < 4; ++call) {
        std::optional<InputContentScope> scope;
        if (call > 0) scope.emplace(args, data, 1);
        for (int64_t blocks : {1, 2}) {
          std::vector<float> c(p.m * p.n, 0.0f);
          for (int64_t block = 0; block < blocks; ++block) {
            RunGemmBlock(p, a.data(), b.data(), c.data(), nullptr, block,
                         blocks);
          }
          for (int64_t i = 0; i < p.m; ++i) {
            for (int64_t j = 0; j < p.n; ++j) {
              const bool infinite = in_a ? i == 1 : j == 5;
              const float want = infinite
                                     ? std::numeric_limits<float>::infinity()
                                     : static_cast<float>(p.k);
              ASSERT_EQ(c[i * p.n + j], want)
                  << "trans_b " << trans_b << " in_a " << in_a << " call "
                  << call << " blocks " << blocks << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST(F16GemmRouteTest, ReadsTheEnvironment) {
  unsetenv("RBLN_COMPILER_F16_GEMM");
  EXPECT_EQ(*F16GemmRouteFromEnv(), F16GemmRoute::kAuto);
  setenv("RBLN_COMPILER_F16_GEMM", "F32", 1);
  EXPECT_EQ(*F16GemmRouteFromEnv(), F16GemmRoute::kWidenedF32);
  setenv("RBLN_COMPILER_F16_GEMM", "bf16x3", 1);
  EXPECT_EQ(*F16GemmRouteFromEnv(), F16GemmRoute::kBf16x3);
  setenv("RBLN_COMPILER_F16_GEMM", "fast", 1);
  absl::StatusOr<F16GemmRoute> bad = F16GemmRouteFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("RBLN_COMPILER_F16_GEMM"),
            std::string::npos)
      << bad.status();
  unsetenv("RBLN_COMPILER_F16_GEMM");
}

TEST_F(OnednnGemmTest, DescribesTheLibrary) {
  const std::string text = OnednnDescription();
  EXPECT_NE(text.find("oneDNN "), std::string::npos) << text;
}

}  // namespace
}  // namespace rbln::compiler

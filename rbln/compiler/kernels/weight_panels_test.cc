// spec: P5
#include "rbln/compiler/kernels/weight_panels.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "rbln/compiler/kernels/onednn_library.h"

namespace rbln::compiler {
namespace {

struct Shape {
  int64_t k, n, ldb;
};

// Odd and padded k and n, rows of B with gaps, a tile-sized k.
const Shape kShapes[] = {{64, 128, 64}, {48, 100, 50}, {33, 70, 40},
                         {7, 3, 7},     {256, 64, 264}, {2048, 192, 2048}};

std::vector<char> RandomB(const WeightPanels& p, uint32_t seed) {
  std::vector<char> b(p.n * p.ldb * p.element_bytes);
  std::mt19937 rng(seed);
  for (char& c : b) c = static_cast<char>(rng());
  return b;
}

std::vector<char> Pack(const WeightPanels& p, const std::vector<char>& b) {
  std::vector<char> out(p.PackedBytes(), 0x5a);
  EXPECT_TRUE(PackWeightPanels(p, b.data(), out.data()));
  return out;
}

std::string Name(const WeightPanels& p) {
  return absl::StrFormat("k %d n %d ldb %d, %d-byte elements, width %d", p.k,
                         p.n, p.ldb, p.element_bytes, p.width);
}

// The layouts as oneDNN's tags name them: BA16a<W>b2a (bf16) and
// BA16a<W>b (f32) over op(B) [k, n], zeros in the padding.
TEST(WeightPanelsTest, PlacesEveryElementWhereTheLayoutSays) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    for (int64_t bytes : {2, 4}) {
      for (int64_t width : {16, 32, 64}) {
        const WeightPanels p{s.k, s.n, s.ldb, bytes, width};
        const std::vector<char> b = RandomB(p, seed++);
        const std::vector<char> got = Pack(p, b);
        // k in blocks of 16 (f32) or 16 pairs (bf16: "16a..2a").
        const int64_t pair = bytes == 2 ? 2 : 1;
        const int64_t rows = 16 * pair;
        const int64_t kp = (p.k + rows - 1) / rows * rows;
        const int64_t np = (p.n + width - 1) / width * width;
        ASSERT_EQ(p.PackedBytes(), kp * np * bytes) << Name(p);
        for (int64_t n = 0; n < np; ++n) {
          for (int64_t k = 0; k < kp; ++k) {
            const int64_t block = (n / width) * (kp / rows) + k / rows;
            const int64_t inner = ((k % rows) / pair * width + n % width) * pair + k % pair;
            const char* at = got.data() + (block * rows * width + inner) * bytes;
            std::vector<char> want(bytes, 0);
            if (n < p.n && k < p.k) {
              std::memcpy(want.data(), b.data() + (n * p.ldb + k) * bytes, bytes);
            }
            ASSERT_EQ(std::memcmp(at, want.data(), bytes), 0)
                << Name(p) << " at k " << k << " n " << n;
          }
        }
      }
    }
  }
}

TEST(WeightPanelsTest, RefusesLayoutsItDoesNotKnow) {
  char b[64] = {}, out[4096];
  EXPECT_FALSE(PackWeightPanels({4, 4, 4, 2, 48}, b, out));
  EXPECT_FALSE(PackWeightPanels({4, 4, 4, 1, 16}, b, out));
  EXPECT_FALSE(PackWeightPanels({4, 4, 3, 2, 16}, b, out));
}

// The bytes oneDNN's own reorder writes for the layouts brgemm takes
// (onednn_gemm_plan.cc's PackedLayouts).
TEST(WeightPanelsTest, WritesTheBytesOfOnednnsReorder) {
  if (!LoadOnednn()) GTEST_SKIP() << OnednnVersion();
  const onednn::Api& d = onednn::Library();
  onednn::ThisThread(d);  // the stream Execute runs on
  struct Layout {
    int64_t bytes, width;
    dnnl_format_tag_t tag;
  };
  const Layout layouts[] = {{2, 64, dnnl_BA16a64b2a}, {2, 32, dnnl_BA16a32b2a},
                            {2, 16, dnnl_BA16a16b2a}, {4, 64, dnnl_BA16a64b},
                            {4, 32, dnnl_BA16a32b},   {4, 16, dnnl_BA16a16b}};
  uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    for (const Layout& l : layouts) {
      const WeightPanels p{s.k, s.n, s.ldb, l.bytes, l.width};
      const dnnl_data_type_t type = l.bytes == 2 ? dnnl_bf16 : dnnl_f32;
      // Finite values only: a reorder may canonicalize NaN payloads.
      std::vector<char> b(p.n * p.ldb * p.element_bytes);
      std::mt19937 rng(seed++);
      std::uniform_real_distribution<float> value(-2, 2);
      for (int64_t i = 0; i < p.n * p.ldb; ++i) {
        const float v = value(rng);
        std::memcpy(b.data() + i * l.bytes,
                    reinterpret_cast<const char*>(&v) + (l.bytes == 2 ? 2 : 0),
                    l.bytes);
      }
      dnnl_memory_desc_t plain, packed;
      dnnl_dims_t dims = {p.k, p.n}, strides = {1, p.ldb};
      onednn::Check(d.memory_desc_init_by_strides(&plain, 2, dims, type, strides),
                    "plain");
      onednn::Check(d.memory_desc_init_by_tag(&packed, 2, dims, type, l.tag), "packed");
      ASSERT_EQ(static_cast<int64_t>(d.memory_desc_get_size(&packed)), p.PackedBytes())
          << Name(p);
      std::vector<char> want(p.PackedBytes(), 0x5a);
      dnnl_primitive_desc_t pd = nullptr;
      dnnl_primitive_t reorder = nullptr;
      onednn::Check(d.reorder_primitive_desc_create(&pd, &plain, d.engine, &packed,
                                                    d.engine, nullptr),
                    "reorder");
      onednn::Check(d.primitive_create(&reorder, pd), "reorder primitive");
      d.primitive_desc_destroy(pd);
      {
        onednn::Memory from(d, plain, b.data()), to(d, packed, want.data());
        onednn::Execute(d, reorder, {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}},
                        "reorder");
      }
      d.primitive_destroy(reorder);
      const std::vector<char> got = Pack(p, b);
      ASSERT_EQ(got, want) << Name(p);
    }
  }
}

}  // namespace
}  // namespace rbln::compiler

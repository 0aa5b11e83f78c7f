#include "rbln/compiler/kernels/mxfp4_grouped_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "rbln/compiler/kernels/grouped_gemm.h"
#include "rbln/compiler/kernels/half_convert.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/compiler/kernels/onednn_library.h"

namespace rbln::compiler {
namespace {

// e2m1 values by nibble, and doubled (integers: the byte-shuffle table).
constexpr float kFp4[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
constexpr int8_t kFp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(s - 127) from the e8m0 byte, by its exponent bits (s = 0 gives 0).
float Scale(uint8_t s) {
  const uint32_t bits = static_cast<uint32_t>(s) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t Bf16Bits(float f) {  // exact for dequantized values (<= 3 significant bits)
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

// Per-thread buffers (rows of A in f32, dequantized W rows).
std::vector<float>& Scratch(int slot, size_t elements) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& v = buffers[slot];
  if (v.size() < elements) v.resize(elements);
  return v;
}

// The group's rows of A as f32, k floats a row.
const float* RowsAsF32(const Mxfp4GroupedGemmProblem& p, const void* a, int64_t begin,
                       int64_t rows) {
  std::vector<float>& out = Scratch(0, rows * p.k);
  if (p.type == GemmOperandType::kF32) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(out.data() + r * p.k, static_cast<const float*>(a) + (begin + r) * p.lda,
                  p.k * sizeof(float));
    }
  } else {
    Bf16ToFloat(static_cast<const uint16_t*>(a) + begin * p.lda, rows, p.k, p.lda, out.data(),
                p.k);
  }
  return out.data();
}

// C[rows, cols [first, last)] of a small group, portable loops: per 32-value
// chunk of a W row its dot product with each A row (integers of doubled e2m1
// times A, summed in order), then times half the chunk's scale.
void GemvPortable(const float* a, int64_t rows, int64_t k, const uint8_t* w_blocks,
                  const uint8_t* w_scales, int64_t first, int64_t last, float* c,
                  int64_t ldc) {
  const int64_t chunks = k / kMxfp4BlockValues;
  float acc[kMxfp4GemvMaxRows];
  float w[kMxfp4BlockValues];
  for (int64_t col = first; col < last; ++col) {
    const uint8_t* blk = w_blocks + col * (k / 2);
    const uint8_t* sc = w_scales + col * chunks;
    std::fill(acc, acc + rows, 0.0f);
    for (int64_t ch = 0; ch < chunks; ++ch) {
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = blk[ch * 16 + j];
        w[2 * j] = kFp4Doubled[byte & 15];
        w[2 * j + 1] = kFp4Doubled[byte >> 4];
      }
      const float half_scale = Scale(sc[ch]) * 0.5f;
      for (int64_t r = 0; r < rows; ++r) {
        const float* ar = a + r * k + ch * kMxfp4BlockValues;
        float t = 0.0f;
        for (int j = 0; j < kMxfp4BlockValues; ++j) t += w[j] * ar[j];
        acc[r] += t * half_scale;
      }
    }
    for (int64_t r = 0; r < rows; ++r) c[r * ldc + col] = acc[r];
  }
}

#define RBLN_AVX2 __attribute__((target("avx2,fma")))

// Lanes 0..7 added in a fixed tree.
RBLN_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

// As GemvPortable, 32 values a step: the 16 bytes' nibbles shuffled through
// the doubled table into int8, interleaved back into order, widened to four
// float vectors; per A row the chunk's lane sums are scaled into the row's
// lane accumulator (summed across lanes once, at the end). `Rows` is a
// template argument so the accumulators stay in registers (in an array
// indexed at run time they went through memory every chunk: 2x slower).
template <int Rows>
RBLN_AVX2 void GemvAvx2Rows(const float* a, int64_t k, const uint8_t* w_blocks,
                            const uint8_t* w_scales, int64_t first, int64_t last, float* c,
                            int64_t ldc) {
  const int64_t chunks = k / kMxfp4BlockValues;
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4Doubled));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t col = first; col < last; ++col) {
    const uint8_t* blk = w_blocks + col * (k / 2);
    const uint8_t* sc = w_scales + col * chunks;
    __m256 acc[Rows];
    for (int r = 0; r < Rows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + ch * 16));
      const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(bytes, low4));
      const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
      const __m128i v0 = _mm_unpacklo_epi8(lo, hi);  // values 0..15
      const __m128i v1 = _mm_unpackhi_epi8(lo, hi);  // values 16..31
      const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v0));
      const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v0, 8)));
      const __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v1));
      const __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v1, 8)));
      const __m256 half_scale = _mm256_set1_ps(Scale(sc[ch]) * 0.5f);
      for (int r = 0; r < Rows; ++r) {
        const float* ar = a + r * k + ch * kMxfp4BlockValues;
        __m256 t = _mm256_mul_ps(w0, _mm256_loadu_ps(ar));
        t = _mm256_fmadd_ps(w1, _mm256_loadu_ps(ar + 8), t);
        t = _mm256_fmadd_ps(w2, _mm256_loadu_ps(ar + 16), t);
        t = _mm256_fmadd_ps(w3, _mm256_loadu_ps(ar + 24), t);
        acc[r] = _mm256_fmadd_ps(t, half_scale, acc[r]);
      }
    }
    for (int r = 0; r < Rows; ++r) c[r * ldc + col] = HorizontalSum(acc[r]);
  }
}

void GemvAvx2(const float* a, int64_t rows, int64_t k, const uint8_t* w_blocks,
              const uint8_t* w_scales, int64_t first, int64_t last, float* c, int64_t ldc) {
  static_assert(kMxfp4GemvMaxRows <= 8, "one instance per row count");
  using Fn = void (*)(const float*, int64_t, const uint8_t*, const uint8_t*, int64_t, int64_t,
                      float*, int64_t);
  static constexpr Fn kByRows[] = {GemvAvx2Rows<1>, GemvAvx2Rows<2>, GemvAvx2Rows<3>,
                                   GemvAvx2Rows<4>, GemvAvx2Rows<5>, GemvAvx2Rows<6>,
                                   GemvAvx2Rows<7>, GemvAvx2Rows<8>};
  kByRows[rows - 1](a, k, w_blocks, w_scales, first, last, c, ldc);
}

// `chunks` chunks of 32 values (blocks and scales consecutive) as f32 or
// bf16 (`Out`), exactly: decoded as in GemvAvx2Rows and scaled; bf16 keeps
// the float's top half. (A nibble of -0 gives +0: the same products.)
template <typename Out>
RBLN_AVX2 void DequantizeAvx2(const uint8_t* blocks, const uint8_t* scales, int64_t chunks,
                              Out* out) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4Doubled));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + ch * 16));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(bytes, low4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
    const __m128i v[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};
    const __m256 half_scale = _mm256_set1_ps(Scale(scales[ch]) * 0.5f);
    for (int h = 0; h < 2; ++h) {
      const __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v[h])), half_scale);
      const __m256 f1 = _mm256_mul_ps(
          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v[h], 8))), half_scale);
      Out* dst = out + ch * 32 + h * 16;
      if constexpr (sizeof(Out) == 4) {
        _mm256_storeu_ps(reinterpret_cast<float*>(dst), f0);
        _mm256_storeu_ps(reinterpret_cast<float*>(dst) + 8, f1);
      } else {
        // The top 16 bits of each float, in order (packus works per 128-bit
        // lane: the 64-bit quarters are put back in order after it).
        const __m256i packed = _mm256_packus_epi32(
            _mm256_srli_epi32(_mm256_castps_si256(f0), 16),
            _mm256_srli_epi32(_mm256_castps_si256(f1), 16));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                            _mm256_permute4x64_epi64(packed, 0xD8));
      }
    }
  }
}

// A large group: W's rows [first, last) dequantized into A's type, then
// one oneDNN GEMM (C = A x W^T on those columns).
// On a CPU where oneDNN has no bf16 kernels (onednn_gemm.h: they would
// run on f32 copies of both operands) a bf16 group runs in f32: A's rows
// widened here, W dequantized straight to f32.
void GroupGemm(const Mxfp4GroupedGemmProblem& p, const void* a, int64_t begin, int64_t rows,
               const uint8_t* w_blocks, const uint8_t* w_scales, int64_t first, int64_t last,
               float* c, Mxfp4Isa isa) {
  const int64_t cols = last - first;
  const int64_t chunks = cols * p.k / kMxfp4BlockValues;
  const uint8_t* blk = w_blocks + first * (p.k / 2);
  const uint8_t* sc = w_scales + first * (p.k / kMxfp4BlockValues);
  GemmOperandType type = p.type;
  int64_t lda = p.lda;
  const int64_t a_bytes = type == GemmOperandType::kF32 ? 4 : 2;
  const void* a_rows = static_cast<const char*>(a) + begin * p.lda * a_bytes;
  if (type == GemmOperandType::kBF16 && !onednn::HasBf16(onednn::Library())) {
    type = GemmOperandType::kF32;
    a_rows = RowsAsF32(p, a, begin, rows);
    lda = p.k;
  }
  const void* b;
  if (type == GemmOperandType::kBF16) {
    thread_local std::vector<uint16_t> half;
    if (half.size() < static_cast<size_t>(cols * p.k)) half.resize(cols * p.k);
    if (isa == Mxfp4Isa::kAvx2) {
      DequantizeAvx2(blk, sc, chunks, half.data());
    } else {
      std::vector<float>& w = Scratch(1, cols * p.k);
      DequantizeMxfp4Rows(blk, sc, cols, p.k, w.data());
      for (int64_t i = 0; i < cols * p.k; ++i) half[i] = Bf16Bits(w[i]);
    }
    b = half.data();
  } else {
    std::vector<float>& w = Scratch(1, cols * p.k);
    if (isa == Mxfp4Isa::kAvx2) {
      DequantizeAvx2(blk, sc, chunks, w.data());
    } else {
      DequantizeMxfp4Rows(blk, sc, cols, p.k, w.data());
    }
    b = w.data();
  }
  GemmProblem q;
  q.type = type;
  q.trans_b = true;
  q.accumulate = false;
  q.m = rows;
  q.n = cols;
  q.k = p.k;
  q.lda = lda;
  q.ldb = p.k;
  q.ldc = p.ldc;
  RunGemmBlock(q, a_rows, b, c + begin * p.ldc + first, nullptr, 0, 1);
}

}  // namespace

Mxfp4Isa BestMxfp4Isa() {
  static const Mxfp4Isa best = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Mxfp4Isa::kAvx2
                                                                           : Mxfp4Isa::kPortable;
  }();
  return best;
}

void DequantizeMxfp4Rows(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t k,
                         float* out) {
  const int64_t chunks = k / kMxfp4BlockValues;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const float s = Scale(scales[r * chunks + ch]);
      const uint8_t* blk = blocks + r * (k / 2) + ch * 16;
      float* dst = out + r * k + ch * kMxfp4BlockValues;
      for (int j = 0; j < 16; ++j) {
        dst[2 * j] = kFp4[blk[j] & 15] * s;
        dst[2 * j + 1] = kFp4[blk[j] >> 4] * s;
      }
    }
  }
}

void RunMxfp4GroupedGemmBlock(const Mxfp4GroupedGemmProblem& p, const void* a,
                              const uint8_t* w_blocks, const uint8_t* w_scales,
                              const void* offsets, float* c, int64_t block, int64_t blocks,
                              Mxfp4Isa isa) {
  if (p.k <= 0 || p.k % kMxfp4BlockValues != 0) return;
  const auto [first, last] = GroupedGemmColumns(p.n, block, blocks);
  if (first >= last) return;
  const std::vector<std::pair<int64_t, int64_t>> rows =
      GroupRows(offsets, p.offsets_i64, p.groups, p.m);
  for (int64_t g = 0; g < p.groups; ++g) {
    const auto [begin, end] = rows[g];
    if (begin >= end) continue;
    const uint8_t* gb = w_blocks + g * p.n * (p.k / 2);
    const uint8_t* gs = w_scales + g * p.n * (p.k / kMxfp4BlockValues);
    if (end - begin > kMxfp4GemvMaxRows) {
      GroupGemm(p, a, begin, end - begin, gb, gs, first, last, c, isa);
      continue;
    }
    const float* af = RowsAsF32(p, a, begin, end - begin);
    float* cg = c + begin * p.ldc;
    if (isa == Mxfp4Isa::kAvx2) {
      GemvAvx2(af, end - begin, p.k, gb, gs, first, last, cg, p.ldc);
    } else {
      GemvPortable(af, end - begin, p.k, gb, gs, first, last, cg, p.ldc);
    }
  }
}

}  // namespace rbln::compiler

extern "C" void rbln_grouped_gemm_mxfp4(int64_t type, int64_t offsets_i64, int64_t groups,
                                        int64_t m, int64_t n, int64_t k, int64_t lda,
                                        int64_t ldc, int64_t a, int64_t w_blocks,
                                        int64_t w_scales, int64_t offsets, int64_t c,
                                        int64_t block, int64_t blocks) {
  rbln::compiler::Mxfp4GroupedGemmProblem p;
  p.type = static_cast<rbln::compiler::GemmOperandType>(type);
  p.offsets_i64 = offsets_i64 != 0;
  p.groups = groups;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldc = ldc;
  rbln::compiler::RunMxfp4GroupedGemmBlock(
      p, reinterpret_cast<const void*>(a), reinterpret_cast<const uint8_t*>(w_blocks),
      reinterpret_cast<const uint8_t*>(w_scales), reinterpret_cast<const void*>(offsets),
      reinterpret_cast<float*>(c), block, blocks);
}

#include "rbln/compiler/kernels/bf16_split.h"

#include <immintrin.h>

#include <cstring>

#include "rbln/compiler/kernels/half_convert.h"

namespace rbln::compiler {
namespace {

constexpr uint32_t kExponentMask = 0x7f800000u;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float Value(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool RowScalar(const uint16_t* src, int64_t n, uint16_t* hi, uint16_t* hi2,
               uint16_t* lo) {
  bool finite = true;
  for (int64_t j = 0; j < n; ++j) {
    finite &= SplitHalf(src[j], &hi[j], &lo[j]);
    hi2[j] = hi[j];
  }
  return finite;
}

// SplitHalf on 16 halves: the same integer rounding and f32 subtraction,
// so the same bits. The mask marks infinities and NaNs.
__attribute__((target("avx512f,avx,f16c"))) inline __mmask16 SplitVector(
    __m256i h, __m256i* hi, __m256i* lo) {
  const __m512i exponent = _mm512_set1_epi32(kExponentMask);
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512 x = _mm512_cvtph_ps(h);
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 special =
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, exponent), exponent);
  const __m512i odd =
      _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_and_si512(
      _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))),
      top);
  rounded = _mm512_mask_and_epi32(rounded, special, u, top);
  const __m512 rest = _mm512_maskz_sub_ps(static_cast<__mmask16>(~special), x,
                                          _mm512_castsi512_ps(rounded));
  *hi = _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16));
  *lo = _mm512_cvtepi32_epi16(
      _mm512_srli_epi32(_mm512_castps_si512(rest), 16));
  return special;
}

__attribute__((target("avx512f,avx,f16c"))) bool RowAvx512(
    const uint16_t* src, int64_t n, uint16_t* hi, uint16_t* hi2,
    uint16_t* lo) {
  __mmask16 special = 0;
  int64_t j = 0;
  __m256i h, l;
  for (; j + 16 <= n; j += 16) {
    special |= SplitVector(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j)), &h, &l);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + j), h);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi2 + j), h);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + j), l);
  }
  if (j < n) {
    // The tail through a padded copy (no access past the rows); the
    // padding is zeros, which are finite.
    const size_t bytes = (n - j) * sizeof(uint16_t);
    alignas(32) uint16_t in[16] = {}, out_hi[16], out_lo[16];
    std::memcpy(in, src + j, bytes);
    special |= SplitVector(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(in)), &h, &l);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out_hi), h);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out_lo), l);
    std::memcpy(hi + j, out_hi, bytes);
    std::memcpy(hi2 + j, out_hi, bytes);
    std::memcpy(lo + j, out_lo, bytes);
  }
  return special == 0;
}

}  // namespace

SplitIsa BestSplitIsa() {
  static const SplitIsa best = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c")
               ? SplitIsa::kAvx512
               : SplitIsa::kScalar;
  }();
  return best;
}

const char* SplitIsaName(SplitIsa isa) {
  return isa == SplitIsa::kAvx512 ? "avx512" : "scalar";
}

bool SplitHalf(uint16_t bits, uint16_t* hi, uint16_t* lo) {
  const float x = HalfToFloat(bits);
  const uint32_t u = Bits(x);
  if ((u & kExponentMask) == kExponentMask) {
    // Infinity, or a NaN whose quiet bit is in the upper half: both kept.
    *hi = static_cast<uint16_t>(u >> 16);
    *lo = 0;
    return false;
  }
  // Round to nearest, ties to even, on the bits (a finite half is far from
  // f32's overflow, and no carry reaches the sign).
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  // Exact in f32, with at most 3 significant bits: its low half is zero.
  const float rest = x - Value(rounded);
  *hi = static_cast<uint16_t>(rounded >> 16);
  *lo = static_cast<uint16_t>(Bits(rest) >> 16);
  return true;
}

bool SplitHalfRow(const uint16_t* src, int64_t n, uint16_t* hi, uint16_t* hi2,
                  uint16_t* lo, SplitIsa isa) {
  return isa == SplitIsa::kAvx512 ? RowAvx512(src, n, hi, hi2, lo)
                                  : RowScalar(src, n, hi, hi2, lo);
}

bool SplitRowsOfA(const uint16_t* src, int64_t rows, int64_t k, int64_t ld,
                  uint16_t* dst) {
  bool finite = true;
  for (int64_t i = 0; i < rows; ++i) {
    uint16_t* row = dst + i * 3 * k;
    finite &= SplitHalfRow(src + i * ld, k, row, row + 2 * k, row + k);
  }
  return finite;
}

bool SplitRowsOfB(const uint16_t* src, int64_t k, int64_t n, int64_t ld,
                  uint16_t* dst) {
  bool finite = true;
  for (int64_t l = 0; l < k; ++l) {
    finite &= SplitHalfRow(src + l * ld, n, dst + l * n, dst + (k + l) * n,
                           dst + (2 * k + l) * n);
  }
  return finite;
}

bool SplitRowsOfTransposedB(const uint16_t* src, int64_t n, int64_t k,
                            int64_t ld, uint16_t* dst) {
  bool finite = true;
  for (int64_t j = 0; j < n; ++j) {
    uint16_t* row = dst + j * 3 * k;
    finite &= SplitHalfRow(src + j * ld, k, row, row + k, row + 2 * k);
  }
  return finite;
}

}  // namespace rbln::compiler

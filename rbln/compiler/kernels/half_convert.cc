#include "rbln/compiler/kernels/half_convert.h"

#include <immintrin.h>

#include <cstring>

namespace rbln::compiler {
namespace {

void RowScalar(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t j = 0; j < n; ++j) dst[j] = HalfToFloat(src[j]);
}

// Per-function target attributes: the rest of the build stays baseline
// x86-64, and these run only where BestHalfIsa() found the instructions.
__attribute__((target("avx,f16c"))) void RowF16c(const uint16_t* src,
                                                  int64_t n, float* dst) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
    _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(h));
  }
  RowScalar(src + j, n - j, dst + j);
}

__attribute__((target("avx512f,avx,f16c"))) void RowAvx512(const uint16_t* src,
                                                           int64_t n,
                                                           float* dst) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j));
    _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(h));
  }
  if (j < n) {
    // The tail as one masked vector (no read past the row).
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - j)) - 1);
    alignas(32) uint16_t tail[16] = {};
    std::memcpy(tail, src + j, (n - j) * sizeof(uint16_t));
    const __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    _mm512_mask_storeu_ps(dst + j, mask, _mm512_cvtph_ps(h));
  }
}

using RowFn = void (*)(const uint16_t*, int64_t, float*);

void Bf16RowScalar(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t u = static_cast<uint32_t>(src[j]) << 16;
    std::memcpy(dst + j, &u, 4);
  }
}

__attribute__((target("avx2"))) void Bf16RowAvx2(const uint16_t* src,
                                                 int64_t n, float* dst) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
    const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + j, _mm256_castsi256_ps(u));
  }
  Bf16RowScalar(src + j, n - j, dst + j);
}

RowFn RowFor(HalfIsa isa) {
  switch (isa) {
    case HalfIsa::kAvx512:
      return RowAvx512;
    case HalfIsa::kF16c:
      return RowF16c;
    case HalfIsa::kScalar:
      break;
  }
  return RowScalar;
}

}  // namespace

HalfIsa BestHalfIsa() {
  static const HalfIsa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c")) {
      return HalfIsa::kAvx512;
    }
    if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) {
      return HalfIsa::kF16c;
    }
    return HalfIsa::kScalar;
  }();
  return best;
}

const char* HalfIsaName(HalfIsa isa) {
  switch (isa) {
    case HalfIsa::kAvx512:
      return "avx512";
    case HalfIsa::kF16c:
      return "f16c";
    case HalfIsa::kScalar:
      break;
  }
  return "scalar";
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  uint32_t u;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&u, &magnitude, 4);
    u |= sign;
  } else if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x00400000u : 0);
  } else {
    u = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void HalfToFloat(const uint16_t* src, int64_t rows, int64_t cols,
                 int64_t ld_src, float* dst, int64_t ld_dst, HalfIsa isa) {
  const RowFn row = RowFor(isa);
  if (ld_src == cols && ld_dst == cols) {  // one contiguous run
    row(src, rows * cols, dst);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) row(src + i * ld_src, cols, dst + i * ld_dst);
}

void HalfToFloat(const uint16_t* src, int64_t rows, int64_t cols,
                 int64_t ld_src, float* dst, int64_t ld_dst) {
  HalfToFloat(src, rows, cols, ld_src, dst, ld_dst, BestHalfIsa());
}

void Bf16ToFloat(const uint16_t* src, int64_t rows, int64_t cols,
                 int64_t ld_src, float* dst, int64_t ld_dst) {
  static const RowFn row = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? Bf16RowAvx2 : Bf16RowScalar;
  }();
  if (ld_src == cols && ld_dst == cols) {
    row(src, rows * cols, dst);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) row(src + i * ld_src, cols, dst + i * ld_dst);
}

}  // namespace rbln::compiler

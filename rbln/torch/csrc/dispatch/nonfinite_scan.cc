#include "rbln/torch/csrc/dispatch/nonfinite_scan.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RBLN_SCAN_X86 1
#else
#define RBLN_SCAN_X86 0
#endif

namespace rbln::torch_backend {
namespace {

// Exponent-all-ones pattern (= infinity's magnitude) per format.
constexpr uint64_t InfBits(FloatFormat format) {
  switch (format) {
    case FloatFormat::kFloat16:
      return 0x7C00;
    case FloatFormat::kBFloat16:
      return 0x7F80;
    case FloatFormat::kFloat32:
      return 0x7F800000u;
    case FloatFormat::kFloat64:
      return 0x7FF0000000000000ull;
  }
  return 0;
}

template <typename Bits>
uint64_t PeakScalar(const void* data, int64_t n) {
  constexpr Bits kMagnitude = static_cast<Bits>(~Bits{0}) >> 1;
  const char* p = static_cast<const char*>(data);
  Bits peak = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits x;
    std::memcpy(&x, p + i * sizeof(Bits), sizeof(Bits));  // Any alignment.
    peak = std::max<Bits>(peak, x & kMagnitude);
  }
  return peak;
}

uint64_t PeakScalarOf(const void* data, int64_t n, FloatFormat format) {
  switch (format) {
    case FloatFormat::kFloat16:
    case FloatFormat::kBFloat16:
      return PeakScalar<uint16_t>(data, n);
    case FloatFormat::kFloat32:
      return PeakScalar<uint32_t>(data, n);
    case FloatFormat::kFloat64:
      return PeakScalar<uint64_t>(data, n);
  }
  return 0;
}

#if RBLN_SCAN_X86

// GCC 12's _mm512_max_epu32 passes _mm512_undefined_epi32() as its unused
// merge source, which -W(maybe-)uninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// 16-bit elements, 4 x 32 per step with independent accumulators; the tail
// (< 32 elements after the unrolled part) through a masked load.
__attribute__((target("avx512f,avx512bw"))) uint64_t Peak16Avx512(const void* data,
                                                                   int64_t n) {
  const auto* p = static_cast<const uint16_t*>(data);
  const __m512i mask = _mm512_set1_epi16(0x7FFF);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm512_max_epu16(a0, _mm512_and_si512(_mm512_loadu_si512(p + i), mask));
    a1 = _mm512_max_epu16(a1, _mm512_and_si512(_mm512_loadu_si512(p + i + 32), mask));
    a2 = _mm512_max_epu16(a2, _mm512_and_si512(_mm512_loadu_si512(p + i + 64), mask));
    a3 = _mm512_max_epu16(a3, _mm512_and_si512(_mm512_loadu_si512(p + i + 96), mask));
  }
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_max_epu16(a0, _mm512_and_si512(_mm512_loadu_si512(p + i), mask));
  }
  if (i < n) {
    const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    a1 = _mm512_max_epu16(a1, _mm512_and_si512(_mm512_maskz_loadu_epi16(tail, p + i), mask));
  }
  a0 = _mm512_max_epu16(_mm512_max_epu16(a0, a1), _mm512_max_epu16(a2, a3));
  alignas(64) uint16_t lanes[32];
  _mm512_store_si512(lanes, a0);
  return *std::max_element(lanes, lanes + 32);
}

__attribute__((target("avx512f"))) uint64_t Peak32Avx512(const void* data, int64_t n) {
  const auto* p = static_cast<const uint32_t*>(data);
  const __m512i mask = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(p + i), mask));
    a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_loadu_si512(p + i + 16), mask));
    a2 = _mm512_max_epu32(a2, _mm512_and_si512(_mm512_loadu_si512(p + i + 32), mask));
    a3 = _mm512_max_epu32(a3, _mm512_and_si512(_mm512_loadu_si512(p + i + 48), mask));
  }
  for (; i + 16 <= n; i += 16) {
    a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(p + i), mask));
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail, p + i), mask));
  }
  a0 = _mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3));
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, a0);
  return *std::max_element(lanes, lanes + 16);
}

// The magnitude bits of 32 unaligned bytes at `p`.
__attribute__((target("avx2"))) inline __m256i Load256(const void* p, __m256i mask) {
  return _mm256_and_si256(_mm256_loadu_si256(static_cast<const __m256i*>(p)), mask);
}

__attribute__((target("avx2"))) uint64_t Peak16Avx2(const void* data, int64_t n) {
  const auto* p = static_cast<const uint16_t*>(data);
  const __m256i mask = _mm256_set1_epi16(0x7FFF);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm256_max_epu16(a0, Load256(p + i, mask));
    a1 = _mm256_max_epu16(a1, Load256(p + i + 16, mask));
    a2 = _mm256_max_epu16(a2, Load256(p + i + 32, mask));
    a3 = _mm256_max_epu16(a3, Load256(p + i + 48, mask));
  }
  for (; i + 16 <= n; i += 16) a0 = _mm256_max_epu16(a0, Load256(p + i, mask));
  a0 = _mm256_max_epu16(_mm256_max_epu16(a0, a1), _mm256_max_epu16(a2, a3));
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
  const uint64_t peak = *std::max_element(lanes, lanes + 16);
  return std::max(peak, PeakScalar<uint16_t>(p + i, n - i));
}

__attribute__((target("avx2"))) uint64_t Peak32Avx2(const void* data, int64_t n) {
  const auto* p = static_cast<const uint32_t*>(data);
  const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_max_epu32(a0, Load256(p + i, mask));
    a1 = _mm256_max_epu32(a1, Load256(p + i + 8, mask));
    a2 = _mm256_max_epu32(a2, Load256(p + i + 16, mask));
    a3 = _mm256_max_epu32(a3, Load256(p + i + 24, mask));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_max_epu32(a0, Load256(p + i, mask));
  a0 = _mm256_max_epu32(_mm256_max_epu32(a0, a1), _mm256_max_epu32(a2, a3));
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
  const uint64_t peak = *std::max_element(lanes, lanes + 8);
  return std::max(peak, PeakScalar<uint32_t>(p + i, n - i));
}

#pragma GCC diagnostic pop

#endif  // RBLN_SCAN_X86

ScanIsa DetectBest() {
#if RBLN_SCAN_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    return ScanIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2")) return ScanIsa::kAvx2;
#endif
  return ScanIsa::kScalar;
}

ScanIsa Best() {
  static const ScanIsa best = DetectBest();
  return best;
}

}  // namespace

bool ScanIsaSupported(ScanIsa isa) {
  switch (isa) {
    case ScanIsa::kBest:
    case ScanIsa::kScalar:
      return true;
    case ScanIsa::kAvx2:
      return Best() == ScanIsa::kAvx2 || Best() == ScanIsa::kAvx512;
    case ScanIsa::kAvx512:
      return Best() == ScanIsa::kAvx512;
  }
  return false;
}

uint64_t PeakMagnitudeBits(const void* data, int64_t n, FloatFormat format, ScanIsa isa) {
  if (n <= 0) return 0;
  if (isa == ScanIsa::kBest) isa = Best();
  const bool half = format == FloatFormat::kFloat16 || format == FloatFormat::kBFloat16;
#if RBLN_SCAN_X86
  if (isa == ScanIsa::kAvx512 && half) return Peak16Avx512(data, n);
  if (isa == ScanIsa::kAvx512 && format == FloatFormat::kFloat32) return Peak32Avx512(data, n);
  if (isa == ScanIsa::kAvx2 && half) return Peak16Avx2(data, n);
  if (isa == ScanIsa::kAvx2 && format == FloatFormat::kFloat32) return Peak32Avx2(data, n);
#endif
  return PeakScalarOf(data, n, format);  // float64, or no vector unit.
}

bool IsNanBits(uint64_t magnitude, FloatFormat format) { return magnitude > InfBits(format); }

bool IsInfBits(uint64_t magnitude, FloatFormat format) { return magnitude == InfBits(format); }

}  // namespace rbln::torch_backend

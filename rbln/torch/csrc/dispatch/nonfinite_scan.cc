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

// The magnitude bits of 64 unaligned bytes at `p`.
__attribute__((target("avx512f"))) inline __m512i Load512(const void* p, __m512i mask) {
  return _mm512_and_si512(_mm512_loadu_si512(p), mask);
}

// The lane-wise unsigned max of 16- or 32-bit lanes.
template <typename Bits>
__attribute__((target("avx512f,avx512bw"))) inline __m512i Max512(__m512i a, __m512i b) {
  if constexpr (sizeof(Bits) == 2) {
    return _mm512_max_epu16(a, b);
  } else {
    return _mm512_max_epu32(a, b);
  }
}

// The first `count` (fewer than a register's) elements at `p`, zeros after.
template <typename Bits>
__attribute__((target("avx512f,avx512bw"))) inline __m512i LoadHead512(const Bits* p,
                                                                      int64_t count) {
  if constexpr (sizeof(Bits) == 2) {
    return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << count) - 1), p);
  } else {
    return _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << count) - 1), p);
  }
}

// 16- or 32-bit elements, 4 registers per step with independent
// accumulators, then one register at a time; the tail through a masked load.
template <typename Bits>
__attribute__((target("avx512f,avx512bw"))) uint64_t PeakAvx512(const void* data, int64_t n) {
  constexpr int64_t kLanes = 64 / sizeof(Bits);
  const auto* p = static_cast<const Bits*>(data);
  // Clears each lane's sign bit: 0x7FFF per 16-bit lane, 0x7FFFFFFF per 32.
  const __m512i mask = _mm512_set1_epi32(sizeof(Bits) == 2 ? 0x7FFF7FFF : 0x7FFFFFFF);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    a0 = Max512<Bits>(a0, Load512(p + i, mask));
    a1 = Max512<Bits>(a1, Load512(p + i + kLanes, mask));
    a2 = Max512<Bits>(a2, Load512(p + i + 2 * kLanes, mask));
    a3 = Max512<Bits>(a3, Load512(p + i + 3 * kLanes, mask));
  }
  for (; i + kLanes <= n; i += kLanes) a0 = Max512<Bits>(a0, Load512(p + i, mask));
  if (i < n) a1 = Max512<Bits>(a1, _mm512_and_si512(LoadHead512(p + i, n - i), mask));
  a0 = Max512<Bits>(Max512<Bits>(a0, a1), Max512<Bits>(a2, a3));
  alignas(64) Bits lanes[kLanes];
  _mm512_store_si512(lanes, a0);
  return *std::max_element(lanes, lanes + kLanes);
}

// The magnitude bits of 32 unaligned bytes at `p`.
__attribute__((target("avx2"))) inline __m256i Load256(const void* p, __m256i mask) {
  return _mm256_and_si256(_mm256_loadu_si256(static_cast<const __m256i*>(p)), mask);
}

// The lane-wise unsigned max of 16- or 32-bit lanes.
template <typename Bits>
__attribute__((target("avx2"))) inline __m256i Max256(__m256i a, __m256i b) {
  if constexpr (sizeof(Bits) == 2) {
    return _mm256_max_epu16(a, b);
  } else {
    return _mm256_max_epu32(a, b);
  }
}

// 16- or 32-bit elements, 4 registers per step with independent
// accumulators, then one register at a time; the tail scalar.
template <typename Bits>
__attribute__((target("avx2"))) uint64_t PeakAvx2(const void* data, int64_t n) {
  constexpr int64_t kLanes = 32 / sizeof(Bits);
  const auto* p = static_cast<const Bits*>(data);
  // Clears each lane's sign bit: 0x7FFF per 16-bit lane, 0x7FFFFFFF per 32.
  const __m256i mask = _mm256_set1_epi32(sizeof(Bits) == 2 ? 0x7FFF7FFF : 0x7FFFFFFF);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    a0 = Max256<Bits>(a0, Load256(p + i, mask));
    a1 = Max256<Bits>(a1, Load256(p + i + kLanes, mask));
    a2 = Max256<Bits>(a2, Load256(p + i + 2 * kLanes, mask));
    a3 = Max256<Bits>(a3, Load256(p + i + 3 * kLanes, mask));
  }
  for (; i + kLanes <= n; i += kLanes) a0 = Max256<Bits>(a0, Load256(p + i, mask));
  a0 = Max256<Bits>(Max256<Bits>(a0, a1), Max256<Bits>(a2, a3));
  alignas(32) Bits lanes[kLanes];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
  const uint64_t peak = *std::max_element(lanes, lanes + kLanes);
  return std::max(peak, PeakScalar<Bits>(p + i, n - i));
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
  const bool f32 = format == FloatFormat::kFloat32;
  if (isa == ScanIsa::kAvx512 && half) return PeakAvx512<uint16_t>(data, n);
  if (isa == ScanIsa::kAvx512 && f32) return PeakAvx512<uint32_t>(data, n);
  if (isa == ScanIsa::kAvx2 && half) return PeakAvx2<uint16_t>(data, n);
  if (isa == ScanIsa::kAvx2 && f32) return PeakAvx2<uint32_t>(data, n);
#endif
  return PeakScalarOf(data, n, format);  // float64, or no vector unit.
}

bool IsNanBits(uint64_t magnitude, FloatFormat format) { return magnitude > InfBits(format); }

bool IsInfBits(uint64_t magnitude, FloatFormat format) { return magnitude == InfBits(format); }

}  // namespace rbln::torch_backend

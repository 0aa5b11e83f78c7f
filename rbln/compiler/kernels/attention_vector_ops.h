// The vector primitives of the attention kernels' f32 online softmax
// (paged_attention.cc, masked_attention.cc): widening a block of keys or
// values to f32, a block's scores, exp and sum, the weighted sum of its
// values, with portable, AVX2+FMA and AVX-512 paths (Ops). Internal to
// those kernels.
#ifndef RBLN_COMPILER_KERNELS_ATTENTION_VECTOR_OPS_H_
#define RBLN_COMPILER_KERNELS_ATTENTION_VECTOR_OPS_H_

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/abi/library_epilogue.h"
#include "rbln/compiler/kernels/half_convert.h"

namespace rbln::compiler::attention_ops {

// `n` values of `type` at `src` as f32 (bf16 and f16 widen exactly);
// `Ops` widens bf16 (the bits shifted into a float's high half).
template <typename Ops>
void Widen(GemmOperandType type, const void* src, int64_t n, float* dst) {
  switch (type) {
    case GemmOperandType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case GemmOperandType::kBF16:
      Ops::WidenBf16(static_cast<const uint16_t*>(src), n, dst);
      return;
    case GemmOperandType::kF16:
      HalfToFloat(static_cast<const uint16_t*>(src), 1, n, n, dst, n);
      return;
  }
}

// c10::Half's rounding of `x` (nearest even; NaN stays NaN), as
// fp16_ieee_from_fp32_value (the FP16 library c10 uses) computes it.
inline uint16_t RoundToHalf(float x) {
  auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
  auto from_bits = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  float base = (std::fabs(x) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = bits(x), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = bits(base);
  const uint32_t nonsign = ((b >> 13) & 0x00007c00u) + (b & 0x00000fffu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

// `n` f32 values stored at `dst` as `type`.
inline void Narrow(GemmOperandType type, const float* src, int64_t n, void* dst) {
  switch (type) {
    case GemmOperandType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case GemmOperandType::kBF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = RoundToBf16(src[i]);
      return;
    case GemmOperandType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = RoundToHalf(src[i]);
      return;
  }
}

inline int64_t ElementBytes(GemmOperandType type) { return type == GemmOperandType::kF32 ? 4 : 2; }

inline int64_t IntAt(const void* data, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(data)[i] : static_cast<const int32_t*>(data)[i];
}

// A block's scores and its values' weighted sum, one key at a time through
// `Ops`'s Dot and Axpy (the portable and AVX-512 paths).
template <typename Ops>
struct PerKeyOps {
  // out[j] = scale * sum(q * keys[j]) for the `count` keys of `d` floats.
  static void Scores(const float* q, const float* keys, int64_t count, int64_t d, float scale,
                     float* out) {
    for (int64_t j = 0; j < count; ++j) out[j] = Ops::Dot(q, keys + j * d, d) * scale;
  }
  // acc += w[j] * values[j] for j in order.
  static void Accumulate(const float* w, const float* values, int64_t count, int64_t d,
                         float* acc) {
    for (int64_t j = 0; j < count; ++j) Ops::Axpy(w[j], values + j * d, acc, d);
  }
};

// The vector primitives of the softmax: sum(a * b), y += alpha * x, y *= alpha.
struct PortableOps : PerKeyOps<PortableOps> {
  static float Dot(const float* a, const float* b, int64_t n) {
    float s[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
    }
    for (; i < n; ++i) s[0] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  }
  static void Axpy(float alpha, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }
  static void Scale(float alpha, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
  }
  static void WidenBf16(const uint16_t* src, int64_t n, float* dst) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
      std::memcpy(&dst[i], &u, 4);
    }
  }
  // s[i] = exp(s[i] - max) for i < n; returns their sum.
  static float ExpSum(float* s, int64_t n, float max) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - max));
    return sum;
  }
};

// The vector paths' exp, exp(x) = 2^k * e^r with k = round(x / ln 2) and
// |r| <= ln 2 / 2 (ln 2 in two parts, so r is exact to ~1e-10); e^r by its
// Taylor polynomial of degree 6, Horner from the top (relative error
// ~1e-7). Arguments below kMinArg (results under FLT_MIN) give 2^-126-ish,
// not 0.
struct ExpConstants {
  static constexpr float kLog2e = 1.44269504f;
  static constexpr float kLn2Hi = 0.693145752f;
  static constexpr float kLn2Lo = 1.42860677e-6f;
  static constexpr float kMinArg = -87.0f;
  static constexpr float kMaxArg = 88.0f;
  static constexpr int kTerms = 7;
  static constexpr float kTaylor[kTerms] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6,
                                            0.5f,       1.0f,       1.0f};
};

#define RBLN_ATTENTION_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

struct Avx512Ops : PerKeyOps<Avx512Ops> {
  RBLN_ATTENTION_AVX512 static __mmask16 Tail(int64_t left) {
    return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
  }
  RBLN_ATTENTION_AVX512 static float Dot(const float* a, const float* b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = Tail(n - i);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                           s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  }
  RBLN_ATTENTION_AVX512 static void Axpy(float alpha, const float* x, float* y, int64_t n) {
    const __m512 a = _mm512_set1_ps(alpha);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = Tail(n - i);
      _mm512_mask_storeu_ps(
          y + i, m, _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m, x + i),
                                    _mm512_maskz_loadu_ps(m, y + i)));
    }
  }
  // acc += w[j] * values[j] for j in order, 64 floats of acc held in
  // registers over all `count` keys (each element's sum in key order, the
  // same arithmetic as Axpy per key, without acc's loads and stores).
  RBLN_ATTENTION_AVX512 static void Accumulate(const float* w, const float* values,
                                               int64_t count, int64_t d, float* acc) {
    int64_t i = 0;
    for (; i + 64 <= d; i += 64) {
      __m512 a0 = _mm512_loadu_ps(acc + i), a1 = _mm512_loadu_ps(acc + i + 16);
      __m512 a2 = _mm512_loadu_ps(acc + i + 32), a3 = _mm512_loadu_ps(acc + i + 48);
      for (int64_t j = 0; j < count; ++j) {
        const __m512 wj = _mm512_set1_ps(w[j]);
        const float* v = values + j * d + i;
        a0 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(v), a0);
        a1 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(v + 16), a1);
        a2 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(v + 32), a2);
        a3 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(v + 48), a3);
      }
      _mm512_storeu_ps(acc + i, a0);
      _mm512_storeu_ps(acc + i + 16, a1);
      _mm512_storeu_ps(acc + i + 32, a2);
      _mm512_storeu_ps(acc + i + 48, a3);
    }
    for (; i < d; i += 16) {
      const __mmask16 m = Tail(d - i);
      __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
      for (int64_t j = 0; j < count; ++j) {
        a = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), _mm512_maskz_loadu_ps(m, values + j * d + i), a);
      }
      _mm512_mask_storeu_ps(acc + i, m, a);
    }
  }
  // 16 bf16 values at `p` (lanes off in `m` read as 0) as f32, exactly.
  RBLN_ATTENTION_AVX512 static __m512 LoadBf16(const uint16_t* p, __mmask16 m) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  RBLN_ATTENTION_AVX512 static void WidenBf16(const uint16_t* src, int64_t n, float* dst) {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = Tail(n - i);
      _mm512_mask_storeu_ps(dst + i, m, LoadBf16(src + i, m));
    }
  }
  // ExpSum with ExpConstants' exp.
  RBLN_ATTENTION_AVX512 static float ExpSum(float* s, int64_t n, float max) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = Tail(n - i);
      __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), _mm512_set1_ps(max));
      x = _mm512_max_ps(x, _mm512_set1_ps(ExpConstants::kMinArg));
      const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(ExpConstants::kLog2e)),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(ExpConstants::kLn2Hi), x);
      r = _mm512_fnmadd_ps(k, _mm512_set1_ps(ExpConstants::kLn2Lo), r);
      __m512 p = _mm512_set1_ps(ExpConstants::kTaylor[0]);
      for (int j = 1; j < ExpConstants::kTerms; ++j) {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ExpConstants::kTaylor[j]));
      }
      const __m512 e = _mm512_scalef_ps(p, k);
      _mm512_mask_storeu_ps(s + i, m, e);
      sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
  }
  // The largest of s[0, n), and in `poisoned` whether any is NaN or +inf.
  RBLN_ATTENTION_AVX512 static float BlockMax(const float* s, int64_t n, bool& poisoned) {
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512 pos_inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    __m512 best = neg_inf;
    __mmask16 bad = 0;
    for (int64_t i = 0; i < n; i += 16) {
      const __m512 x = _mm512_mask_loadu_ps(neg_inf, Tail(n - i), s + i);
      bad |= _mm512_cmp_ps_mask(x, pos_inf, _CMP_NLT_UQ);  // NaN or +inf
      best = _mm512_max_ps(best, x);
    }
    poisoned = bad != 0;
    return _mm512_reduce_max_ps(best);
  }
  RBLN_ATTENTION_AVX512 static void Scale(float alpha, float* y, int64_t n) {
    const __m512 a = _mm512_set1_ps(alpha);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = Tail(n - i);
      _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, y + i)));
    }
  }
};

#define RBLN_ATTENTION_AVX2 __attribute__((target("avx2,fma")))

// Avx512Ops's primitives 8 wide, for CPUs with AVX2+FMA but no AVX-512
// (AMD Zen 2/3, Intel client cores): tails through vmaskmov (lanes past the end are neither read nor written). A block's
// scores take 8 keys at a time (q loaded once, one transposed reduction)
// and its values' weighted sum keeps 32 floats of the accumulator in
// registers over all of the block's keys (each element's sum in key order,
// as Axpy's).
struct Avx2Ops {
  RBLN_ATTENTION_AVX2 static __m256i Tail(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(left, 8))),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  RBLN_ATTENTION_AVX2 static float Sum(__m256 v) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
  }
  RBLN_ATTENTION_AVX2 static float Dot(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    }
    if (i < n) {
      const __m256i m = Tail(n - i);
      s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), s1);
    }
    return Sum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  }
  RBLN_ATTENTION_AVX2 static void Axpy(float alpha, const float* x, float* y, int64_t n) {
    const __m256 a = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    if (i < n) {
      const __m256i m = Tail(n - i);
      _mm256_maskstore_ps(
          y + i, m, _mm256_fmadd_ps(a, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
    }
  }
  RBLN_ATTENTION_AVX2 static void Scale(float alpha, float* y, int64_t n) {
    const __m256 a = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(a, _mm256_loadu_ps(y + i)));
    if (i < n) {
      const __m256i m = Tail(n - i);
      _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(a, _mm256_maskload_ps(y + i, m)));
    }
  }
  RBLN_ATTENTION_AVX2 static void WidenBf16(const uint16_t* src, int64_t n, float* dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256i wide = _mm256_cvtepu16_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
    }
    PortableOps::WidenBf16(src + i, n - i, dst + i);
  }
  RBLN_ATTENTION_AVX2 static void Scores(const float* q, const float* keys, int64_t count, int64_t d,
                               float scale, float* out) {
    int64_t j = 0;
    for (; j + 8 <= count; j += 8) {
      // Spelled out: GCC keeps an array of accumulators in memory.
      const float *k0 = keys + j * d, *k1 = k0 + d, *k2 = k1 + d, *k3 = k2 + d;
      const float *k4 = k3 + d, *k5 = k4 + d, *k6 = k5 + d, *k7 = k6 + d;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
             s7 = s0;
      int64_t i = 0;
      for (; i + 8 <= d; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        s0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), s0);
        s1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), s1);
        s2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), s2);
        s3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), s3);
        s4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k4 + i), s4);
        s5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k5 + i), s5);
        s6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k6 + i), s6);
        s7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k7 + i), s7);
      }
      if (i < d) {
        const __m256i m = Tail(d - i);
        const __m256 qv = _mm256_maskload_ps(q + i, m);
        s0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + i, m), s0);
        s1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k1 + i, m), s1);
        s2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k2 + i, m), s2);
        s3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k3 + i, m), s3);
        s4 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k4 + i, m), s4);
        s5 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k5 + i, m), s5);
        s6 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k6 + i, m), s6);
        s7 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k7 + i, m), s7);
      }
      // Lane t of the result: key t's sum (each 128-bit half holds the
      // keys' partial sums over its lanes).
      const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
      const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(s4, s5), _mm256_hadd_ps(s6, s7));
      const __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20),
                                       _mm256_permute2f128_ps(h0, h1, 0x31));
      _mm256_storeu_ps(out + j, _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
    }
    for (; j < count; ++j) out[j] = Dot(q, keys + j * d, d) * scale;
  }
  RBLN_ATTENTION_AVX2 static void Accumulate(const float* w, const float* values, int64_t count, int64_t d,
                                   float* acc) {
    int64_t i = 0;
    for (; i + 32 <= d; i += 32) {
      __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
      __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
      for (int64_t j = 0; j < count; ++j) {
        const __m256 wj = _mm256_set1_ps(w[j]);
        const float* v = values + j * d + i;
        a0 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v), a0);
        a1 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v + 8), a1);
        a2 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v + 16), a2);
        a3 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v + 24), a3);
      }
      _mm256_storeu_ps(acc + i, a0);
      _mm256_storeu_ps(acc + i + 8, a1);
      _mm256_storeu_ps(acc + i + 16, a2);
      _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i < d; i += 8) {
      const __m256i m = Tail(d - i);
      __m256 a = _mm256_maskload_ps(acc + i, m);
      for (int64_t j = 0; j < count; ++j) {
        a = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_maskload_ps(values + j * d + i, m), a);
      }
      _mm256_maskstore_ps(acc + i, m, a);
    }
  }
  // ExpConstants' exp, 2^k built in the exponent field instead of by
  // vscalefps: arguments are also clamped to <= kMaxArg (2^k stays finite;
  // here they are <= 0, score - max).
  RBLN_ATTENTION_AVX2 static float ExpSum(float* s, int64_t n, float max) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
      const __m256i m = Tail(n - i);
      __m256 x = _mm256_sub_ps(_mm256_maskload_ps(s + i, m), _mm256_set1_ps(max));
      x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(ExpConstants::kMinArg)),
                        _mm256_set1_ps(ExpConstants::kMaxArg));
      const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(ExpConstants::kLog2e)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(ExpConstants::kLn2Hi), x);
      r = _mm256_fnmadd_ps(k, _mm256_set1_ps(ExpConstants::kLn2Lo), r);
      __m256 p = _mm256_set1_ps(ExpConstants::kTaylor[0]);
      for (int j = 1; j < ExpConstants::kTerms; ++j) {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ExpConstants::kTaylor[j]));
      }
      // 2^k, k in [-126, 127]: a normal float's exponent field.
      const __m256 two_k = _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
      const __m256 e = _mm256_mul_ps(p, two_k);
      _mm256_maskstore_ps(s + i, m, e);
      sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
    }
    return Sum(sum);
  }
};

// scores[j] = cap * tanh(scores[j] / cap), as the model computes it
// (Gemma 2's attention logit soft-capping). Scalar: only capped models pay.
inline void SoftCap(float cap, float* scores, int64_t n) {
  for (int64_t j = 0; j < n; ++j) scores[j] = cap * std::tanh(scores[j] / cap);
}

// w[j] rounded to `type` (nearest even) and back, in place; weights are
// finite and >= 0. The bf16 loop is branch-free (it vectorizes).
inline void RoundWeights(GemmOperandType type, float* w, int64_t n) {
  if (type == GemmOperandType::kBF16) {
    for (int64_t j = 0; j < n; ++j) {
      uint32_t u;
      std::memcpy(&u, &w[j], 4);
      u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
      std::memcpy(&w[j], &u, 4);
    }
  } else if (type == GemmOperandType::kF16) {
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t h = RoundToHalf(w[j]);
      HalfToFloat(&h, 1, 1, 1, &w[j], 1);
    }
  }
}

// Folds one block of `count` keys into a row's online softmax (`max`,
// `sum`, `acc` of `d` floats) up to the values: `scores` holds their
// scores (-inf: hidden) and becomes their weights. `hidden` (null: none)
// flags keys whose weight must be exactly 0 (the vector exps give a -inf
// score ~1e-38, which would reach acc through 1e-38 * value). A NaN or
// +inf score makes the row's sum and acc NaN for good. `weight_type`
// (bf16 or f16) rounds the weights to it before they meet the values, the
// sum staying f32, as PyTorch's CPU flash attention does for half inputs
// (its exp'd scores in the input type for the p @ v GEMM). Returns whether
// the weights are still to be added to acc (acc += w[j] * value j, keys in
// order): not for a NaN row, nor a block that hides every key.
template <typename Ops>
bool PrepareWeights(float* scores, const uint8_t* hidden, int64_t count, int64_t d, float& max,
                    float& sum, float* acc,
                    GemmOperandType weight_type = GemmOperandType::kF32) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float block_max = -kInf;
  bool poisoned = false;
  if constexpr (std::is_same_v<Ops, Avx512Ops>) {
    block_max = Avx512Ops::BlockMax(scores, count, poisoned);
  } else {
    for (int64_t j = 0; j < count; ++j) {
      block_max = std::max(block_max, scores[j]);
      poisoned |= !(scores[j] < kInf) && scores[j] != -kInf;  // NaN or +inf
    }
  }
  if (poisoned) {
    // As PyTorch's softmax: a NaN score, or +inf (exp(inf - inf)), makes
    // the row NaN.
    sum = std::numeric_limits<float>::quiet_NaN();
    std::fill(acc, acc + d, sum);
    return false;
  }
  if (block_max == -kInf) return false;  // all hidden
  const float new_max = std::max(max, block_max);
  if (new_max > max) {
    // exp(-inf) = 0 on the first block: nothing to rescale.
    const float correction = std::exp(max - new_max);
    sum *= correction;
    Ops::Scale(correction, acc, d);
    max = new_max;
  }
  sum += Ops::ExpSum(scores, count, new_max);
  RoundWeights(weight_type, scores, count);
  if (hidden != nullptr) {
    for (int64_t j = 0; j < count; ++j) {
      if (hidden[j]) scores[j] = 0.0f;
    }
  }
  return true;
}

// PrepareWeights, then the weights' sum over `values` (`d` floats a key).
template <typename Ops>
void FoldScores(float* scores, const float* values, const uint8_t* hidden, int64_t count,
                int64_t d, float& max, float& sum, float* acc,
                GemmOperandType weight_type = GemmOperandType::kF32) {
  if (PrepareWeights<Ops>(scores, hidden, count, d, max, sum, acc, weight_type)) {
    Ops::Accumulate(scores, values, count, d, acc);
  }
}

#undef RBLN_ATTENTION_AVX512
#undef RBLN_ATTENTION_AVX2

}  // namespace rbln::compiler::attention_ops

#endif  // RBLN_COMPILER_KERNELS_ATTENTION_VECTOR_OPS_H_

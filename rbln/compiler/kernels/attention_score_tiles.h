// Register-tiled attention scores for the AVX-512 path of masked attention
// (masked_attention.cc), where many query rows meet the same block of keys
// (a prefill): the block's keys are transposed once into groups of 16 (key
// t of a group in lane t), and each row's scores come 16 keys a step from
// broadcast multiply-adds over the head dim, up to kScoreTileRows rows
// sharing every loaded vector of keys. No horizontal sums: a score is one
// lane's chain over the head dim, in order. Internal to that kernel.
#ifndef RBLN_COMPILER_KERNELS_ATTENTION_SCORE_TILES_H_
#define RBLN_COMPILER_KERNELS_ATTENTION_SCORE_TILES_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace rbln::compiler::attention_ops {

#define RBLN_SCORE_TILES_AVX512 __attribute__((target("avx512f")))

// Rows a ScoreRows call takes: with two groups of keys a step, 8
// independent chains (enough to cover the multiply-add's latency).
constexpr int kScoreTileRows = 4;

// The `count` keys of `d` floats at `keys` (row stride d) as
// ceil(count / 16) groups of [d][16] at `kt`, lanes past `count` zero.
inline void TransposeKeys16(const float* keys, int64_t count, int64_t d, float* kt) {
  for (int64_t g = 0; g * 16 < count; ++g) {
    float* dst = kt + g * d * 16;
    const int64_t n = std::min<int64_t>(16, count - g * 16);
    for (int64_t t = 0; t < 16; ++t) {
      const float* key = keys + (g * 16 + t) * d;
      for (int64_t e = 0; e < d; ++e) dst[e * 16 + t] = t < n ? key[e] : 0.0f;
    }
  }
}

// out[r * ldo + t] = scale * sum over e of q[r * ldq + e] * key t's e-th
// element, for rows r < R and keys t < 16 * groups of the groups at `kt`
// (TransposeKeys16's layout).
template <int R>
RBLN_SCORE_TILES_AVX512 void ScoreRows(const float* q, int64_t ldq, const float* kt,
                                       int64_t groups, int64_t d, float scale, float* out,
                                       int64_t ldo) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    const float* k0 = kt + g * d * 16;
    const float* k1 = k0 + d * 16;
    __m512 acc[R][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t e = 0; e < d; ++e) {
      const __m512 kv0 = _mm512_loadu_ps(k0 + e * 16), kv1 = _mm512_loadu_ps(k1 + e * 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 qe = _mm512_set1_ps(q[r * ldq + e]);
        acc[r][0] = _mm512_fmadd_ps(qe, kv0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(qe, kv1, acc[r][1]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(out + r * ldo + g * 16, _mm512_mul_ps(acc[r][0], s));
      _mm512_storeu_ps(out + r * ldo + g * 16 + 16, _mm512_mul_ps(acc[r][1], s));
    }
  }
  if (g < groups) {
    const float* k0 = kt + g * d * 16;
    __m512 acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t e = 0; e < d; ++e) {
      const __m512 kv0 = _mm512_loadu_ps(k0 + e * 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + e]), kv0, acc[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * ldo + g * 16, _mm512_mul_ps(acc[r], s));
  }
}

// ScoreRows for `rows` (1 to kScoreTileRows) rows.
inline void ScoreRowsUpTo4(int rows, const float* q, int64_t ldq, const float* kt, int64_t groups,
                           int64_t d, float scale, float* out, int64_t ldo) {
  switch (rows) {
    case 1: return ScoreRows<1>(q, ldq, kt, groups, d, scale, out, ldo);
    case 2: return ScoreRows<2>(q, ldq, kt, groups, d, scale, out, ldo);
    case 3: return ScoreRows<3>(q, ldq, kt, groups, d, scale, out, ldo);
    default: return ScoreRows<4>(q, ldq, kt, groups, d, scale, out, ldo);
  }
}

#undef RBLN_SCORE_TILES_AVX512

}  // namespace rbln::compiler::attention_ops

#endif  // RBLN_COMPILER_KERNELS_ATTENTION_SCORE_TILES_H_

// A few query rows of a masked-attention item against bf16 keys and values
// read where they are stored, for the AVX-512 path's items of few rows (a
// decode step's: the query heads of one kv head), in masked_attention.cc.
//
// Per block the per-key path widens the block's keys and values into f32
// copies (at 160 keys of 64 already 80 KB, past L1) and then scores and sums
// each row alone, one call per key. Here the keys and values are widened in
// registers as they are read, each once for up to kBf16Rows rows. The
// arithmetic is Avx512Ops's Dot (times the scale) and Accumulate on the
// widened values, operation for operation in the same order, so every
// score and sum keeps its bits. Internal to that kernel.
#ifndef RBLN_COMPILER_KERNELS_ATTENTION_BF16_ROWS_H_
#define RBLN_COMPILER_KERNELS_ATTENTION_BF16_ROWS_H_

#include <immintrin.h>

#include <cstdint>

#include "rbln/compiler/kernels/attention_vector_ops.h"

namespace rbln::compiler::attention_ops {

#define RBLN_BF16_ROWS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// Rows a call takes: 4 rows' sums of 64 values stay in 16 registers.
constexpr int kBf16Rows = 4;

// out[r * ldo + j] = Dot(row r, key j) * scale for rows r < R (f32, `ldq`
// apart at `q`) and the `count` keys of `d` bf16 values `key_stride`
// elements apart at `keys`; Dot as Avx512Ops::Dot.
template <int R>
RBLN_BF16_ROWS_AVX512 void ScoreRowsBf16(const float* q, int64_t ldq, const uint16_t* keys,
                                         int64_t key_stride, int64_t count, int64_t d,
                                         float scale, float* out, int64_t ldo) {
  for (int64_t j = 0; j < count; ++j) {
    const uint16_t* k = keys + j * key_stride;
    __m512 s0[R], s1[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) s0[r] = s1[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= d; i += 32) {
      const __m512 k0 = Avx512Ops::LoadBf16(k + i, 0xffff);
      const __m512 k1 = Avx512Ops::LoadBf16(k + i + 16, 0xffff);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        s0[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q + r * ldq + i), k0, s0[r]);
        s1[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q + r * ldq + i + 16), k1, s1[r]);
      }
    }
    for (; i < d; i += 16) {
      const __mmask16 m = Avx512Ops::Tail(d - i);
      const __m512 k0 = Avx512Ops::LoadBf16(k + i, m);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        s0[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + r * ldq + i), k0, s0[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      out[r * ldo + j] = _mm512_reduce_add_ps(_mm512_add_ps(s0[r], s1[r])) * scale;
    }
  }
}

// acc[r][e] += w[r][j] * value j's element e, keys j < count in order, for
// rows r < R; the values `d` bf16 each, `value_stride` elements apart.
// Avx512Ops::Accumulate's arithmetic, 64 floats of each row's sums in
// registers over all the keys.
template <int R>
RBLN_BF16_ROWS_AVX512 void AccumulateRowsBf16(const float* const* w, const uint16_t* values,
                                              int64_t value_stride, int64_t count, int64_t d,
                                              float* const* acc) {
  int64_t i = 0;
  for (; i + 64 <= d; i += 64) {
    __m512 a[R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < 4; ++c) a[r][c] = _mm512_loadu_ps(acc[r] + i + 16 * c);
    }
    for (int64_t j = 0; j < count; ++j) {
      const uint16_t* v = values + j * value_stride + i;
      const __m512 v0 = Avx512Ops::LoadBf16(v, 0xffff);
      const __m512 v1 = Avx512Ops::LoadBf16(v + 16, 0xffff);
      const __m512 v2 = Avx512Ops::LoadBf16(v + 32, 0xffff);
      const __m512 v3 = Avx512Ops::LoadBf16(v + 48, 0xffff);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 wj = _mm512_set1_ps(w[r][j]);
        a[r][0] = _mm512_fmadd_ps(wj, v0, a[r][0]);
        a[r][1] = _mm512_fmadd_ps(wj, v1, a[r][1]);
        a[r][2] = _mm512_fmadd_ps(wj, v2, a[r][2]);
        a[r][3] = _mm512_fmadd_ps(wj, v3, a[r][3]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(acc[r] + i + 16 * c, a[r][c]);
    }
  }
  for (; i < d; i += 16) {
    const __mmask16 m = Avx512Ops::Tail(d - i);
    __m512 a[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a[r] = _mm512_maskz_loadu_ps(m, acc[r] + i);
    for (int64_t j = 0; j < count; ++j) {
      const __m512 v = Avx512Ops::LoadBf16(values + j * value_stride + i, m);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[r][j]), v, a[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(acc[r] + i, m, a[r]);
  }
}

// ScoreRowsBf16 and AccumulateRowsBf16 for `rows` (1 to kBf16Rows) rows.
inline void ScoreRowsBf16UpTo4(int rows, const float* q, int64_t ldq, const uint16_t* keys,
                               int64_t key_stride, int64_t count, int64_t d, float scale,
                               float* out, int64_t ldo) {
  switch (rows) {
    case 1: return ScoreRowsBf16<1>(q, ldq, keys, key_stride, count, d, scale, out, ldo);
    case 2: return ScoreRowsBf16<2>(q, ldq, keys, key_stride, count, d, scale, out, ldo);
    case 3: return ScoreRowsBf16<3>(q, ldq, keys, key_stride, count, d, scale, out, ldo);
    default: return ScoreRowsBf16<4>(q, ldq, keys, key_stride, count, d, scale, out, ldo);
  }
}

inline void AccumulateRowsBf16UpTo4(int rows, const float* const* w, const uint16_t* values,
                                    int64_t value_stride, int64_t count, int64_t d,
                                    float* const* acc) {
  switch (rows) {
    case 1: return AccumulateRowsBf16<1>(w, values, value_stride, count, d, acc);
    case 2: return AccumulateRowsBf16<2>(w, values, value_stride, count, d, acc);
    case 3: return AccumulateRowsBf16<3>(w, values, value_stride, count, d, acc);
    default: return AccumulateRowsBf16<4>(w, values, value_stride, count, d, acc);
  }
}

#undef RBLN_BF16_ROWS_AVX512

}  // namespace rbln::compiler::attention_ops

#endif  // RBLN_COMPILER_KERNELS_ATTENTION_BF16_ROWS_H_

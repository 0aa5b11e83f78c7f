#include "rbln/compiler/kernels/bf16_skinny_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace rbln::compiler {
namespace {

float Bf16ToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- Portable: each element one sequential f32 sum over k. ----

void GemmPortable(const GemmProblem& q, const uint16_t* a, const uint16_t* b,
                  float* c) {
  for (int64_t bt = 0; bt < q.batch; ++bt) {
    const uint16_t* ab = a + bt * q.stride_a;
    const uint16_t* bb = b + bt * q.stride_b;
    float* cb = c + bt * q.m * q.n;
    for (int64_t i = 0; i < q.m; ++i) {
      const uint16_t* row = ab + i * q.lda;
      for (int64_t j = 0; j < q.n; ++j) {
        float s = 0;
        if (q.trans_b) {
          const uint16_t* col = bb + j * q.ldb;
          for (int64_t l = 0; l < q.k; ++l) {
            s += Bf16ToFloat(row[l]) * Bf16ToFloat(col[l]);
          }
        } else {
          for (int64_t l = 0; l < q.k; ++l) {
            s += Bf16ToFloat(row[l]) * Bf16ToFloat(bb[l * q.ldb + j]);
          }
        }
        cb[i * q.n + j] = s;
      }
    }
  }
}

// ---- AVX2 + FMA (per-function target: the build stays baseline x86-64,
// and these run only where BestSkinnyIsa() found the instructions). ----
#define RBLN_AVX2 __attribute__((target("avx2,fma")))
// Keeps a loaded vector in a register: without it GCC folds the load into
// every instruction that reads it (one load per FMA), and the loads, not
// the FMAs, bound the loop.
#define RBLN_IN_REGISTER(v) __asm__("" : "+x"(v))

RBLN_AVX2 inline float FmaScalar(float a, float b, float c) {
  return _mm_cvtss_f32(
      _mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// Lanes 0..7 added in a fixed tree.
RBLN_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

// B stored [n, k] (trans_b): C[i][j] is the dot product of A's row i and
// B's row j. 16 elements of a B row are widened by interleaving them with
// zeros (unpacklo/hi: elements 0-3, 8-11 into `lo`, 4-7, 12-15 into `hi`);
// A's rows are widened once into the same order (`aw`, k16 floats a row).
// Per element: lane sums (lo, then hi, chunk after chunk), their
// HorizontalSum, then the k % 16 last products one after another.
RBLN_AVX2 void WidenRowInterleaved(const uint16_t* a, int64_t k16, float* out) {
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t l = 0; l < k16; l += 16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + l));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + l),
                        _mm256_unpacklo_epi16(zero, x));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + l + 8),
                        _mm256_unpackhi_epi16(zero, x));
  }
}

// Rows [0, R) x columns [0, C) of C at `c` (row stride ldc).
template <int R, int C>
RBLN_AVX2 void DotTile(const float* aw, const uint16_t* a, int64_t lda,
                       const uint16_t* b, int64_t ldb, int64_t k, float* c,
                       int64_t ldc) {
  const int64_t k16 = k & ~int64_t{15};
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) acc[r][j] = _mm256_setzero_ps();
  }
  for (int64_t l = 0; l < k16; l += 16) {
    __m256 lo[C], hi[C];
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      __m256i x = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(b + j * ldb + l));
      RBLN_IN_REGISTER(x);
      lo[j] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x));
      hi[j] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m256 al = _mm256_loadu_ps(aw + r * k16 + l);
      __m256 ah = _mm256_loadu_ps(aw + r * k16 + l + 8);
      RBLN_IN_REGISTER(al);
      RBLN_IN_REGISTER(ah);
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) {
        acc[r][j] = _mm256_fmadd_ps(al, lo[j], acc[r][j]);
        acc[r][j] = _mm256_fmadd_ps(ah, hi[j], acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      float s = HorizontalSum(acc[r][j]);
      for (int64_t l = k16; l < k; ++l) {
        s = FmaScalar(Bf16ToFloat(a[r * lda + l]), Bf16ToFloat(b[j * ldb + l]),
                      s);
      }
      c[r * ldc + j] = s;
    }
  }
}

// Columns of a DotTile of R rows: as many as keep its accumulators and
// widened B in the 16 vector registers.
constexpr int DotColumns(int rows) { return rows == 1 ? 4 : rows == 2 ? 3 : 2; }

// Rows of a tile, and the columns of a panel (a multiple of every
// DotColumns), whose B rows stay in cache while each group of rows reads
// them.
constexpr int kTileRows = 4;
constexpr int64_t kPanelColumns = 12;

template <int R>
RBLN_AVX2 void DotRows(const float* aw, const uint16_t* a, int64_t lda,
                       const uint16_t* b, int64_t ldb, int64_t k, float* c,
                       int64_t ldc, int64_t n) {
  constexpr int C = DotColumns(R);
  int64_t j = 0;
  for (; j + C <= n; j += C) {
    DotTile<R, C>(aw, a, lda, b + j * ldb, ldb, k, c + j, ldc);
  }
  for (; j < n; ++j) DotTile<R, 1>(aw, a, lda, b + j * ldb, ldb, k, c + j, ldc);
}

RBLN_AVX2 void TransposedAvx2(const GemmProblem& q, const uint16_t* a,
                              const uint16_t* b, float* c,
                              std::vector<float>& aw) {
  const int64_t k16 = q.k & ~int64_t{15};
  aw.resize(std::max<int64_t>(1, q.m * k16));
  for (int64_t bt = 0; bt < q.batch; ++bt) {
    const uint16_t* ab = a + bt * q.stride_a;
    const uint16_t* bb = b + bt * q.stride_b;
    float* cb = c + bt * q.m * q.n;
    for (int64_t i = 0; i < q.m; ++i) {
      WidenRowInterleaved(ab + i * q.lda, k16, aw.data() + i * k16);
    }
    for (int64_t j = 0; j < q.n; j += kPanelColumns) {
      const int64_t n = std::min(kPanelColumns, q.n - j);
      for (int64_t i = 0; i < q.m; i += kTileRows) {
        const float* awi = aw.data() + i * k16;
        const uint16_t* ai = ab + i * q.lda;
        const uint16_t* bj = bb + j * q.ldb;
        float* cij = cb + i * q.n + j;
        switch (std::min<int64_t>(kTileRows, q.m - i)) {
          case 1:
            DotRows<1>(awi, ai, q.lda, bj, q.ldb, q.k, cij, q.n, n);
            break;
          case 2:
            DotRows<2>(awi, ai, q.lda, bj, q.ldb, q.k, cij, q.n, n);
            break;
          case 3:
            DotRows<3>(awi, ai, q.lda, bj, q.ldb, q.k, cij, q.n, n);
            break;
          default:
            DotRows<4>(awi, ai, q.lda, bj, q.ldb, q.k, cij, q.n, n);
            break;
        }
      }
    }
  }
}

// B stored [k, n]: C's row i is the sum over l of A[i][l] times B's row l,
// 8 columns a vector. Per element: one FMA after another in the order of l
// (the partial sums kept in C between blocks of kKBlock rows of B, which
// stay in cache while each group of rows reads them); the last n % 8
// columns the same one at a time.
constexpr int64_t kKBlock = 256;

RBLN_AVX2 inline __m256 WidenEight(const uint16_t* b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}

// Rows [0, R) x columns [0, 8V) of C at `c`, B's rows [l0, l1); C is read
// first unless `first`. `aw`: A's rows widened (k floats each).
template <int R, int V>
RBLN_AVX2 void AxpyTile(const float* aw, int64_t k, const uint16_t* b,
                        int64_t ldb, int64_t l0, int64_t l1, bool first,
                        float* c, int64_t ldc) {
  __m256 acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[r][v] = first ? _mm256_setzero_ps()
                        : _mm256_loadu_ps(c + r * ldc + 8 * v);
    }
  }
  for (int64_t l = l0; l < l1; ++l) {
    __m256 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = WidenEight(b + l * ldb + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(aw + r * k + l);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
  }
}

constexpr int AxpyVectors(int rows) { return rows <= 2 ? 4 : 2; }

template <int R>
RBLN_AVX2 void AxpyRows(const float* aw, int64_t k, const uint16_t* b,
                        int64_t ldb, int64_t l0, int64_t l1, bool first,
                        float* c, int64_t ldc, int64_t n) {
  constexpr int V = AxpyVectors(R);
  int64_t j = 0;
  for (; j + 8 * V <= n; j += 8 * V) {
    AxpyTile<R, V>(aw, k, b + j, ldb, l0, l1, first, c + j, ldc);
  }
  for (; j + 8 <= n; j += 8) {
    AxpyTile<R, 1>(aw, k, b + j, ldb, l0, l1, first, c + j, ldc);
  }
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = first ? 0.0f : c[r * ldc + j];
      for (int64_t l = l0; l < l1; ++l) {
        s = FmaScalar(aw[r * k + l], Bf16ToFloat(b[l * ldb + j]), s);
      }
      c[r * ldc + j] = s;
    }
  }
}

RBLN_AVX2 void PlainAvx2(const GemmProblem& q, const uint16_t* a,
                         const uint16_t* b, float* c, std::vector<float>& aw) {
  aw.resize(q.m * q.k);
  for (int64_t bt = 0; bt < q.batch; ++bt) {
    const uint16_t* ab = a + bt * q.stride_a;
    const uint16_t* bb = b + bt * q.stride_b;
    float* cb = c + bt * q.m * q.n;
    for (int64_t i = 0; i < q.m; ++i) {
      for (int64_t l = 0; l < q.k; ++l) {
        aw[i * q.k + l] = Bf16ToFloat(ab[i * q.lda + l]);
      }
    }
    for (int64_t l0 = 0; l0 < q.k; l0 += kKBlock) {
      const int64_t l1 = std::min(q.k, l0 + kKBlock);
      const bool first = l0 == 0;
      for (int64_t i = 0; i < q.m; i += kTileRows) {
        const float* awi = aw.data() + i * q.k;
        float* ci = cb + i * q.n;
        switch (std::min<int64_t>(kTileRows, q.m - i)) {
          case 1:
            AxpyRows<1>(awi, q.k, bb, q.ldb, l0, l1, first, ci, q.n, q.n);
            break;
          case 2:
            AxpyRows<2>(awi, q.k, bb, q.ldb, l0, l1, first, ci, q.n, q.n);
            break;
          case 3:
            AxpyRows<3>(awi, q.k, bb, q.ldb, l0, l1, first, ci, q.n, q.n);
            break;
          default:
            AxpyRows<4>(awi, q.k, bb, q.ldb, l0, l1, first, ci, q.n, q.n);
            break;
        }
      }
    }
  }
}

#undef RBLN_IN_REGISTER
#undef RBLN_AVX2

// ---- AVX-512 BF16 (B stored [n, k]): vdpbf16ps multiplies 32 bf16 pairs
// of A and B as stored and adds them into 16 f32 lanes (lane t: products
// 2t and 2t+1 of each 32-element chunk), so neither operand is widened and
// a B row is read once per tile of rows. Per element: lane sums chunk after
// chunk (the k % 32 tail a chunk zero-filled by masked loads), then one
// fixed tree over the 16 lanes. With vdpbf16ps's implied DAZ / FTZ, as
// oneDNN's bf16 kernels on the same CPUs. ----
#define RBLN_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define RBLN_ZMM_IN_REGISTER(v) __asm__("" : "+v"(v))

template <int R, int C, bool kTail>
RBLN_AVX512_BF16 inline __attribute__((always_inline)) void DotChunk512(
    __m512 (&acc)[R][C], const uint16_t* a, int64_t lda, const uint16_t* b,
    int64_t ldb, int64_t l, __mmask32 tail) {
  __m512i bv[C];
#pragma GCC unroll 8
  for (int j = 0; j < C; ++j) {
    // The next tile's rows of B (the C after these) at the same offset into
    // L2, a tile ahead of use: the hardware prefetcher learns each 4-16 KB
    // row anew (Zen 4, one worker: 1.2-1.6x at 1-4 rows; two workers at one
    // row stream at the memory's rate either way). Past B's end on the last
    // tile: a prefetch never faults.
    _mm_prefetch(reinterpret_cast<const char*>(b + (C + j) * ldb + l), _MM_HINT_T1);
    bv[j] = kTail ? _mm512_maskz_loadu_epi16(tail, b + j * ldb + l)
                  : _mm512_loadu_si512(b + j * ldb + l);
    RBLN_ZMM_IN_REGISTER(bv[j]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m512i av = kTail ? _mm512_maskz_loadu_epi16(tail, a + r * lda + l)
                       : _mm512_loadu_si512(a + r * lda + l);
    RBLN_ZMM_IN_REGISTER(av);
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) {
      acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)av, (__m512bh)bv[j]);
    }
  }
}

// Lanes 0..15 added in a fixed tree (halves, then HorizontalSum's).
RBLN_AVX512_BF16 inline float HorizontalSum512(__m512 v) {
  return HorizontalSum(_mm256_add_ps(
      _mm512_castps512_ps256(v),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

// Rows [0, R) x columns [0, C) of C at `c` (row stride ldc).
template <int R, int C>
RBLN_AVX512_BF16 void DotTile512(const uint16_t* a, int64_t lda,
                                 const uint16_t* b, int64_t ldb, int64_t k,
                                 float* c, int64_t ldc) {
  const int64_t k32 = k & ~int64_t{31};
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  for (int64_t l = 0; l < k32; l += 32) {
    DotChunk512<R, C, false>(acc, a, lda, b, ldb, l, 0);
  }
  if (k32 < k) {
    const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (k - k32)) - 1);
    DotChunk512<R, C, true>(acc, a, lda, b, ldb, k32, tail);
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[r * ldc + j] = HorizontalSum512(acc[r][j]);
  }
}

// Columns of a DotTile512 of R rows (accumulators, B and A chunks within
// the 32 vector registers), and a panel's columns: a multiple of each.
constexpr int DotColumns512(int rows) {
  return rows == 1 ? 8 : rows <= 3 ? 6 : rows <= 6 ? 4 : 3;
}
// Rows of A a DotTile512 takes: all of a batch-8 decode step's, so each
// chunk of B read from memory meets every row while it is in registers
// (two 4-row passes re-read the panel from L2).
constexpr int kTileRows512 = 8;
constexpr int64_t kPanelColumns512 = 24;

template <int R>
RBLN_AVX512_BF16 void DotRows512(const uint16_t* a, int64_t lda,
                                 const uint16_t* b, int64_t ldb, int64_t k,
                                 float* c, int64_t ldc, int64_t n) {
  constexpr int C = DotColumns512(R);
  int64_t j = 0;
  for (; j + C <= n; j += C) {
    DotTile512<R, C>(a, lda, b + j * ldb, ldb, k, c + j, ldc);
  }
  for (; j < n; ++j) DotTile512<R, 1>(a, lda, b + j * ldb, ldb, k, c + j, ldc);
}

template <int R>
RBLN_AVX512_BF16 void DotPanel512(const GemmProblem& q, const uint16_t* a,
                                  const uint16_t* b, float* c, int64_t n) {
  DotRows512<R>(a, q.lda, b, q.ldb, q.k, c, q.n, n);
}

RBLN_AVX512_BF16 void TransposedAvx512Bf16(const GemmProblem& q,
                                           const uint16_t* a,
                                           const uint16_t* b, float* c) {
  // Rows 1..8 of a tile, by count.
  using Panel = void (*)(const GemmProblem&, const uint16_t*, const uint16_t*,
                         float*, int64_t);
  static constexpr Panel kPanels[kTileRows512] = {
      DotPanel512<1>, DotPanel512<2>, DotPanel512<3>, DotPanel512<4>,
      DotPanel512<5>, DotPanel512<6>, DotPanel512<7>, DotPanel512<8>};
  for (int64_t bt = 0; bt < q.batch; ++bt) {
    const uint16_t* ab = a + bt * q.stride_a;
    const uint16_t* bb = b + bt * q.stride_b;
    float* cb = c + bt * q.m * q.n;
    for (int64_t j = 0; j < q.n; j += kPanelColumns512) {
      const int64_t n = std::min(kPanelColumns512, q.n - j);
      for (int64_t i = 0; i < q.m; i += kTileRows512) {
        const int64_t rows = std::min<int64_t>(kTileRows512, q.m - i);
        kPanels[rows - 1](q, ab + i * q.lda, bb + j * q.ldb, cb + i * q.n + j, n);
      }
    }
  }
}

#undef RBLN_ZMM_IN_REGISTER
#undef RBLN_AVX512_BF16

}  // namespace

SkinnyIsa BestSkinnyIsa() {
  static const SkinnyIsa best = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
      return SkinnyIsa::kPortable;
    }
    return __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512bf16")
               ? SkinnyIsa::kAvx512Bf16
               : SkinnyIsa::kAvx2;
  }();
  return best;
}

const char* SkinnyIsaName(SkinnyIsa isa) {
  switch (isa) {
    case SkinnyIsa::kAvx512Bf16:
      return "avx512_bf16";
    case SkinnyIsa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

bool SkinnyBf16Applies(const GemmProblem& q) {
  return q.type == GemmOperandType::kBF16 && q.batch >= 1 && q.m >= 1 &&
         q.m <= kSkinnyBf16MaxRows && q.n >= 1 && q.k >= 1;
}

bool SkinnyBf16Preferred(const GemmProblem& q, bool onednn_has_bf16) {
  if (!SkinnyBf16Applies(q)) return false;
  return !onednn_has_bf16 ||
         (q.trans_b && q.m <= kSkinnyBf16MaxRowsBesideOnednn &&
          BestSkinnyIsa() == SkinnyIsa::kAvx512Bf16);
}

void SkinnyBf16Gemm(const GemmProblem& q, const void* a, const void* b,
                    float* c_dense, SkinnyIsa isa) {
  const uint16_t* a16 = static_cast<const uint16_t*>(a);
  const uint16_t* b16 = static_cast<const uint16_t*>(b);
  if (isa == SkinnyIsa::kPortable) {
    GemmPortable(q, a16, b16, c_dense);
    return;
  }
  if (isa == SkinnyIsa::kAvx512Bf16 && q.trans_b) {
    TransposedAvx512Bf16(q, a16, b16, c_dense);
    return;
  }
  // A's rows as f32, reused by the calls of this thread.
  thread_local std::vector<float> widened_a;
  if (q.trans_b) {
    TransposedAvx2(q, a16, b16, c_dense, widened_a);
  } else {
    PlainAvx2(q, a16, b16, c_dense, widened_a);
  }
}

void SkinnyBf16Gemm(const GemmProblem& q, const void* a, const void* b,
                    float* c_dense) {
  SkinnyBf16Gemm(q, a, b, c_dense, BestSkinnyIsa());
}

}  // namespace rbln::compiler

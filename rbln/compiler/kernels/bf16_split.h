// IEEE half (binary16) values as exact sums of two bfloat16s, so that f16
// GEMMs can run on bf16 hardware (AMX) without losing precision.
//
// A half x has 11 significant bits; hi = bf16(x), rounded to nearest even,
// keeps 8 of them, and lo = x - hi is a multiple of x's ulp no larger than
// half of hi's, so it has at most 3 significant bits: a bf16 too (bf16 has
// f32's exponent range, so subnormal halves split exactly as well). Then
// a*b = ah*bh + ah*bl + al*bh + al*bl, and the last term (at most 2^-18 of
// |a*b|) is far below f16's own rounding: a GEMM with K tripled over
// [Ah | Al | Ah] x [Bh ; Bh ; Bl] computes f16 products in bf16 with f32
// accumulation (onednn_gemm.h).
//
// Infinities and NaNs split into hi = x, lo = 0; every split reports
// whether it met one, because inf * 0 in the cross terms would turn an
// infinite product into NaN (the caller then takes another route).
#ifndef RBLN_COMPILER_KERNELS_BF16_SPLIT_H_
#define RBLN_COMPILER_KERNELS_BF16_SPLIT_H_

#include <cstdint>

namespace rbln::compiler {

// The instruction sets the split can use, in increasing speed.
enum class SplitIsa { kScalar = 0, kAvx512 = 1 };

// The fastest one this CPU has (checked once, at run time).
SplitIsa BestSplitIsa();
const char* SplitIsaName(SplitIsa isa);

// Splits the half `bits` into bf16 bits `*hi` and `*lo`; false if it is
// infinite or NaN.
bool SplitHalf(uint16_t bits, uint16_t* hi, uint16_t* lo);

// Splits src[0, n): hi parts to `hi` and again to `hi2`, lo parts to `lo`
// (three separate regions). False if some value is infinite or NaN. Every
// isa gives the same bits; `isa` must not exceed BestSplitIsa().
bool SplitHalfRow(const uint16_t* src, int64_t n, uint16_t* hi, uint16_t* hi2,
                  uint16_t* lo, SplitIsa isa = BestSplitIsa());

// The K-tripled operands of a GEMM, row-major, one matrix at a time
// (strides in elements). False if some value is infinite or NaN.
//
// A [rows, k] at `src` into [rows, 3k] at `dst`: each row [hi | lo | hi].
bool SplitRowsOfA(const uint16_t* src, int64_t rows, int64_t k, int64_t ld,
                  uint16_t* dst);
// B [k, n] at `src` into [3k, n] at `dst`: rows [hi ; hi ; lo].
bool SplitRowsOfB(const uint16_t* src, int64_t k, int64_t n, int64_t ld,
                  uint16_t* dst);
// B stored transposed, [n, k] at `src`, into [n, 3k] at `dst`: each row
// [hi | hi | lo] (the same op(B) rows as SplitRowsOfB's, by columns).
bool SplitRowsOfTransposedB(const uint16_t* src, int64_t n, int64_t k,
                            int64_t ld, uint16_t* dst);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_BF16_SPLIT_H_

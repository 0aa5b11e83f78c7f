// Special functions that compiled kernels call, as they call libm's sinf:
// scalar routines with data-dependent loops (series, continued fractions,
// recurrences) that would be hundreds of builder calls as MLIR, evaluated
// in double precision and rounded once to float. The kernels compute half
// types in f32 and round the result, as PyTorch's CPU kernels do.
//
// Domains and special values follow ATen's CPU kernels (torch 2.13); the
// algorithms are textbook ones (DLMF), not ATen's float ones, so results
// agree within a few float ulps away from poles and zeros. Trigamma's
// reflection term is evaluated in float as ATen does (see FloatSinPi), so
// that PyTorch's rounding near its poles is matched.
//
// The JIT resolves the symbols by name (SpecialMathSymbols(), registered by
// CompiledProgram); kernels declare them as `func.func private @name`.
#ifndef RBLN_COMPILER_KERNELS_SPECIAL_MATH_H_
#define RBLN_COMPILER_KERNELS_SPECIAL_MATH_H_

#include <cstdint>
#include <utility>
#include <vector>

extern "C" {
// log|Gamma(x)| (lgammaf, without the global signgam write).
float rbln_lgammaf(float x);
// psi(x) = d/dx log Gamma(x); psi(+-0) = -+inf, NaN at negative integers.
float rbln_digammaf(float x);
// The n-th derivative of psi (n >= 0): digamma for n = 0, otherwise
// (-1)^(n+1) n! zeta(n+1, x).
float rbln_polygammaf(int64_t n, float x);
// Hurwitz zeta(s, q) = sum_k (q + k)^-s: inf at s == 1 and at q a
// non-positive integer, NaN for s < 1 (and q < 0 with s not an integer).
float rbln_zetaf(float s, float q);
// Inverse error function: NaN outside [-1, 1], +-inf at +-1.
float rbln_erfinvf(float y);
// Modified Bessel functions of the first kind of order 0 and 1, and their
// exponentially scaled forms exp(-|x|) I(x).
float rbln_i0f(float x);
float rbln_i0ef(float x);
float rbln_i1f(float x);
float rbln_i1ef(float x);
// Regularized lower and upper incomplete gamma functions P(a, x), Q(a, x).
float rbln_igammaf(float a, float x);
float rbln_igammacf(float a, float x);
}

namespace rbln::compiler {

// (name, address) of every function above, for the JIT's symbol map.
std::vector<std::pair<const char*, void*>> SpecialMathSymbols();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_SPECIAL_MATH_H_

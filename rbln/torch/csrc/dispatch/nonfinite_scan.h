// The pre-dispatch NaN/Inf check's scan (SPEC H1, H8): the largest magnitude
// of a dense run of floating-point elements, from their bit patterns.
//
// For IEEE formats the magnitude bits (the value with its sign bit cleared)
// order like the magnitudes themselves, and every NaN pattern lies above
// infinity's (exponent all ones, mantissa non-zero vs zero). So the maximum
// of `bits & ~sign` over a buffer is the peak |x| with NaN propagating: it is
// a NaN pattern exactly when some element is NaN, infinity's pattern exactly
// when no element is NaN and some is +-inf. That is the same peak as
// max(amax, -amin) with NaN propagation, found with integer max instructions
// (AVX-512BW / AVX2 when the CPU has them, chosen once at run time).
//
// No torch dependency: the scan is tested on its own over every bit pattern.
#ifndef RBLN_TORCH_CSRC_DISPATCH_NONFINITE_SCAN_H_
#define RBLN_TORCH_CSRC_DISPATCH_NONFINITE_SCAN_H_

#include <cstdint>

namespace rbln::torch_backend {

enum class FloatFormat { kFloat16, kBFloat16, kFloat32, kFloat64 };

// The implementations; kBest is the fastest the CPU supports.
enum class ScanIsa { kBest, kScalar, kAvx2, kAvx512 };

// Whether this CPU (and build) can run `isa`.
bool ScanIsaSupported(ScanIsa isa);

// max over the `n` elements at `data` (any alignment) of their bit pattern
// with the sign bit cleared, zero-extended; 0 when n == 0. `isa` must be
// supported.
uint64_t PeakMagnitudeBits(const void* data, int64_t n, FloatFormat format,
                           ScanIsa isa = ScanIsa::kBest);

// Classifies a magnitude pattern (sign bit clear) of `format`.
bool IsNanBits(uint64_t magnitude, FloatFormat format);
bool IsInfBits(uint64_t magnitude, FloatFormat format);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_NONFINITE_SCAN_H_

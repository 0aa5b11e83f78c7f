// IEEE half precision (binary16) and bfloat16 to float, for library calls whose library
// has no f16 kernels (oneDNN 2.6 has no f16 matmul on any CPU): the
// operands are widened, exactly, into f32 buffers first. Every half value
// is a float, so the widened GEMM computes the same products; only the
// copy is extra work, which F16C/AVX-512 vcvtph2ps keeps at memory speed.
#ifndef RBLN_COMPILER_KERNELS_HALF_CONVERT_H_
#define RBLN_COMPILER_KERNELS_HALF_CONVERT_H_

#include <cstdint>

namespace rbln::compiler {

// The instruction sets HalfToFloat can use, in increasing speed.
enum class HalfIsa { kScalar = 0, kF16c = 1, kAvx512 = 2 };

// The fastest one this CPU has (checked once, at run time).
HalfIsa BestHalfIsa();
const char* HalfIsaName(HalfIsa isa);

// The float value of the half `bits`; a signaling NaN becomes quiet, as
// vcvtph2ps does.
float HalfToFloat(uint16_t bits);

// dst[i * ld_dst + j] = value of src[i * ld_src + j] for i < rows,
// j < cols (strides in elements). Regions must not overlap.
void HalfToFloat(const uint16_t* src, int64_t rows, int64_t cols,
                 int64_t ld_src, float* dst, int64_t ld_dst);
// The same with `isa`, which must not exceed BestHalfIsa() (for tests).
void HalfToFloat(const uint16_t* src, int64_t rows, int64_t cols,
                 int64_t ld_src, float* dst, int64_t ld_dst, HalfIsa isa);

// The same for bfloat16 `src` (exact: the bits become a float's high half),
// for libraries without bf16 kernels on this CPU (oneDNN 2.6 below
// AVX-512).
void Bf16ToFloat(const uint16_t* src, int64_t rows, int64_t cols,
                 int64_t ld_src, float* dst, int64_t ld_dst);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_HALF_CONVERT_H_

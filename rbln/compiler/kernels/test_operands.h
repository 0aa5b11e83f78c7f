// Operands for the kernel tests: random values exactly representable in f32
// or bf16, kept as f32 for a double-precision reference and as the bytes the
// kernel reads.
#ifndef RBLN_COMPILER_KERNELS_TEST_OPERANDS_H_
#define RBLN_COMPILER_KERNELS_TEST_OPERANDS_H_

#include <cstdint>
#include <random>
#include <vector>

namespace rbln::compiler::testing {

// Sets `values` to `size` uniform values in [-1, 1) drawn from `rng`
// (truncated to bf16 if `bf16`) and `raw` to them as passed to a kernel: bf16
// bits or f32. One draw per element, so callers that share `rng` keep their
// sequences.
void FillOperand(int64_t size, bool bf16, std::mt19937& rng,
                 std::vector<float>& values, std::vector<char>& raw);

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_KERNELS_TEST_OPERANDS_H_

// math.exp on f32 as a polynomial in arith ops (SPEC P5, A2).
//
// Lowered as is, math.exp becomes one call of libm's expf per element: the
// loops of softmax, sigmoid and SiLU cannot be vectorized around it. glibc's
// vector variants (libmvec) would let LLVM vectorize them, but they round
// differently from expf, so the elements a vector loop body computes and
// those of its scalar remainder would get different bits, and a worker's
// slice boundaries (SPEC A2) would change results. This pass expands every
// scalar f32 math.exp into the same sequence of exactly rounded operations
// (fma, floor, integer exponent arithmetic), which LLVM vectorizes without
// changing a bit: Cephes' range reduction and degree-6 polynomial (as
// Eigen's pexp), at most 1.3 ulp from exp over all floats; exp of NaN is
// that NaN, of +inf (and above 88.73) +inf, of -inf (and below -104) +0,
// with subnormal results in between. Runs after the loops are lowered,
// before convert-math-to-llvm.
#ifndef RBLN_COMPILER_POLYNOMIAL_EXP_PASS_H_
#define RBLN_COMPILER_POLYNOMIAL_EXP_PASS_H_

#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

std::unique_ptr<mlir::Pass> CreatePolynomialExpPass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_POLYNOMIAL_EXP_PASS_H_

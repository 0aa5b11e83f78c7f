// Test helpers of the element-wise op families (unary_math_ops_test,
// binary_math_ops_test, activation_ops_test, construction_ops_test): edge
// values per dtype and a check of a one-op graph against a double-precision
// reference rounded to the output dtype.
#ifndef RBLN_COMPILER_FRONTEND_OPS_ELEMENTWISE_TEST_UTIL_H_
#define RBLN_COMPILER_FRONTEND_OPS_ELEMENTWISE_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr ir::DType kAllDTypes[] = {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32,
                                    ir::INT32,   ir::INT64,    ir::BOOL};
constexpr ir::DType kFloatDTypes[] = {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32};

// Float results of integer and bool inputs are float32, as in PyTorch.
inline ir::DType FloatResult(ir::DType t) {
  return IsFloatDType(t) ? t : ir::FLOAT32;
}

// Edge values of `t` (specials, signed zeros, halves, large and small
// values), followed by `random` values in [lo, hi).
inline std::vector<double> Values(ir::DType t, double lo, double hi,
                                  int random = 48, uint32_t seed = 7) {
  std::vector<double> v;
  if (t == ir::BOOL) return {0, 1, 1, 0};
  if (IsFloatDType(t)) {
    v = {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 0.1, -0.7, 7.25,
         100.0, -1000.5, 1e-3, 65504.0, kInf, -kInf, kNaN};
  } else {
    v = {0, 1, -1, 2, -3, 7, -8, 100, 12345};
  }
  for (double x : Random(t, {random}, seed, lo, hi).values) v.push_back(x);
  for (double& x : v) x = RoundTo(t, x);
  return v;
}

// The spacing of `t`'s values at |v| (one unit in the last place).
inline double Ulp(ir::DType t, double v) {
  const double a = std::fabs(v);
  switch (t) {
    case ir::FLOAT32: {
      const float f = static_cast<float>(a);
      const float up = std::nextafter(f, std::numeric_limits<float>::infinity());
      return std::isinf(up) ? f - std::nextafter(f, 0.0f) : up - f;
    }
    case ir::FLOAT16:
      return a < std::ldexp(1.0, -14) ? std::ldexp(1.0, -24)
                                      : std::ldexp(1.0, std::ilogb(a) - 10);
    case ir::BFLOAT16:
      return a < std::ldexp(1.0, -126) ? std::ldexp(1.0, -133)
                                       : std::ldexp(1.0, std::ilogb(a) - 7);
    default:
      return 0;
  }
}

using Reference = std::function<double(const std::vector<double>&)>;

// Runs `graph` on `inputs` (equal element counts, or one element, which
// broadcasts) and compares output `index` with `ref` of the inputs' values
// rounded to its dtype: within `ulps` units in the last place for floats
// (NaN matches NaN, infinities exactly), exactly otherwise.
inline void ExpectMatchesReference(const ir::Graph& graph,
                                   const std::vector<HostTensor>& inputs,
                                   const Reference& ref, double ulps,
                                   const std::string& what, int index = 0) {
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(graph, inputs);
  ASSERT_TRUE(out.ok()) << what << ": " << out.status();
  const HostTensor& got = (*out)[index];
  std::vector<double> want, tol;
  for (size_t i = 0; i < got.values.size(); ++i) {
    std::vector<double> args;
    for (const HostTensor& in : inputs) {
      args.push_back(in.values[in.values.size() == 1 ? 0 : i]);
    }
    want.push_back(RoundTo(got.dtype, ref(args)));
    tol.push_back(ulps * Ulp(got.dtype, want.back()));
  }
  ExpectClose(got, want, tol, what);
}

// A unary graph `op` from `in` to `out` dtype over `values`.
inline void ExpectUnary(const std::string& op, ir::DType in, ir::DType out,
                        const std::vector<double>& values, const Reference& ref,
                        double ulps, const Attrs& attrs = {}) {
  HostTensor x = Tensor(in, {static_cast<int64_t>(values.size())}, values);
  ir::Graph g = OneOpGraph(op, {x.type()}, {Type(out, x.shape)}, attrs);
  ExpectMatchesReference(g, {x}, ref, ulps,
                         absl::StrCat(op, " ", ir::DType_Name(in), " -> ",
                                      ir::DType_Name(out)));
}

// Every pair of `a` x `b` through the binary graph `op`.
inline void ExpectBinary(const std::string& op, ir::DType a_dtype,
                         ir::DType b_dtype, ir::DType out,
                         const std::vector<double>& a,
                         const std::vector<double>& b, const Reference& ref,
                         double ulps, const Attrs& attrs = {}) {
  std::vector<double> lhs, rhs;
  for (double x : a) {
    for (double y : b) {
      lhs.push_back(x);
      rhs.push_back(y);
    }
  }
  const Shape shape = {static_cast<int64_t>(lhs.size())};
  HostTensor x = Tensor(a_dtype, shape, lhs), y = Tensor(b_dtype, shape, rhs);
  ir::Graph g =
      OneOpGraph(op, {x.type(), y.type()}, {Type(out, shape)}, attrs);
  ExpectMatchesReference(
      g, {x, y}, ref, ulps,
      absl::StrCat(op, " ", ir::DType_Name(a_dtype), ", ",
                   ir::DType_Name(b_dtype), " -> ", ir::DType_Name(out)));
}

// The status of compiling and running `op` on one element per input.
inline absl::Status RunStatus(const std::string& op,
                              const std::vector<ir::TensorType>& inputs,
                              const ir::TensorType& out,
                              const Attrs& attrs = {}) {
  std::vector<HostTensor> values;
  for (const ir::TensorType& t : inputs) {
    values.push_back(Tensor(t.dtype(), Shape(t.shape().begin(), t.shape().end()),
                            std::vector<double>(NumElements(Shape(
                                                    t.shape().begin(),
                                                    t.shape().end())),
                                                1.0)));
  }
  return CompileAndRun(OneOpGraph(op, inputs, {out}, attrs), values).status();
}

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_FRONTEND_OPS_ELEMENTWISE_TEST_UTIL_H_

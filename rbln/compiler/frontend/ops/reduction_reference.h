// Test helpers for reduction-like ops: the elements of each reduced output
// (or each row along one dim) of a host tensor, in row-major order, for
// double-precision references.
#ifndef RBLN_COMPILER_FRONTEND_OPS_REDUCTION_REFERENCE_H_
#define RBLN_COMPILER_FRONTEND_OPS_REDUCTION_REFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {

// The reduced-dims mask of `dims` (negative dims wrap; empty: all).
inline std::vector<bool> ReducedMask(const Shape& shape,
                                     const std::vector<int>& dims) {
  const int rank = shape.size();
  std::vector<bool> reduced(rank, dims.empty());
  for (int d : dims) reduced[d < 0 ? d + rank : d] = true;
  return reduced;
}

inline Shape ReducedShapeOf(const Shape& shape,
                            const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(shape[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// For each output element (row-major over the kept dims), the input values
// reduced into it, in row-major order of the reduced dims.
inline std::vector<std::vector<double>> Groups(
    const HostTensor& x, const std::vector<bool>& reduced) {
  int64_t n_out = 1;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (!reduced[d]) n_out *= x.shape[d];
  }
  std::vector<std::vector<double>> groups(n_out);
  for (int64_t i = 0; i < NumElements(x.shape); ++i) {
    int64_t rest = i, out = 0, scale = 1;
    for (int d = static_cast<int>(x.shape.size()) - 1; d >= 0; --d) {
      const int64_t id = rest % x.shape[d];
      rest /= x.shape[d];
      if (!reduced[d]) {
        out += id * scale;
        scale *= x.shape[d];
      }
    }
    groups[out].push_back(x.values[i]);
  }
  return groups;
}

// The rows of `x` along `dim`: Groups with only `dim` reduced. Row r's
// element j sits at flat position RowPosition(shape, dim, r, j).
inline std::vector<std::vector<double>> Rows(const HostTensor& x, int dim) {
  std::vector<bool> reduced(x.shape.size(), false);
  if (!x.shape.empty()) reduced[dim] = true;
  return Groups(x, reduced);
}

inline int64_t RowPosition(const Shape& shape, int dim, int64_t row,
                           int64_t j) {
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t outer = row / inner, in = row % inner;
  return (outer * shape[dim] + j) * inner + in;
}

// Scatters per-row results (row-major rows, `len` values each along `dim`)
// back into a tensor of `shape` with `dim` of size `len`.
inline std::vector<double> FromRows(
    const std::vector<std::vector<double>>& rows, Shape shape, int dim) {
  const int64_t len = rows.empty() ? 0 : rows[0].size();
  shape[dim] = len;
  std::vector<double> out(NumElements(shape));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t j = 0; j < len; ++j) {
      out[RowPosition(shape, dim, r, j)] = rows[r][j];
    }
  }
  return out;
}

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_FRONTEND_OPS_REDUCTION_REFERENCE_H_

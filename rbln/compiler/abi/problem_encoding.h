// What the library problems (gemm_problem.h, conv_problem.h) share: the
// check of their encoding version and the cutting of an extent into
// blocks.
#ifndef RBLN_COMPILER_ABI_PROBLEM_ENCODING_H_
#define RBLN_COMPILER_ABI_PROBLEM_ENCODING_H_

#include <cstdint>
#include <utility>

namespace rbln::compiler {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// {begin, size} of part `block` of `extent` cut into parts of `part`
// elements (the last ones may be short or empty).
std::pair<int64_t, int64_t> BlockRange(int64_t extent, int64_t part,
                                       int64_t block);

// Aborts with "[rbln compiler] oneDNN <problem>: problem encoding <found>,
// expected <expected>" unless they are equal: a kernel passed words of
// another encoding, which no caller can recover from.
void CheckEncodingVersion(const char* problem, int64_t found,
                          int64_t expected);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ABI_PROBLEM_ENCODING_H_

// OpenBLAS, loaded at run time (SPEC P5): the compiler builds and runs
// without it, and matmul then lowers to loops with the same results.
#ifndef RBLN_COMPILER_BLAS_LOADER_H_
#define RBLN_COMPILER_BLAS_LOADER_H_

#include "absl/status/statusor.h"

namespace rbln::compiler {

// OpenBLAS threads per BLAS call (default 1; see blas_loader.cc), read once
// when OpenBLAS loads. OPENBLAS_NUM_THREADS, when set, wins.
inline constexpr char kBlasThreadsVar[] = "RBLN_BLAS_THREADS";

// dlopen()s libopenblas.so.0 once, RTLD_GLOBAL so that JIT'd code resolves
// cblas_sgemm through the process's symbols, and sets its thread count
// (kBlasThreadsVar). True if cblas_sgemm is there. Thread-safe; the library
// is never unloaded.
bool LoadOpenBlas();

// Whether the BLAS rewrite stage runs: RBLN_COMPILER_BLAS (a bool, default
// on; read once) and OpenBLAS loaded. An error for a malformed variable.
absl::StatusOr<bool> BlasRewriteEnabled();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_BLAS_LOADER_H_

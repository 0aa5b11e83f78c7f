// The GEMM libraries, loaded at run time (SPEC P5): oneDNN (onednn_gemm.h)
// and OpenBLAS. The compiler builds and runs without them, and matmul then
// lowers to loops with the same results up to f32 summation order.
#ifndef RBLN_COMPILER_KERNELS_BLAS_LOADER_H_
#define RBLN_COMPILER_KERNELS_BLAS_LOADER_H_

#include <optional>

#include "absl/status/statusor.h"
#include "rbln/compiler/abi/kernel_abi.h"

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
// on; read once) and a GEMM library loaded. An error for a malformed
// variable.
absl::StatusOr<bool> BlasRewriteEnabled();

// Which library GEMMs go to (kGemmLibraryVar, read once): `auto` (the
// default) takes oneDNN if it loads, else OpenBLAS; `onednn` or `openblas`
// take that one only. Empty if the chosen one does not load.
inline constexpr char kGemmLibraryVar[] = "RBLN_COMPILER_GEMM_LIBRARY";
absl::StatusOr<std::optional<GemmLibrary>> ChosenGemmLibrary();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_BLAS_LOADER_H_

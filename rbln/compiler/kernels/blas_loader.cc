#include "rbln/compiler/kernels/blas_loader.h"

#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "rbln/compiler/kernels/onednn_library.h"
#include "rbln/core/env.h"

namespace rbln::compiler {

namespace {

// Compiled kernels call BLAS from the executor's threads, and a program
// partitioned over chiplet workers from several at once, so OpenBLAS's own
// thread pool mostly oversubscribes the cores. On the 2-core shared build
// machine one thread ran the 512^3 sgemm 1.5-1.8x faster than OpenBLAS's
// default of two (compile_bench --matmul; commit 028fb8e).
// OPENBLAS_NUM_THREADS, when set, is left to OpenBLAS.
void SetBlasThreads(void* handle) {
  if (env::GetRaw("OPENBLAS_NUM_THREADS").has_value()) return;
  absl::StatusOr<int64_t> threads = env::GetInt(kBlasThreadsVar, 1, 1, 1024);
  if (!threads.ok()) {
    std::fprintf(stderr, "[rbln compiler] %s; using 1 BLAS thread\n",
                 std::string(threads.status().message()).c_str());
    threads = 1;
  }
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(handle, "openblas_set_num_threads"))) {
    set(static_cast<int>(*threads));
  }
}

}  // namespace

bool LoadOpenBlas() {
  static const bool loaded = [] {
    void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr || dlsym(handle, "cblas_sgemm") == nullptr) return false;
    SetBlasThreads(handle);
    return true;
  }();
  return loaded;
}

absl::StatusOr<std::optional<GemmLibrary>> ChosenGemmLibrary() {
  static const auto* choice = new absl::StatusOr<std::string>(
      env::GetChoice(kGemmLibraryVar, "auto", {"auto", "onednn", "openblas"}));
  if (!choice->ok()) return choice->status();
  const std::string& name = **choice;
  if (name != "openblas" && LoadOnednn()) return GemmLibrary::kOnednn;
  if (name != "onednn" && LoadOpenBlas()) return GemmLibrary::kOpenBlas;
  return std::nullopt;
}

absl::StatusOr<bool> BlasRewriteEnabled() {
  static const auto* enabled = new absl::StatusOr<bool>(
      env::GetBool("RBLN_COMPILER_BLAS", /*default_value=*/true));
  if (!enabled->ok() || !**enabled) return *enabled;
  absl::StatusOr<std::optional<GemmLibrary>> library = ChosenGemmLibrary();
  if (!library.ok()) return library.status();
  return library->has_value();
}

}  // namespace rbln::compiler

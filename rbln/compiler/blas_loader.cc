#include "rbln/compiler/blas_loader.h"

#include <dlfcn.h>

#include "rbln/core/env.h"

namespace rbln::compiler {

bool LoadOpenBlas() {
  static const bool loaded = [] {
    void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL);
    return handle != nullptr && dlsym(handle, "cblas_sgemm") != nullptr;
  }();
  return loaded;
}

absl::StatusOr<bool> BlasRewriteEnabled() {
  static const auto* enabled = new absl::StatusOr<bool>(
      env::GetBool("RBLN_COMPILER_BLAS", /*default_value=*/true));
  if (!enabled->ok() || !**enabled) return *enabled;
  return LoadOpenBlas();
}

}  // namespace rbln::compiler

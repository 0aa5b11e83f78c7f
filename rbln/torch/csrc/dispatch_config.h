// Dispatch settings read once from the environment (SPEC H2):
//   TORCH_RBLN_DEPLOY=ON                    skip every pre-dispatch check
//   TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK  comma list of checks to skip:
//       dtype, scalar, nan_inf, alignment, storage_offset, all
#ifndef RBLN_TORCH_CSRC_DISPATCH_CONFIG_H_
#define RBLN_TORCH_CSRC_DISPATCH_CONFIG_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln::torch_backend {

enum class Check { kDtype, kScalar, kNanInf, kAlignment, kStorageOffset };
absl::string_view CheckName(Check check);

struct DispatchConfig {
  bool deploy = false;
  bool skip[5] = {};
  bool Runs(Check c) const { return !deploy && !skip[static_cast<int>(c)]; }

  static absl::StatusOr<DispatchConfig> FromEnvironment();
};

// The process's settings; throws (naming the variable) on a bad value.
const DispatchConfig& GetDispatchConfig();

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_CONFIG_H_

// Dispatch settings read once from the environment (SPEC H2):
//   TORCH_RBLN_DEPLOY=ON                    skip every pre-dispatch check
//   TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK  comma list of checks to skip:
//       dtype, scalar, nan_inf, alignment, attention, storage_offset, all
// The checks run in the order of the enum (SPEC H1); `attention` is H4's
// query-length check of scaled_dot_product_attention.
#ifndef RBLN_TORCH_CSRC_DISPATCH_DISPATCH_CONFIG_H_
#define RBLN_TORCH_CSRC_DISPATCH_DISPATCH_CONFIG_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln::torch_backend {

enum class Check { kDtype, kScalar, kNanInf, kAlignment, kAttention, kStorageOffset };
inline constexpr int kNumChecks = 6;
absl::string_view CheckName(Check check);

struct DispatchConfig {
  bool deploy = false;
  bool skip[kNumChecks] = {};
  bool Runs(Check c) const { return !deploy && !skip[static_cast<int>(c)]; }

  static absl::StatusOr<DispatchConfig> FromEnvironment();
};

// The process's settings; throws (naming the variable) on a bad value.
const DispatchConfig& GetDispatchConfig();

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_DISPATCH_CONFIG_H_

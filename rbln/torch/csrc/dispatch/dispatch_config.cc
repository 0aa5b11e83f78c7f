#include "rbln/torch/csrc/dispatch/dispatch_config.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "rbln/core/env.h"
#include "rbln/core/status_macros.h"
#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {

absl::string_view CheckName(Check check) {
  switch (check) {
    case Check::kDtype:
      return "dtype";
    case Check::kScalar:
      return "scalar";
    case Check::kNanInf:
      return "nan_inf";
    case Check::kAlignment:
      return "alignment";
    case Check::kAttention:
      return "attention";
    case Check::kStorageOffset:
      return "storage_offset";
  }
  return "?";
}

absl::StatusOr<DispatchConfig> DispatchConfig::FromEnvironment() {
  DispatchConfig config;
  RBLN_ASSIGN_OR_RETURN(config.deploy, env::GetBool("TORCH_RBLN_DEPLOY", false));
  constexpr char kVar[] = "TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK";
  std::optional<std::string> raw = env::GetRaw(kVar);
  if (!raw) return config;
  for (absl::string_view item : absl::StrSplit(*raw, ',', absl::SkipWhitespace())) {
    const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(item));
    bool known = false;
    for (int c = 0; c < kNumChecks; ++c) {
      if (name == "all" || name == CheckName(static_cast<Check>(c))) {
        config.skip[c] = true;
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "environment variable %s has invalid value '%s': unknown check '%s'; "
          "expected a comma list of dtype, scalar, nan_inf, alignment, "
          "attention, storage_offset, all",
          kVar, *raw, name));
    }
  }
  return config;
}

const DispatchConfig& GetDispatchConfig() {
  static const auto* config =
      new absl::StatusOr<DispatchConfig>(DispatchConfig::FromEnvironment());
  if (!config->ok()) ThrowStatus(config->status());
  return **config;
}

}  // namespace rbln::torch_backend

#include "rbln/torch/csrc/fallback_policy.h"

#include <c10/util/Exception.h>

#include <iostream>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "rbln/core/env.h"
#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {
namespace {

struct Policy {
  bool log_info = false;
  bool disabled[3] = {};
};

absl::StatusOr<Policy> PolicyFromEnvironment() {
  Policy p;
  constexpr char kLevel[] = "TORCH_RBLN_LOG_LEVEL";
  absl::StatusOr<std::string> level =
      env::GetChoice(kLevel, "WARNING", {"DEBUG", "INFO", "WARNING", "ERROR"});
  if (!level.ok()) return level.status();
  p.log_info = *level == "DEBUG" || *level == "INFO";
  constexpr char kDisable[] = "TORCH_RBLN_DISABLE_FALLBACK";
  std::optional<std::string> raw = env::GetRaw(kDisable);
  if (!raw) return p;
  for (absl::string_view item : absl::StrSplit(*raw, ',', absl::SkipWhitespace())) {
    const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(item));
    bool known = false;
    for (int c = 0; c < 3; ++c) {
      if (name == "all" || name == FallbackCategoryName(static_cast<FallbackCategory>(c))) {
        p.disabled[c] = true;
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "environment variable %s has invalid value '%s': unknown category "
          "'%s'; expected a comma list of compile_error, unsupported_op, "
          "strided_copy_error, all",
          kDisable, *raw, name));
    }
  }
  return p;
}

const Policy& GetPolicy() {
  static const auto* policy = new absl::StatusOr<Policy>(PolicyFromEnvironment());
  if (!policy->ok()) ThrowStatus(policy->status());
  return **policy;
}

std::mutex g_provider_mu;
std::function<std::string()>* g_provider = nullptr;

}  // namespace

std::string UserSourceLocation() {
  std::function<std::string()> provider;
  {
    std::lock_guard<std::mutex> lock(g_provider_mu);
    if (g_provider != nullptr) provider = *g_provider;
  }
  return provider ? provider() : "";
}

absl::string_view FallbackCategoryName(FallbackCategory c) {
  switch (c) {
    case FallbackCategory::kCompileError:
      return "compile_error";
    case FallbackCategory::kUnsupportedOp:
      return "unsupported_op";
    case FallbackCategory::kStridedCopyError:
      return "strided_copy_error";
  }
  return "?";
}

void CheckFallbackAllowed(FallbackCategory category, absl::string_view op_name,
                          absl::string_view detail) {
  const absl::string_view name = FallbackCategoryName(category);
  const absl::string_view instead = category == FallbackCategory::kStridedCopyError
                                        ? "go through host memory"
                                        : "run on CPU";
  TORCH_CHECK(!GetPolicy().disabled[static_cast<int>(category)], "rbln: `", op_name,
              "` would ", instead, " (", name, detail.empty() ? "" : ": ", detail,
              ") but TORCH_RBLN_DISABLE_FALLBACK forbids the ", name,
              " fallback; remove '", name,
              "' from TORCH_RBLN_DISABLE_FALLBACK to allow it");
}

void OnFallback(FallbackCategory category, absl::string_view op_name,
                absl::string_view detail) {
  CheckFallbackAllowed(category, op_name, detail);
  LogOpFallback(op_name);
}

void LogOpFallback(absl::string_view op_name, absl::string_view reason) {
  if (!GetPolicy().log_info) return;
  LogCheckFallback(absl::StrCat("`", op_name, "` op ran on CPU instead of RBLN",
                                reason.empty() ? "" : absl::StrCat(" (", reason, ")")));
}

void LogCheckFallback(absl::string_view message) {
  if (!GetPolicy().log_info) return;
  const std::string where = UserSourceLocation();
  std::cerr << "[TORCH-RBLN][INFO] " << message
            << (where.empty() ? "" : " (at " + where + ")") << std::endl;
}

void SetSourceLocationProvider(std::function<std::string()> provider) {
  std::lock_guard<std::mutex> lock(g_provider_mu);
  if (g_provider == nullptr) g_provider = new std::function<std::string()>();
  *g_provider = std::move(provider);
}

}  // namespace rbln::torch_backend

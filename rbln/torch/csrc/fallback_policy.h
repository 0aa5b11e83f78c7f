// What happens when an op falls back to the CPU (SPEC I4, I6):
//   TORCH_RBLN_LOG_LEVEL=INFO (or DEBUG) logs fallbacks of ops without an
//     rbln kernel, with the user's source location:
//     [TORCH-RBLN][INFO] `aten::sin` op ran on CPU instead of RBLN (at x.py:3(f))
//     and, the same way with the reason, fallbacks decided by the wrapper's
//     checks (alignment H3, storage offset H6; attention H4 with its own
//     message). Fallbacks decided by the shim's checks (dtype, scalar,
//     NaN/Inf) are not logged (explain() shows them). Every fallback call is
//     logged, not once per op: the log is a trace of where the CPU ran.
//   TORCH_RBLN_DISABLE_FALLBACK=compile_error,unsupported_op,strided_copy_error
//     (or all) turns a category into an error naming the op and how to allow
//     it again. Read once, at the first fallback.
#ifndef RBLN_TORCH_CSRC_FALLBACK_POLICY_H_
#define RBLN_TORCH_CSRC_FALLBACK_POLICY_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"

namespace rbln::torch_backend {

enum class FallbackCategory { kCompileError, kUnsupportedOp, kStridedCopyError };
absl::string_view FallbackCategoryName(FallbackCategory c);

// Throws if `category` is disabled: the error names `op_name`, what the
// fallback would do (run on the CPU; for kStridedCopyError, copy through
// host memory), `detail` (what and why) and how to allow it again.
void CheckFallbackAllowed(FallbackCategory category, absl::string_view op_name,
                          absl::string_view detail = "");

// CheckFallbackAllowed(), then the INFO log line of an op fallback (SPEC
// I4); the caller runs the op on the CPU.
void OnFallback(FallbackCategory category, absl::string_view op_name,
                absl::string_view detail = "");

// The INFO log line of an op that ran on the CPU (SPEC I4), with `reason`
// (e.g. "alignment: ...") in parentheses when not empty, and the user's
// source location. The one log path of OnFallback and the wrapper checks.
void LogOpFallback(absl::string_view op_name, absl::string_view reason = "");

// Logs a fallback decided by a pre-dispatch check whose message the spec
// fixes (SPEC H4: "sdpa_overrideable (query sequence length N not aligned to
// 32) op ran on CPU") at INFO, with the user's source location.
void LogCheckFallback(absl::string_view message);

// Returns "file.py:LINE(func)" of the user's code, or "" (set by torch_rbln._C
// so that this library needs no Python).
void SetSourceLocationProvider(std::function<std::string()> provider);
// The provider's answer ("" without one). It takes the GIL: never call it
// while holding a runtime lock.
std::string UserSourceLocation();

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_FALLBACK_POLICY_H_

// The dispatch layer's torch.rbln.explain() signals (SPEC N3), fired where
// the hidden host work happens. Each bumps counters (see
// rbln/core/signal_recorder.h) and, inside explain(with_stack=True), records
// the user's source line.
#ifndef RBLN_TORCH_CSRC_EXPLAIN_SIGNALS_H_
#define RBLN_TORCH_CSRC_EXPLAIN_SIGNALS_H_

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace rbln::torch_backend {

// host_bounce/d2d_copy: a device-to-device copy (strided or converting) that
// went through host memory; `bytes` is the source span read to the host.
void FireHostBounce(int64_t bytes);

// A compiled-kernel op that did not run its program. `op` is the short name
// used in counter names ("add"), `overload` the full one ("aten::add.Tensor"),
// `why` the reason ("dtype", "alignment", "compile_error", ...), `bytes` the
// rbln tensor arguments that now move to the host.
// Checks that the wrapper runs after a warm-cache miss (alignment, H4's
// "query sequence length N not aligned to 32", storage offset) send every such call through the compile path again, so they are
// dispatch/recompile (SPEC H1); every other reason is dispatch/cpu_fallback.
// Also bumps dispatch/cpu_fallback_why/<op>/<why> and, for recompiles,
// dispatch/recompile and dispatch/recompile/<op>.
void RecordCompiledOpFallback(absl::string_view op, absl::string_view overload,
                              absl::string_view why, int64_t bytes);

// dispatch/cpu_fallback with why "unsupported_op": an op without an rbln
// kernel ran on the CPU through the boxed fallback.
void FireUnsupportedOpFallback(const c10::OperatorHandle& op,
                               const torch::jit::Stack& stack);

// dispatch/cpu_fallback with why "pinned_to_cpu": an op pinned to the CPU
// (SPEC I5) ran on its fast host path. explain() shows it (host work) but
// does not list it as an optimization candidate.
// `detail` is PinnedHostPathDetail(overload), formatted once per op.
std::string PinnedHostPathDetail(absl::string_view overload);
void FirePinnedHostPath(absl::string_view detail, int64_t bytes);

// dispatch/cpu_fallback of a torch.compile graph: the compile_error fallback
// ran the whole graph on the CPU (`what` is "graph NAME", `why`
// "compile_error"), or a host op inside a compiled graph ran on the CPU
// (`what` is the op, `why` "host_op"); `bytes` are the device bytes read to
// the host for it.
void FireGraphCpuFallback(absl::string_view what, absl::string_view why,
                          int64_t bytes);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_EXPLAIN_SIGNALS_H_

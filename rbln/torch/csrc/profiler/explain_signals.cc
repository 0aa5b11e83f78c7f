#include "rbln/torch/csrc/profiler/explain_signals.h"

#include <ATen/core/Tensor.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rbln/core/counters.h"
#include "rbln/core/signal_recorder.h"

namespace rbln::torch_backend {
namespace {

const Signal& HostBounce() {
  static const auto* s = new Signal("host_bounce/d2d_copy");
  return *s;
}

const Signal& CpuFallback() {
  static const auto* s = new Signal("dispatch/cpu_fallback");
  return *s;
}

const Signal& Recompile() {
  static const auto* s = new Signal("dispatch/recompile");
  return *s;
}

int64_t DeviceBytes(const at::Tensor& t) {
  return t.defined() && !t.is_cpu() ? static_cast<int64_t>(t.nbytes()) : 0;
}

}  // namespace

void FireHostBounce(int64_t bytes) { HostBounce().Fire(bytes); }

void RecordCompiledOpFallback(absl::string_view op, absl::string_view overload,
                              absl::string_view why, int64_t bytes) {
  CounterRegistry& r = CounterRegistry::Global();
  r.Get(absl::StrCat("dispatch/cpu_fallback_why/", op, "/", why))->Increment();
  const std::string detail = absl::StrCat(overload, ": ", why);
  // H4's attention check ("query sequence length N not aligned to 32") is a
  // wrapper check like alignment.
  if (why == "alignment" || why == "storage_offset" ||
      absl::StartsWith(why, "query sequence length")) {
    r.Get("dispatch/recompile")->Increment();
    r.Get(absl::StrCat("dispatch/recompile/", op))->Increment();
    Recompile().Fire(bytes, detail);
  } else {
    CpuFallback().Fire(bytes, detail);
  }
}

std::string PinnedHostPathDetail(absl::string_view overload) {
  return absl::StrCat(overload, ": pinned_to_cpu");
}

void FirePinnedHostPath(absl::string_view detail, int64_t bytes) {
  CpuFallback().Fire(bytes, detail);
}

void FireGraphCpuFallback(absl::string_view what, absl::string_view why,
                          int64_t bytes) {
  CpuFallback().Fire(bytes, absl::StrCat(what, ": ", why));
}

void FireUnsupportedOpFallback(const c10::OperatorHandle& op,
                               const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  int64_t bytes = 0;
  for (size_t i = stack.size() - schema.arguments().size(); i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      bytes += DeviceBytes(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) bytes += DeviceBytes(t);
    }
  }
  CpuFallback().Fire(bytes, absl::StrCat(schema.name(),
                                         schema.overload_name().empty() ? "" : ".",
                                         schema.overload_name(), ": unsupported_op"));
}

}  // namespace rbln::torch_backend

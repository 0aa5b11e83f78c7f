// Every aten op without an rbln kernel runs on the CPU through PyTorch's
// boxed fallback: arguments are downloaded, the CPU kernel runs, results are
// uploaded (SPEC G1, I3). Each fallback is counted per op.
#include "rbln/torch/csrc/cpu_fallback.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "absl/strings/str_cat.h"
#include "rbln/core/counters.h"

namespace rbln::torch_backend {

void RblnCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static Counter* total = CounterRegistry::Global().Get("dispatch/cpu_fallback");
  total->Increment();
  CounterRegistry::Global()
      .Get(absl::StrCat("dispatch/cpu_fallback/", op.schema().operator_name().name,
                        op.schema().overload_name().empty() ? "" : ".",
                        op.schema().overload_name()))
      ->Increment();
  at::native::cpu_fallback(op, stack);
}

namespace {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&RblnCpuFallback>());
}

}  // namespace
}  // namespace rbln::torch_backend

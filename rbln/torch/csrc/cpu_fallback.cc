// Every aten op without an rbln kernel runs on the CPU through PyTorch's
// boxed fallback: arguments are downloaded, the CPU kernel runs, results are
// uploaded (SPEC G1, I3). Each fallback is counted per op.
#include "rbln/torch/csrc/cpu_fallback.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "absl/strings/str_cat.h"
#include "rbln/core/counters.h"
#include "rbln/torch/csrc/explain_signals.h"
#include "rbln/torch/csrc/fallback_policy.h"

namespace rbln::torch_backend {

namespace {

// Tensors of one op must be on one logical device (SPEC B4); the CPU kernel
// would otherwise hide the mistake by moving everything to the host.
void CheckSameDevice(const c10::OperatorHandle& op,
                     const torch::jit::Stack& stack) {
  const size_t num_args = op.schema().arguments().size();
  std::optional<c10::Device> first;
  auto check = [&](const at::Tensor& t) {
    if (!t.defined() || t.is_cpu()) return;
    if (!first) {
      first = t.device();
    } else {
      TORCH_CHECK(t.device() == *first,
                  "Expected all tensors to be on the same device, but found at "
                  "least two devices, ", *first, " and ", t.device(),
                  "! (when checking arguments for ", op.schema().name(),
                  "); move them with .to(device) first");
    }
  };
  for (size_t i = stack.size() - num_args; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      check(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) check(t);
    }
  }
}

}  // namespace

void RblnCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  CheckSameDevice(op, *stack);
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

// Ops with no rbln kernel at all: the unsupported_op category (SPEC I4, I6).
void UnsupportedOpFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OnFallback(FallbackCategory::kUnsupportedOp, op.schema().name());
  FireUnsupportedOpFallback(op, *stack);
  RblnCpuFallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&UnsupportedOpFallback>());
}

}  // namespace
}  // namespace rbln::torch_backend

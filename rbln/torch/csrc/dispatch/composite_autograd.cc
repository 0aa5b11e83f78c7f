// Autograd of the CompositeImplicitAutograd ops that have an rbln kernel
// (SPEC G1). A CompositeImplicitAutograd op gets its gradient from its
// decomposition: the ops it calls are differentiable. An rbln kernel
// registered for such an op (repeat_interleave.self_int, max.other, ...)
// replaces the decomposition for the PrivateUse1 key and, with it, for
// AutogradPrivateUse1: the dispatcher then finds no autograd kernel and
// PyTorch's autograd fallback gives no gradient ("autograd kernel was not
// registered"). As PyTorch expects of a backend that overrides a composite
// op (XLA does the same), the op also gets an AutogradPrivateUse1 kernel:
//   - a call that needs a gradient (grad mode on and a tensor argument that
//     requires grad or carries a forward-mode tangent) runs the
//     CompositeImplicitAutograd kernel itself, so autograd records the
//     decomposition's ops, which dispatch to rbln kernels one by one;
//   - any other call goes below autograd to the rbln kernel.
// out= overloads get the same kernel: their decomposition raises PyTorch's
// "don't support automatic differentiation" error, as on the CPU.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

namespace rbln::torch_backend {
namespace {

bool NeedsGradient(const at::Tensor& t) {
  return t.defined() && (t.requires_grad() || t._fw_grad(/*level=*/0).defined());
}

// Does any tensor argument of the call need a gradient?
bool CallNeedsGradient(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (!c10::GradMode::is_enabled()) return false;
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && NeedsGradient(v.toTensor())) return true;
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (NeedsGradient(t)) return true;
      }
    }
  }
  return false;
}

void CompositeAutograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                       torch::jit::Stack* stack) {
  if (CallNeedsGradient(op, *stack)) {
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, *stack);
    return;
  }
  const at::AutoDispatchBelowAutograd below_autograd;
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

// The CompositeImplicitAutograd overloads with an rbln kernel
// (compiled_ops.cc) whose results can carry a gradient. autograd_test.py
// checks that every such op is listed here.
constexpr const char* kCompositeOpsWithRblnKernels[] = {
    "repeat_interleave.self_int",
    "max.other",
    "min.other",
    "max.out",
    "min.out",
};

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  for (const char* name : kCompositeOpsWithRblnKernels) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&CompositeAutograd>());
  }
}

}  // namespace
}  // namespace rbln::torch_backend

// The "pinned to CPU" ops (SPEC I5): ops that fall back often in eager
// models and have no device kernel get a fast host path instead of the boxed
// CPU fallback. Per call it
//   1. reads every rbln tensor argument's span straight from the runtime
//      (one DMA each, no dispatcher round trip through aten::_to_cpu),
//   2. redispatches the op to its CPU kernel,
//   3. writes mutated arguments (out=, in-place) back in place and uploads
//      fresh results,
// and counts dispatch/host_path[/<op>] with counters resolved once per op.
// The generic fallback also formats a per-call counter name, checks the
// TORCH_RBLN_DISABLE_FALLBACK policy and logs; these ops are on the host by
// design, so neither applies (SPEC I6: pinned ops always run on the host).
// explain() still shows them as dispatch/cpu_fallback (host work) with why
// "pinned_to_cpu", and leaves them out of its optimization candidates.
//
// The list (evidence: fallback counters of rbln/tests/demo.py-style eager
// runs -- the GPT-2 block's layer norm, an SGD/Adam training step, and sdpa's
// math decomposition under autograd):
//   native_batch_norm             batch_norm and instance_norm
//   threshold_backward.grad_input relu's backward
//   addcmul.out, addcdiv.out      optimizer updates (Adam, RMSprop, momentum)
//   tril.out, isneginf.out,       the math sdpa's causal mask and its
//   all.all_out, where.self_out     all-masked-row guard (training)
// and ops pinned for PyTorch's opmath (docs/numerics.md): without an rbln
// kernel these would run ATen's composite kernel, which computes a float16/
// bfloat16 input in its own dtype where the CPU kernel computes in float32
// (at::opmath_type) with eps and alpha in float32:
//   native_layer_norm             math_native_layer_norm: native_batch_norm
//                                 in half, where eps=1e-12 rounds to 0 and a
//                                 zero-variance row becomes 0 * inf = NaN
//   native_group_norm             var_mean, + eps and rsqrt in half (same)
//   silu_backward, mish_backward  math_*_backward round every step in half
//                                 (silu's and mish's backward in training)
//   addr, addr.out                math_addr rounds the outer product in half
//                                 before it adds beta * self
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rbln/core/counters.h"
#include "rbln/torch/csrc/dispatch/cpu_fallback.h"
#include "rbln/torch/csrc/profiler/explain_signals.h"
#include "rbln/torch/csrc/streams/sync_debug.h"
#include "rbln/torch/csrc/transfer/tensor_transfer.h"

namespace rbln::torch_backend {
namespace {

bool OnDevice(const at::Tensor& t) { return t.defined() && !t.is_cpu() && !t.is_meta(); }

// A host copy of a device tensor argument, for the CPU kernel.
at::Tensor ToHost(const at::Tensor& t) {
  if (!OnDevice(t)) return t;
  return DownloadSpan(t);
}

// A result of the CPU kernel, as a fresh device tensor on `device`.
at::Tensor ToDevice(const at::Tensor& host, c10::Device device) {
  at::Tensor dst = at::empty_strided(host.sizes(), host.strides(), host.options().device(device));
  CopyWithDevice(host, dst);
  return dst;
}

class HostPathKernel final : public c10::OperatorKernel {
 public:
  explicit HostPathKernel(const std::string& name)
      : total_(CounterRegistry::Global().Get("dispatch/host_path")),
        per_op_(CounterRegistry::Global().Get(absl::StrCat("dispatch/host_path/aten::", name))),
        detail_(PinnedHostPathDetail(absl::StrCat("aten::", name))) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet,
                  torch::jit::Stack* stack) {
    CheckSameDevice(op, *stack);
    const SyncOpScope scope(op.schema().name(), " (host path: runs on the CPU)");
    const c10::FunctionSchema& schema = op.schema();
    const size_t n = schema.arguments().size();
    const size_t first = stack->size() - n;
    std::optional<c10::Device> device;
    int64_t bytes = 0;
    // Written arguments: (argument index, the device tensor).
    std::vector<std::pair<size_t, at::Tensor>> written;
    for (size_t i = 0; i < n; ++i) {
      c10::IValue& v = (*stack)[first + i];
      if (v.isTensor()) {
        const at::Tensor t = v.toTensor();
        if (!OnDevice(t)) continue;
        if (!device) device = t.device();
        bytes += t.nbytes();
        const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
        const bool write = alias != nullptr && alias->isWrite();
        if (write) written.emplace_back(i, t);
        // An out= argument's contents are overwritten: no download.
        v = write && schema.arguments()[i].is_out()
                ? at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU))
                : ToHost(t);
      } else if (v.isTensorList()) {
        std::vector<at::Tensor> host;
        for (const at::Tensor& t : v.toTensorList()) {
          if (OnDevice(t)) {
            if (!device) device = t.device();
            bytes += t.nbytes();
          }
          host.push_back(ToHost(t));
        }
        v = c10::IValue(host);
      } else if (v.isOptionalTensorList()) {
        // No pinned op takes one; the generic fallback handles them.
        return RblnCpuFallback(op, stack);
      }
    }
    if (!device) return RblnCpuFallback(op, stack);  // Nothing on rbln.
    total_->Increment();
    per_op_->Increment();
    FirePinnedHostPath(detail_, bytes);
    // Host copies of written arguments, by argument index (the stack entry
    // is consumed by the call).
    std::vector<at::Tensor> written_host;
    for (const auto& [index, dev] : written) written_host.push_back((*stack)[first + index].toTensor());

    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

    for (size_t w = 0; w < written.size(); ++w) {
      const at::Tensor& dev = written[w].second;
      const at::Tensor& host = written_host[w];
      if (dev.sizes() != host.sizes()) const_cast<at::Tensor&>(dev).resize_(host.sizes());
      CopyWithDevice(host, dev);
    }
    const size_t num_returns = schema.returns().size();
    for (size_t r = 0; r < num_returns; ++r) {
      c10::IValue& v = (*stack)[stack->size() - num_returns + r];
      if (!v.isTensor()) continue;
      const at::Tensor& t = v.toTensor();
      bool replaced = false;
      for (size_t w = 0; w < written.size() && !replaced; ++w) {
        if (t.is_same(written_host[w])) {
          v = written[w].second;  // out= / in-place returns its argument.
          replaced = true;
        }
      }
      if (!replaced && t.defined() && t.is_cpu()) v = ToDevice(t, *device);
    }
  }

 private:
  Counter* const total_;
  Counter* const per_op_;
  const std::string detail_;  // explain()'s detail, formatted once.
};

constexpr const char* kPinnedToCpu[] = {
    "native_batch_norm",  "threshold_backward.grad_input",
    "addcmul.out",        "addcdiv.out",
    "tril.out",           "isneginf.out",
    "all.all_out",        "where.self_out",
    // Opmath: the CPU kernel computes half inputs in float32.
    "native_layer_norm",  "native_group_norm",
    "silu_backward",      "mish_backward",
    "addr",               "addr.out",
};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kPinnedToCpu) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<HostPathKernel>(name)));
  }
}

}  // namespace
}  // namespace rbln::torch_backend

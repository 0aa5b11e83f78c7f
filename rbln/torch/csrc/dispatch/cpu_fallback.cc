// Every aten op without an rbln kernel runs on the CPU through PyTorch's
// boxed fallback: arguments are downloaded, the CPU kernel runs, results are
// uploaded (SPEC G1, I3). Each fallback is counted per op.
#include "rbln/torch/csrc/dispatch/cpu_fallback.h"

#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rbln/core/counters.h"
#include "rbln/torch/csrc/fallback_policy.h"
#include "rbln/torch/csrc/profiler/explain_signals.h"
#include "rbln/torch/csrc/rng/generator.h"
#include "rbln/torch/csrc/streams/sync_debug.h"

namespace rbln::torch_backend {

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

namespace {

void CountCpuFallback(const c10::OperatorHandle& op) {
  static Counter* total = CounterRegistry::Global().Get("dispatch/cpu_fallback");
  total->Increment();
  CounterRegistry::Global()
      .Get(absl::StrCat("dispatch/cpu_fallback/", op.schema().operator_name().name,
                        op.schema().overload_name().empty() ? "" : ".",
                        op.schema().overload_name()))
      ->Increment();
}

}  // namespace

void RblnCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  CheckSameDevice(op, *stack);
  CountCpuFallback(op);
  const SyncOpScope scope(op.schema().name(), " (runs on the CPU)");
  // Random ops draw from the rbln device's generator, not the CPU's.
  ReplaceDeviceGenerators(op, stack);
  at::native::cpu_fallback(op, stack);
}

void RblnSdpaCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  CheckSameDevice(op, *stack);
  CountCpuFallback(op);
  // (query, key, value, attn_bias?, dropout_p, is_causal, return_debug_mask,
  //  *, scale?)
  const size_t n = op.schema().arguments().size();
  TORCH_INTERNAL_ASSERT(n == 8, "rbln: unexpected schema ", op.schema());
  const c10::IValue* args = &(*stack)[stack->size() - n];
  const at::Tensor query = args[0].toTensor();
  const at::Tensor key = args[1].toTensor();
  const at::Tensor value = args[2].toTensor();
  std::optional<at::Tensor> bias;
  if (!args[3].isNone()) bias = args[3].toTensor().cpu();
  const double dropout_p = args[4].toDouble();
  const bool is_causal = args[5].toBool();
  std::optional<double> scale;
  if (!args[7].isNone()) scale = args[7].toDouble();
  const at::Tensor out =
      at::scaled_dot_product_attention(query.cpu(), key.cpu(), value.cpu(), bias, dropout_p,
                                       is_causal, scale)
          .to(query.device());
  const int64_t max_q = query.size(-2), max_k = key.size(-2);
  torch::jit::drop(*stack, n);
  const at::TensorOptions options = out.options();
  torch::jit::push(*stack, out, at::empty({0}, options.dtype(at::kFloat)),
                   at::empty({0}, options.dtype(at::kLong)),
                   at::empty({0}, options.dtype(at::kLong)), max_q, max_k,
                   at::empty({0}, options.dtype(at::kLong)),
                   at::empty({0}, options.dtype(at::kLong)), at::empty({0}, options));
}

void RblnConvolutionCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  CheckSameDevice(op, *stack);
  CountCpuFallback(op);
  const size_t n = op.schema().arguments().size();
  const c10::IValue* args = &(*stack)[stack->size() - n];
  auto cpu = [](const c10::IValue& v) -> std::optional<at::Tensor> {
    if (v.isNone() || !v.toTensor().defined()) return std::nullopt;
    return v.toTensor().cpu();
  };
  if (op.schema().name() == "aten::convolution_overrideable") {
    // (input, weight, bias?, stride, padding, dilation, transposed,
    //  output_padding, groups)
    TORCH_INTERNAL_ASSERT(n == 9, "rbln: unexpected schema ", op.schema());
    const at::Tensor input = args[0].toTensor();
    const at::Tensor out =
        at::convolution(*cpu(args[0]), *cpu(args[1]), cpu(args[2]), args[3].toIntVector(),
                        args[4].toIntVector(), args[5].toIntVector(), args[6].toBool(),
                        args[7].toIntVector(), args[8].toInt())
            .to(input.device());
    torch::jit::drop(*stack, n);
    torch::jit::push(*stack, out);
    return;
  }
  // (grad_output, input, weight, stride, padding, dilation, transposed,
  //  output_padding, groups, output_mask)
  TORCH_INTERNAL_ASSERT(op.schema().name() == "aten::convolution_backward_overrideable" && n == 10,
                        "rbln: unexpected schema ", op.schema());
  const at::Tensor weight = args[2].toTensor();
  const bool transposed = args[6].toBool();
  const int64_t groups = args[8].toInt();
  const std::vector<bool> mask = args[9].toBoolList().vec();
  const c10::Device device = args[0].toTensor().device();
  const std::vector<int64_t> bias = {transposed ? weight.size(1) * groups : weight.size(0)};
  const at::OptionalIntArrayRef bias_sizes =
      mask[2] ? at::OptionalIntArrayRef(bias) : at::OptionalIntArrayRef(std::nullopt);
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      *cpu(args[0]), *cpu(args[1]), *cpu(args[2]), bias_sizes, args[3].toIntVector(),
      args[4].toIntVector(), args[5].toIntVector(), transposed, args[7].toIntVector(), groups,
      {mask[0], mask[1], mask[2]});
  auto upload = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, upload(grad_input), upload(grad_weight), upload(grad_bias));
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

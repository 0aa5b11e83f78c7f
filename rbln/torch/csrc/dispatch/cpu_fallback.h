// The boxed CPU fallback, callable from kernels that decide to fall back.
#ifndef RBLN_TORCH_CSRC_DISPATCH_CPU_FALLBACK_H_
#define RBLN_TORCH_CSRC_DISPATCH_CPU_FALLBACK_H_

#include <ATen/core/dispatch/Dispatcher.h>

namespace rbln::torch_backend {

void RblnCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Throws (naming the op and both devices) unless every rbln tensor argument
// of the call on `stack` is on one logical device (SPEC B4).
void CheckSameDevice(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

// aten::_scaled_dot_product_fused_attention_overrideable on the CPU: the CPU
// has no kernel for the overrideable op, so this runs the CPU's
// scaled_dot_product_attention on downloaded inputs and returns the op's
// tuple with the output uploaded (counted like RblnCpuFallback).
void RblnSdpaCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// aten::convolution_overrideable and convolution_backward_overrideable on
// the CPU: ATen's convolution reaches them on PrivateUse1, and the CPU has no
// kernel of theirs for the boxed fallback to call, so this runs the CPU's
// convolution / convolution_backward on downloaded inputs and uploads the
// results (undefined gradients stay undefined; counted like RblnCpuFallback).
void RblnConvolutionCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_CPU_FALLBACK_H_

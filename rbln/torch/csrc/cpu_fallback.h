// The boxed CPU fallback, callable from kernels that decide to fall back.
#ifndef RBLN_TORCH_CSRC_CPU_FALLBACK_H_
#define RBLN_TORCH_CSRC_CPU_FALLBACK_H_

#include <ATen/core/dispatch/Dispatcher.h>

namespace rbln::torch_backend {

void RblnCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_CPU_FALLBACK_H_

// The dtypes compiled kernels compute in (SPEC G1, H1's dtype check), in one
// table: the shim's and the wrapper's dtype checks, the device fill and
// torch.rbln.get_amp_supported_dtype() (by PyTorch name, through
// torch_rbln._C) all read it, so adding a dtype is one edit.
#ifndef RBLN_TORCH_CSRC_DISPATCH_DEVICE_DTYPES_H_
#define RBLN_TORCH_CSRC_DISPATCH_DEVICE_DTYPES_H_

#include <c10/core/ScalarType.h>

#include <array>
#include <string>

namespace rbln::torch_backend {

// The dtypes of compiled-kernel data operands and results.
inline constexpr std::array<c10::ScalarType, 2> kCompiledKernelDtypes = {
    c10::ScalarType::Half, c10::ScalarType::BFloat16};

// Is `t` one of kCompiledKernelDtypes?
constexpr bool IsCompiledKernelDtype(c10::ScalarType t) {
  for (c10::ScalarType d : kCompiledKernelDtypes) {
    if (d == t) return true;
  }
  return false;
}

// PyTorch's name of `t` ("float16", "float32", ...).
std::string TorchDtypeName(c10::ScalarType t);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_DEVICE_DTYPES_H_

// What the eager layer hands a compiled program: the IR type of a tensor
// (graph inputs and outputs) and the runtime buffer of a device tensor
// (the program's arguments). Shared by the compiled-kernel ops, the device
// fill, dtype conversions and the foreach programs.
#ifndef RBLN_TORCH_CSRC_DISPATCH_PROGRAM_IO_H_
#define RBLN_TORCH_CSRC_DISPATCH_PROGRAM_IO_H_

#include <ATen/core/Tensor.h>

#include <optional>

#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/core/dtype.h"
#include "rbln/runtime/executor.h"

namespace rbln::torch_backend {

// The IR dtype of `t`, if the IR has one (float16, bfloat16, float32, int32,
// int64, bool).
std::optional<compiler::ir::DType> IrDType(at::ScalarType t);

// The runtime dtype of `t`, which must have an IR dtype.
DType RuntimeDType(at::ScalarType t);

// The IR tensor type of `dtype` (which must have an IR dtype) and `shape`.
compiler::ir::TensorType IrType(at::ScalarType dtype, c10::IntArrayRef shape);

// The program argument of device tensor `t`: its address, sizes, strides.
runtime::DeviceBuffer Buffer(const at::Tensor& t);

// The program argument of the storage span `t` covers: a 1-D buffer of
// SpanElements(t) elements from `t`'s first element, for a program that
// replays `t`'s view itself (strided_view).
runtime::DeviceBuffer SpanBuffer(const at::Tensor& t);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_PROGRAM_IO_H_

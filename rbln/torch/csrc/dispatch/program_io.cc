#include "rbln/torch/csrc/dispatch/program_io.h"

#include "rbln/torch/csrc/transfer/tensor_transfer.h"

namespace rbln::torch_backend {

std::optional<compiler::ir::DType> IrDType(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return compiler::ir::FLOAT16;
    case at::kBFloat16:
      return compiler::ir::BFLOAT16;
    case at::kFloat:
      return compiler::ir::FLOAT32;
    case at::kInt:
      return compiler::ir::INT32;
    case at::kLong:
      return compiler::ir::INT64;
    case at::kBool:
      return compiler::ir::BOOL;
    case at::kChar:
      return compiler::ir::INT8;
    case at::kShort:
      return compiler::ir::INT16;
    case at::kByte:
      return compiler::ir::UINT8;
    default:
      return std::nullopt;
  }
}

DType RuntimeDType(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return DType::kFloat16;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kFloat:
      return DType::kFloat32;
    case at::kInt:
      return DType::kInt32;
    case at::kLong:
      return DType::kInt64;
    case at::kChar:
      return DType::kInt8;
    case at::kShort:
      return DType::kInt16;
    case at::kByte:
      return DType::kUInt8;
    default:
      return DType::kBool;
  }
}

compiler::ir::TensorType IrType(at::ScalarType dtype, c10::IntArrayRef shape) {
  compiler::ir::TensorType t;
  t.set_dtype(*IrDType(dtype));
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

runtime::DeviceBuffer Buffer(const at::Tensor& t) {
  runtime::DeviceBuffer b;
  b.address = reinterpret_cast<uintptr_t>(t.data_ptr());
  b.dtype = RuntimeDType(t.scalar_type());
  b.sizes.assign(t.sizes().begin(), t.sizes().end());
  b.strides.assign(t.strides().begin(), t.strides().end());
  return b;
}

runtime::DeviceBuffer SpanBuffer(const at::Tensor& t) {
  runtime::DeviceBuffer b = Buffer(t);
  b.sizes = {SpanElements(t)};
  b.strides = {1};
  return b;
}

}  // namespace rbln::torch_backend

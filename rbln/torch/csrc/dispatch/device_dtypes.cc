#include "rbln/torch/csrc/dispatch/device_dtypes.h"

namespace rbln::torch_backend {

std::string TorchDtypeName(c10::ScalarType t) {
  // c10's names are the C++ ones ("Half"); users know PyTorch's.
  switch (t) {
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Bool:
      return "bool";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Byte:
      return "uint8";
    default:
      return c10::toString(t);
  }
}

}  // namespace rbln::torch_backend

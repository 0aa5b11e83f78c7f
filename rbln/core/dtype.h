// Element types shared by the runtime (buffer views) and the compiler (IR).
#ifndef RBLN_CORE_DTYPE_H_
#define RBLN_CORE_DTYPE_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace rbln {

enum class DType : int {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kBool = 5,
  kInt8 = 6,
  kInt16 = 7,
  kUInt8 = 8,
};

inline int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8:
      return 1;
    case DType::kInt16:
      return 2;
  }
  return 0;
}

inline absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat32:
      return "float32";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kUInt8:
      return "uint8";
  }
  return "unknown";
}

}  // namespace rbln

#endif  // RBLN_CORE_DTYPE_H_

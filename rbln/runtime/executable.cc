#include "rbln/runtime/executable.h"

namespace rbln::runtime {

uint64_t SpannedBytes(DType dtype, absl::Span<const int64_t> sizes,
                      absl::Span<const int64_t> strides) {
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    last += (sizes[i] - 1) * strides[i];
  }
  return static_cast<uint64_t>(last + 1) * DTypeSize(dtype);
}

}  // namespace rbln::runtime

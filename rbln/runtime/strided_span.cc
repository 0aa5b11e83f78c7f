#include "rbln/runtime/strided_span.h"

namespace rbln::runtime {

uint64_t StridedSpanBytes(absl::Span<const int64_t> sizes,
                          absl::Span<const int64_t> strides, uint64_t elem_size) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return static_cast<uint64_t>(last + 1) * elem_size;
}

}  // namespace rbln::runtime

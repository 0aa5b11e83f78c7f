// Byte extent of a strided layout, shared by the DMA engine (strided
// descriptors) and the executor (mapping a program argument's range).
#ifndef RBLN_RUNTIME_STRIDED_SPAN_H_
#define RBLN_RUNTIME_STRIDED_SPAN_H_

#include <cstdint>

#include "absl/types/span.h"

namespace rbln::runtime {

// Bytes from the first element to one past the last of a strided layout
// (sizes and non-negative strides in elements of `elem_size` bytes); 0 when
// the layout is empty.
uint64_t StridedSpanBytes(absl::Span<const int64_t> sizes,
                          absl::Span<const int64_t> strides, uint64_t elem_size);

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_STRIDED_SPAN_H_

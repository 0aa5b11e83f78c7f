#include "rbln/compiler/kernels/memref_copy.h"

#include <cstring>
#include <vector>

namespace {

struct RankedView {
  char* data;
  const int64_t* sizes;
  const int64_t* strides;
};

// The ranked descriptor's fields, laid out as MLIR's StridedMemRefType.
RankedView View(const rbln::compiler::UnrankedMemref& m, int64_t element_size) {
  auto* words = static_cast<int64_t*>(m.descriptor);
  char* aligned = reinterpret_cast<char**>(m.descriptor)[1];
  const int64_t offset = words[2];
  return {aligned + offset * element_size, words + 3, words + 3 + m.rank};
}

}  // namespace

extern "C" void rbln_memref_copy(int64_t element_size,
                                 rbln::compiler::UnrankedMemref* src_arg,
                                 rbln::compiler::UnrankedMemref* dst_arg) {
  const int64_t rank = src_arg->rank;
  const RankedView src = View(*src_arg, element_size);
  const RankedView dst = View(*dst_arg, element_size);
  for (int64_t d = 0; d < rank; ++d) {
    if (src.sizes[d] == 0) return;
  }
  if (rank == 0) {
    std::memcpy(dst.data, src.data, element_size);
    return;
  }
  // Rows along the last dim: one memcpy when both are unit-stride there.
  const int64_t last = rank - 1;
  const int64_t row = src.sizes[last];
  const bool contiguous_rows = src.strides[last] == 1 && dst.strides[last] == 1;
  std::vector<int64_t> index(rank, 0);
  while (true) {
    int64_t src_at = 0, dst_at = 0;
    for (int64_t d = 0; d < last; ++d) {
      src_at += index[d] * src.strides[d];
      dst_at += index[d] * dst.strides[d];
    }
    char* s = src.data + src_at * element_size;
    char* t = dst.data + dst_at * element_size;
    if (contiguous_rows) {
      std::memmove(t, s, row * element_size);
    } else {
      for (int64_t i = 0; i < row; ++i) {
        std::memcpy(t + i * dst.strides[last] * element_size,
                    s + i * src.strides[last] * element_size, element_size);
      }
    }
    int64_t d = last - 1;
    while (d >= 0 && ++index[d] == src.sizes[d]) index[d--] = 0;
    if (d < 0) return;
  }
}

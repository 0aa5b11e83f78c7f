#include "rbln/compiler/kernels/memref_copy.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace rbln::compiler {
namespace {

// A rank-2 descriptor as MLIR lays it out.
struct Descriptor2 {
  float* allocated;
  float* aligned;
  int64_t offset;
  int64_t sizes[2];
  int64_t strides[2];
};

// spec: P6 -- a strided copy the lowering leaves as a call (memrefCopy).
TEST(MemrefCopyTest, CopiesATransposedStridedViewIntoAContiguousBuffer) {
  std::vector<float> base(4 * 6);
  std::iota(base.begin(), base.end(), 0.0f);
  // src: base[1:4, 2:4] transposed -> sizes [2, 3], strides [1, 6].
  Descriptor2 src{base.data(), base.data(), 1 * 6 + 2, {2, 3}, {1, 6}};
  std::vector<float> out(6, -1.0f);
  Descriptor2 dst{out.data(), out.data(), 0, {2, 3}, {3, 1}};
  UnrankedMemref s{2, &src}, d{2, &dst};
  rbln_memref_copy(sizeof(float), &s, &d);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(out[i * 3 + j], base[(1 + j) * 6 + (2 + i)]) << i << "," << j;
    }
  }
}

TEST(MemrefCopyTest, CopiesRowsIntoAPaddedDestinationAndSkipsEmptyShapes) {
  std::vector<float> in = {1, 2, 3, 4, 5, 6};
  std::vector<float> out(3 * 4, 0.0f);
  Descriptor2 src{in.data(), in.data(), 0, {2, 3}, {3, 1}};
  Descriptor2 dst{out.data(), out.data(), 4 + 1, {2, 3}, {4, 1}};  // out[1:3, 1:4]
  UnrankedMemref s{2, &src}, d{2, &dst};
  rbln_memref_copy(sizeof(float), &s, &d);
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6}));

  Descriptor2 empty{in.data(), in.data(), 0, {0, 3}, {3, 1}};
  UnrankedMemref e{2, &empty};
  rbln_memref_copy(sizeof(float), &e, &d);  // Touches nothing.
  EXPECT_EQ(out[5], 1.0f);
}

}  // namespace
}  // namespace rbln::compiler

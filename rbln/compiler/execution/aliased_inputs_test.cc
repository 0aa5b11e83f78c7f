// spec: P4 (aliased or overlapping inputs copied by the caller side before
// the call)
//
// Programs called with an output buffer that is, or overlaps, an input's:
// the results equal those of separate buffers (the kernels would otherwise
// read elements they have already overwritten), and overlapping outputs are
// a clear error.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const CompiledProgram> Compile(const ir::Graph& g) {
  static auto* compiler = new Compiler();
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> p =
      compiler->Compile(g);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

runtime::BufferView View(void* data, ir::DType t, const Shape& shape) {
  return {data, RuntimeDType(t), shape, ContiguousStrides(shape)};
}

std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i + 1);
  return v;
}

// out = x^T written over x itself: an in-place transpose reads back what it
// has already written unless x is copied first.
TEST(AliasedInputsTest, OutputIsTheInput) {
  const ir::TensorType t = Type(ir::FLOAT32, {4, 4});
  auto program = Compile(OneOpGraph("transpose", {t}, {t},
                                    {{"dim0", IntA(0)}, {"dim1", IntA(1)}}));
  ASSERT_NE(program, nullptr);
  std::vector<float> x = Iota(16);
  const std::vector<float> original = x;
  ASSERT_TRUE(program
                  ->Execute({View(x.data(), ir::FLOAT32, {4, 4}),
                             View(x.data(), ir::FLOAT32, {4, 4})})
                  .ok());
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(x[i * 4 + j], original[j * 4 + i]) << i << "," << j;
    }
  }
}

// c = a @ b with c over a: every output row reads all of a.
TEST(AliasedInputsTest, MatmulIntoItsLeftOperand) {
  const ir::TensorType t = Type(ir::FLOAT32, {3, 3});
  auto program = Compile(OneOpGraph("mm", {t, t}, {t}));
  ASSERT_NE(program, nullptr);
  std::vector<float> a = Iota(9), b = Iota(9);
  std::vector<float> want(9, 0.0f);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 3; ++k) {
        want[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
      }
    }
  }
  ASSERT_TRUE(program
                  ->Execute({View(a.data(), ir::FLOAT32, {3, 3}),
                             View(b.data(), ir::FLOAT32, {3, 3}),
                             View(a.data(), ir::FLOAT32, {3, 3})})
                  .ok());
  for (int i = 0; i < 9; ++i) EXPECT_FLOAT_EQ(a[i], want[i]) << i;
}

// out[i] = -x[i] with out two elements past x in the same storage: in
// element order the kernel would overwrite x[i + 2] before reading it.
TEST(AliasedInputsTest, PartiallyOverlappingOutput) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16}) {
    const ir::TensorType t = Type(dtype, {6});
    auto program = Compile(OneOpGraph("neg", {t}, {t}));
    ASSERT_NE(program, nullptr);
    const HostTensor values = Tensor(dtype, {8}, {1, 2, 3, 4, 5, 6, 7, 8});
    std::vector<uint8_t> storage = Encode(values);
    const size_t es = ElementSize(dtype);
    ASSERT_TRUE(program
                    ->Execute({View(storage.data(), dtype, {6}),
                               View(storage.data() + 2 * es, dtype, {6})})
                    .ok());
    const std::vector<double> got = Decode(dtype, storage, 8);
    EXPECT_EQ(got, (std::vector<double>{1, 2, -1, -2, -3, -4, -5, -6}))
        << DTypeText(dtype);
  }
}

// Two outputs in the same bytes cannot both be written: an error naming
// them, and the buffers are left alone.
TEST(AliasedInputsTest, OverlappingOutputsAreAnError) {
  const ir::TensorType x = Type(ir::FLOAT32, {2, 3});
  auto program = Compile(OneOpGraph(
      "max", {x}, {Type(ir::FLOAT32, {2}), Type(ir::INT64, {2})},
      {{"dim", IntA(1)}}));
  ASSERT_NE(program, nullptr);
  std::vector<float> in = Iota(6);
  std::vector<int64_t> out = {7, 7};
  absl::Status s = program->Execute({View(in.data(), ir::FLOAT32, {2, 3}),
                                     View(out.data(), ir::FLOAT32, {2}),
                                     View(out.data(), ir::INT64, {2})});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("outputs 0 and 1 overlap"));
  EXPECT_EQ(out, (std::vector<int64_t>{7, 7}));
}

}  // namespace
}  // namespace rbln::compiler::testing

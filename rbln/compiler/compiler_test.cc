// spec: P4, P6, P7, G2
#include "rbln/compiler/compiler.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/test_graphs.h"
#include "rbln/runtime/runtime.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using testing::AddGraph;
using testing::Type;

runtime::BufferView View(void* data, DType dtype, std::vector<int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= sizes[d];
  }
  return {data, dtype, sizes, strides};
}

TEST(CompilerTest, Float16AddMatchesHalfArithmetic) {
  Compiler compiler;
  auto program = compiler.Compile(AddGraph(Type(ir::FLOAT16, {3, 5})));
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<_Float16> a(15), b(15), out(15);
  for (int i = 0; i < 15; ++i) {
    a[i] = static_cast<_Float16>(0.37f * i - 2.0f);
    b[i] = static_cast<_Float16>(1000.0f / (i + 1));
  }
  ASSERT_TRUE((*program)
                  ->Execute({View(a.data(), DType::kFloat16, {3, 5}),
                             View(b.data(), DType::kFloat16, {3, 5}),
                             View(out.data(), DType::kFloat16, {3, 5})})
                  .ok());
  for (int i = 0; i < 15; ++i) {
    // PyTorch's CPU half add: compute in float, round once.
    _Float16 expected = static_cast<_Float16>(static_cast<float>(a[i]) +
                                              static_cast<float>(b[i]));
    EXPECT_EQ(static_cast<float>(out[i]), static_cast<float>(expected)) << i;
  }
}

TEST(CompilerTest, BFloat16AddRoundsToNearestEven) {
  Compiler compiler;
  auto program = compiler.Compile(AddGraph(Type(ir::BFLOAT16, {64})));
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<uint16_t> a(64), b(64), out(64);
  for (int i = 0; i < 64; ++i) {
    a[i] = testing::FloatToBf16(1.0f + i / 128.0f);
    b[i] = testing::FloatToBf16(i * 3.14159f);
  }
  b[63] = 0x7fc0;  // NaN propagates.
  ASSERT_TRUE((*program)
                  ->Execute({View(a.data(), DType::kBFloat16, {64}),
                             View(b.data(), DType::kBFloat16, {64}),
                             View(out.data(), DType::kBFloat16, {64})})
                  .ok());
  for (int i = 0; i < 63; ++i) {
    float sum = testing::Bf16ToFloat(a[i]) + testing::Bf16ToFloat(b[i]);
    EXPECT_EQ(out[i], testing::FloatToBf16(sum)) << i;
  }
  EXPECT_TRUE(std::isnan(testing::Bf16ToFloat(out[63])));
}

TEST(CompilerTest, Float32AddWithAlphaAndBroadcast) {
  ir::Graph g;
  g.set_name("add_bcast");
  testing::AddInput(g, "a", Type(ir::FLOAT32, {2, 3}));
  testing::AddInput(g, "b", Type(ir::FLOAT32, {3}));
  testing::AddNode(g, "add", {"a", "b"}, "out", Type(ir::FLOAT32, {2, 3}), 2.5);
  g.add_outputs("out");
  Compiler compiler;
  auto program = compiler.Compile(g);
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {10, 20, 30}, out(6);
  ASSERT_TRUE((*program)
                  ->Execute({View(a.data(), DType::kFloat32, {2, 3}),
                             View(b.data(), DType::kFloat32, {3}),
                             View(out.data(), DType::kFloat32, {2, 3})})
                  .ok());
  EXPECT_THAT(out, ::testing::ElementsAre(26, 52, 78, 29, 55, 81));
}

TEST(CompilerTest, Int64Add) {
  Compiler compiler;
  auto program = compiler.Compile(AddGraph(Type(ir::INT64, {4}), 3));
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<int64_t> a = {1, -2, 1LL << 40, 0}, b = {1, 1, 1, -5}, out(4);
  ASSERT_TRUE((*program)
                  ->Execute({View(a.data(), DType::kInt64, {4}),
                             View(b.data(), DType::kInt64, {4}),
                             View(out.data(), DType::kInt64, {4})})
                  .ok());
  EXPECT_THAT(out, ::testing::ElementsAre(4, 1, (1LL << 40) + 3, -15));
}

TEST(CompilerTest, CompilesOncePerSpecialization) {
  Compiler compiler;
  Counter* compiles = CounterRegistry::Global().Get("compiler/compiles");
  const int64_t before = compiles->value();
  auto p1 = compiler.Compile(AddGraph(Type(ir::FLOAT32, {7})));
  ASSERT_TRUE(p1.ok());
  EXPECT_EQ(compiles->value(), before + 1);
  auto p2 = compiler.Compile(AddGraph(Type(ir::FLOAT32, {7})));
  EXPECT_EQ(compiles->value(), before + 1);
  EXPECT_EQ(p1->get(), p2->get());
  auto p3 = compiler.Compile(AddGraph(Type(ir::FLOAT32, {8})));
  EXPECT_EQ(compiles->value(), before + 2);
  EXPECT_EQ(compiler.cache_size(), 2);
  compiler.ClearCache();
  EXPECT_EQ(compiler.cache_size(), 0);
}

TEST(CompilerTest, ExecuteChecksTheSpecialization) {
  Compiler compiler;
  auto program = compiler.Compile(AddGraph(Type(ir::FLOAT32, {2, 2})));
  ASSERT_TRUE(program.ok());
  std::vector<float> a(4), b(4), out(4);
  absl::Status wrong_shape = (*program)->Execute(
      {View(a.data(), DType::kFloat32, {4}), View(b.data(), DType::kFloat32, {4}),
       View(out.data(), DType::kFloat32, {4})});
  EXPECT_THAT(wrong_shape.message(), HasSubstr("compiled for f32[2,2]"));
  runtime::BufferView transposed = View(a.data(), DType::kFloat32, {2, 2});
  transposed.strides = {1, 2};
  absl::Status strided = (*program)->Execute(
      {transposed, View(b.data(), DType::kFloat32, {2, 2}),
       View(out.data(), DType::kFloat32, {2, 2})});
  EXPECT_EQ(strided.code(), absl::StatusCode::kFailedPrecondition);
}

// The runtime runs a compiled program on device memory through the executor.
TEST(CompilerTest, RunsOnSimulatedDeviceMemory) {
  DeviceProfile profile = DeviceProfile::ForFamily(DeviceFamily::kRebel100);
  profile.memory_per_chiplet = 1 << 20;
  auto rt = runtime::Runtime::Create(profile);
  ASSERT_TRUE(rt.ok());
  Compiler compiler;
  auto program = compiler.Compile(AddGraph(Type(ir::FLOAT32, {256})));
  ASSERT_TRUE(program.ok());
  std::vector<uintptr_t> bufs;
  for (int i = 0; i < 3; ++i) bufs.push_back(*(*rt)->storage().Create(0, 1024));
  std::vector<float> a(256), b(256), out(256);
  for (int i = 0; i < 256; ++i) {
    a[i] = i;
    b[i] = 0.5f * i;
  }
  ASSERT_TRUE((*rt)->storage().WriteFromHost(bufs[0], a.data(), 1024).ok());
  ASSERT_TRUE((*rt)->storage().WriteFromHost(bufs[1], b.data(), 1024).ok());
  std::vector<runtime::DeviceBuffer> args;
  for (uintptr_t buf : bufs) {
    args.push_back({buf, DType::kFloat32, {256}, {1}});
  }
  ASSERT_TRUE((*rt)->executor().Run(**program, args).ok());
  ASSERT_TRUE((*rt)->storage().ReadToHost(out.data(), bufs[2], 1024).ok());
  for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], 1.5f * i);
}

}  // namespace
}  // namespace rbln::compiler

#include "rbln/runtime/executor.h"

#include <cstring>

#include "gtest/gtest.h"
#include "rbln/runtime/fake_physical_memory.h"

namespace rbln::runtime {
namespace {

// A hand-written program (the compiler's programs are tested in
// //rbln/compiler): out[i] = a[i] + b[i] over a strided 1-D view.
class AddF32 : public Executable {
 public:
  int num_inputs() const override { return 2; }
  int num_outputs() const override { return 1; }
  std::string DebugName() const override { return "add_f32"; }
  absl::Status Execute(absl::Span<const BufferView> args) const override {
    const auto* a = static_cast<const float*>(args[0].data);
    const auto* b = static_cast<const float*>(args[1].data);
    auto* out = static_cast<float*>(args[2].data);
    for (int64_t i = 0; i < args[2].sizes[0]; ++i) {
      out[i * args[2].strides[0]] =
          a[i * args[0].strides[0]] + b[i * args[1].strides[0]];
    }
    return absl::OkStatus();
  }
};

TEST(ExecutorTest, MapsVirtualBuffersAndRuns) {
  FakePhysicalMemory phys;
  StorageManager storage(1, 64 << 20, &phys, phys.dma(), /*eager=*/false);
  Executor executor(&storage);
  const uintptr_t a = *storage.Create(0, 16);
  const uintptr_t b = *storage.Create(0, 16);
  const uintptr_t out = *storage.Create(0, 16);
  float av[4] = {0, 1, 2, 3}, bv[4] = {0, 10, 20, 30};
  ASSERT_TRUE(storage.WriteFromHost(a, av, 16).ok());
  ASSERT_TRUE(storage.WriteFromHost(b, bv, 16).ok());
  std::vector<DeviceBuffer> args = {
      {a, DType::kFloat32, {4}, {1}},
      {b, DType::kFloat32, {4}, {1}},
      {out + 4, DType::kFloat32, {2}, {2}},  // Strided view of the output.
  };
  ASSERT_TRUE(executor.Run(AddF32(), args).ok());
  EXPECT_EQ(storage.Info(out)->state, DataState::kDeviceLatest);
  EXPECT_EQ(storage.Info(a)->state, DataState::kInSync);
  float result[4];
  ASSERT_TRUE(storage.ReadToHost(result, out, 16).ok());
  EXPECT_EQ(result[1], 0.0f);
  EXPECT_EQ(result[3], 11.0f);
}

TEST(ExecutorTest, RejectsBuffersOutsideStorages) {
  FakePhysicalMemory phys;
  StorageManager storage(1, 64 << 20, &phys, phys.dma(), /*eager=*/false);
  Executor executor(&storage);
  float host[4] = {};
  const uintptr_t a = *storage.Create(0, 16);
  std::vector<DeviceBuffer> args = {
      {reinterpret_cast<uintptr_t>(host), DType::kFloat32, {4}, {1}},
      {a, DType::kFloat32, {4}, {1}},
      {a + 8, DType::kFloat32, {4}, {1}},  // Runs off the end.
  };
  EXPECT_FALSE(executor.Run(AddF32(), args).ok());
  EXPECT_FALSE(executor.Run(AddF32(), absl::MakeSpan(args).subspan(0, 2)).ok());
}

}  // namespace
}  // namespace rbln::runtime

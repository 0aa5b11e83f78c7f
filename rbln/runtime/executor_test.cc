#include "rbln/runtime/executor.h"

#include <cstring>

#include "gtest/gtest.h"

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

TEST(ExecutorTest, TranslatesDeviceAddressesAndRuns) {
  auto mem = DeviceMemory::Create(0, 1, 1 << 20);
  ASSERT_TRUE(mem.ok());
  AddressSpace space({mem->get()});
  Executor executor(&space);
  float* backing = static_cast<float*>(*(*mem)->Translate((*mem)->device_base(), 64));
  for (int i = 0; i < 4; ++i) {
    backing[i] = i;
    backing[4 + i] = 10 * i;
  }
  const uintptr_t base = (*mem)->device_base();
  std::vector<DeviceBuffer> args = {
      {base, DType::kFloat32, {4}, {1}},
      {base + 16, DType::kFloat32, {4}, {1}},
      {base + 32, DType::kFloat32, {2}, {2}},  // Strided output.
  };
  ASSERT_TRUE(executor.Run(AddF32(), args).ok());
  EXPECT_EQ(backing[8], 0.0f);
  EXPECT_EQ(backing[10], 11.0f);
}

TEST(ExecutorTest, RejectsBuffersOutsideDeviceMemory) {
  auto mem = DeviceMemory::Create(0, 1, 1 << 20);
  AddressSpace space({mem->get()});
  Executor executor(&space);
  float host[4] = {};
  const uintptr_t base = (*mem)->device_base();
  std::vector<DeviceBuffer> args = {
      {reinterpret_cast<uintptr_t>(host), DType::kFloat32, {4}, {1}},
      {base, DType::kFloat32, {4}, {1}},
      {base + (1 << 20) - 8, DType::kFloat32, {4}, {1}},  // Runs off the end.
  };
  EXPECT_FALSE(executor.Run(AddF32(), args).ok());
  EXPECT_FALSE(executor.Run(AddF32(), absl::MakeSpan(args).subspan(0, 2)).ok());
}

}  // namespace
}  // namespace rbln::runtime

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

// Records the content identity of the views it is given.
class RecordContent : public AddF32 {
 public:
  absl::Status Execute(absl::Span<const BufferView> args) const override {
    seen.assign(args.begin(), args.end());
    return AddF32::Execute(args);
  }
  mutable std::vector<BufferView> seen;
};

TEST(ExecutorTest, InputsCarryTheirContentVersion) {
  // Inputs name their bytes' version (what packed-weight caches key on);
  // outputs, being written, carry none. A write in between changes it.
  FakePhysicalMemory phys;
  StorageManager storage(1, 64 << 20, &phys, phys.dma(), /*eager=*/false);
  Executor executor(&storage);
  const uintptr_t a = *storage.Create(0, 16);
  const uintptr_t out = *storage.Create(0, 16);
  float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE(storage.WriteFromHost(a, v, 16).ok());
  std::vector<DeviceBuffer> args = {{a, DType::kFloat32, {2}, {1}},
                                    {a + 8, DType::kFloat32, {2}, {1}},
                                    {out, DType::kFloat32, {2}, {1}}};
  RecordContent program;
  ASSERT_TRUE(executor.Run(program, args).ok());
  const std::vector<BufferView> first = program.seen;
  EXPECT_NE(first[0].content_version, 0u);
  EXPECT_EQ(first[0].content_version, first[1].content_version);  // one storage
  EXPECT_EQ(first[0].content_address, a);
  EXPECT_EQ(first[1].content_address, a + 8);
  EXPECT_EQ(first[2].content_version, 0u);
  ASSERT_TRUE(executor.Run(program, args).ok());
  EXPECT_EQ(program.seen[0].content_version, first[0].content_version);
  ASSERT_TRUE(storage.WriteFromHost(a + 4, v, 4).ok());
  ASSERT_TRUE(executor.Run(program, args).ok());
  EXPECT_NE(program.seen[0].content_version, first[0].content_version);
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

// A program split over two workers that asks for workspace: it records the
// placement it was given and checks its segments are live device memory.
class TwoWorkerCopy : public Executable {
 public:
  explicit TwoWorkerCopy(FakePhysicalMemory* phys) : phys_(phys) {}
  int num_inputs() const override { return 1; }
  int num_outputs() const override { return 1; }
  std::string DebugName() const override { return "two_worker_copy"; }
  int num_workers() const override { return 2; }
  std::vector<int64_t> WorkspaceBytes() const override { return {64, 8192}; }
  absl::Status Execute(absl::Span<const BufferView>) const override {
    return absl::InternalError("must be run placed");
  }
  absl::Status ExecutePlaced(absl::Span<const BufferView> args,
                             const ExecutionContext& context) const override {
    placed = context.workers;
    used_during_run = {phys_->used(0), phys_->used(1)};
    // Each half goes through its worker's segment.
    const auto* in = static_cast<const float*>(args[0].data);
    auto* out = static_cast<float*>(args[1].data);
    for (int w = 0; w < 2; ++w) {
      auto* scratch = static_cast<float*>(context.workers[w].workspace);
      std::memcpy(scratch, in + 2 * w, 2 * sizeof(float));
      std::memcpy(out + 2 * w, scratch, 2 * sizeof(float));
    }
    return absl::OkStatus();
  }
  mutable std::vector<WorkerContext> placed;
  mutable std::vector<uint64_t> used_during_run;

 private:
  FakePhysicalMemory* phys_;
};

// spec: A2, A7 -- the executor places each worker on a compute unit and
// homes its workspace segment in that unit's chiplet memory for the run.
TEST(ExecutorTest, PlacesWorkersAndHomesTheirWorkspace) {
  FakePhysicalMemory phys(/*chiplets=*/2);
  StorageManager storage(1, 64 << 20, &phys, phys.dma(), /*eager=*/false);
  Executor executor(&storage, &phys, /*chiplets_per_npu=*/2);
  const uintptr_t in = *storage.Create(0, 16);
  const uintptr_t out = *storage.Create(0, 16);
  float values[4] = {1, 2, 3, 4};
  ASSERT_TRUE(storage.WriteFromHost(in, values, 16).ok());
  std::vector<DeviceBuffer> args = {{in, DType::kFloat32, {4}, {1}},
                                    {out, DType::kFloat32, {4}, {1}}};
  Counter* slices = CounterRegistry::Global().Get("runtime/slices/npu.0.chiplet.1");
  const int64_t slices_before = slices->value();
  TwoWorkerCopy program(&phys);
  const uint64_t used_before = phys.used(1);
  ASSERT_TRUE(executor.Run(program, args).ok());
  ASSERT_EQ(program.placed.size(), 2u);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(program.placed[w].unit.npu, 0);
    EXPECT_EQ(program.placed[w].unit.chiplet, w);
    EXPECT_NE(program.placed[w].workspace, nullptr);
  }
  EXPECT_EQ(program.placed[1].workspace_bytes, 8192);
  // Worker 1's 8 KiB lived on chiplet 1 during the run, and is gone after.
  EXPECT_GE(program.used_during_run[1], used_before + 8192);
  EXPECT_EQ(phys.used(1), used_before);
  EXPECT_EQ(slices->value(), slices_before + 1);
  float result[4];
  ASSERT_TRUE(storage.ReadToHost(result, out, 16).ok());
  EXPECT_EQ(result[3], 4.0f);

  // More workers than the group's compute units: a clear error.
  Executor one_chiplet(&storage, &phys, /*chiplets_per_npu=*/1);
  absl::Status s = one_chiplet.Run(program, args);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("two_worker_copy"), std::string::npos) << s;
}

// torch.rbln.utilization (no SPEC ID; torch.cuda parity): every unit a run
// used is reported busy for the run's time.
TEST(ExecutorTest, ReportsBusyTimePerComputeUnit) {
  FakePhysicalMemory phys(/*chiplets=*/2);
  StorageManager storage(1, 64 << 20, &phys, phys.dma(), /*eager=*/false);
  Executor executor(&storage, &phys, /*chiplets_per_npu=*/2);
  std::vector<std::pair<int, int64_t>> busy;
  executor.SetBusyObserver([&](const ComputeUnit& unit, int64_t ns) {
    busy.emplace_back(unit.chiplet, ns);
  });
  const uintptr_t in = *storage.Create(0, 16);
  const uintptr_t out = *storage.Create(0, 16);
  std::vector<DeviceBuffer> args = {{in, DType::kFloat32, {4}, {1}},
                                    {out, DType::kFloat32, {4}, {1}}};
  TwoWorkerCopy program(&phys);
  ASSERT_TRUE(executor.Run(program, args).ok());
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_NE(busy[0].first, busy[1].first);
  EXPECT_EQ(busy[0].second, busy[1].second);  // One run, concurrent units.
  EXPECT_GT(busy[0].second, 0);
}

}  // namespace
}  // namespace rbln::runtime

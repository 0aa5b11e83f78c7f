// The executor's records with RBLN_PROFILER=1 (set by the BUILD target, as
// the recorder reads it when the library loads): argument stages, and one
// compute stage per chiplet worker slice the program reports (SPEC O1, O2).
// spec: O1, O2, O4
#include <stdlib.h>

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/runtime/compute_slices.h"
#include "rbln/runtime/executor.h"
#include "rbln/runtime/fake_physical_memory.h"
#include "rbln/runtime/profiler.h"

namespace rbln::runtime {
namespace {

// out[i] = in[i] * 2 over n floats, split into `workers` row slices run on
// their own threads, each reporting its slice like a partitioned program.
class DoubleF32 : public Executable {
 public:
  explicit DoubleF32(int workers) : workers_(workers) {}
  int num_inputs() const override { return 1; }
  int num_outputs() const override { return 1; }
  std::string DebugName() const override { return "dbl"; }
  absl::Status Execute(absl::Span<const BufferView> args) const override {
    return ExecuteProfiled(args, nullptr);
  }
  absl::Status ExecuteProfiled(absl::Span<const BufferView> args,
                               ComputeSliceSink* slices) const override {
    const auto* in = static_cast<const float*>(args[0].data);
    auto* out = static_cast<float*>(args[1].data);
    const int64_t n = args[1].sizes[0];
    if (workers_ == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = 2 * in[i];
      return absl::OkStatus();
    }
    std::vector<std::thread> threads;
    for (int w = 0; w < workers_; ++w) {
      threads.emplace_back([=] {
        const int64_t start = ProfileRecorder::NowNs();
        for (int64_t i = n * w / workers_; i < n * (w + 1) / workers_; ++i) {
          out[i] = 2 * in[i];
        }
        if (slices != nullptr) slices->Report(w, start, ProfileRecorder::NowNs());
      });
    }
    for (std::thread& t : threads) t.join();
    return absl::OkStatus();
  }

 private:
  const int workers_;
};

class ExecutorProfileTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(ProfileRecorder::Global(), nullptr) << "the target sets RBLN_PROFILER=1";
    ProfileRecorder::Global()->TakeUnwritten();  // Start from an empty window.
  }
  // Runs `program` on 8 floats; returns the run's record.
  profile::Execution RunOnce(const Executable& program) {
    FakePhysicalMemory phys;
    StorageManager storage(1, 64 << 20, &phys, phys.dma(), /*eager=*/false);
    Executor executor(&storage);
    const uintptr_t in = *storage.Create(0, 32);
    const uintptr_t out = *storage.Create(0, 32);
    float values[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    EXPECT_TRUE(storage.WriteFromHost(in, values, 32).ok());
    std::vector<DeviceBuffer> args = {{in, DType::kFloat32, {8}, {1}},
                                      {out, DType::kFloat32, {8}, {1}}};
    EXPECT_TRUE(executor.Run(program, args).ok());
    float result[8];
    EXPECT_TRUE(storage.ReadToHost(result, out, 32).ok());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(result[i], 2.0f * i);
    profile::Profile p = ProfileRecorder::Global()->TakeUnwritten();
    EXPECT_EQ(p.executions_size(), 1);
    return p.executions_size() == 1 ? p.executions(0) : profile::Execution();
  }
};

TEST_F(ExecutorProfileTest, UnpartitionedProgramIsOneComputeStageOfWorkerZero) {
  const profile::Execution e = RunOnce(DoubleF32(1));
  ASSERT_EQ(e.stages_size(), 3);
  EXPECT_EQ(e.stages(0).kind(), profile::ARGS);
  EXPECT_EQ(e.stages(0).bytes(), 32u);
  EXPECT_EQ(e.stages(1).kind(), profile::ARGS);
  EXPECT_EQ(e.stages(2).kind(), profile::COMPUTE);
  EXPECT_EQ(e.stages(2).worker(), 0);
  EXPECT_EQ(e.stages(2).name(), "compute");
  EXPECT_LE(e.stages(2).start_ns(), e.stages(2).end_ns());
  EXPECT_EQ(DeviceEventName(0, e, e.stages(1), 1), "i1_0_W0_args_0_1");
  EXPECT_EQ(DeviceEventName(0, e, e.stages(2), 0), "i1_0_W0_dbl_0");
}

TEST_F(ExecutorProfileTest, PartitionedProgramGetsOneComputeStagePerWorker) {
  const profile::Execution e = RunOnce(DoubleF32(4));
  ASSERT_EQ(e.stages_size(), 2 + 4);
  std::vector<std::string> names;
  for (int w = 0; w < 4; ++w) {
    const profile::Stage& s = e.stages(2 + w);
    EXPECT_EQ(s.kind(), profile::COMPUTE);
    EXPECT_EQ(s.worker(), w);
    EXPECT_GE(s.start_ns(), e.start_ns());
    EXPECT_LE(s.end_ns(), e.end_ns());
    names.push_back(DeviceEventName(7, e, s, 0));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"i1_7_W0_dbl_0", "i1_7_W1_dbl_0", "i1_7_W2_dbl_0",
                                             "i1_7_W3_dbl_0"}));
}

TEST_F(ExecutorProfileTest, ReportsOnlyWhatIsNewAndNothingWhenIdle) {
  RunOnce(DoubleF32(1));  // Taken by RunOnce.
  const std::string dir = testing::TempDir();
  EXPECT_EQ(ProfileRecorder::Global()->WriteUnwritten(dir), "");
  FakePhysicalMemory phys;
  StorageManager storage(1, 64 << 20, &phys, phys.dma(), /*eager=*/false);
  Executor executor(&storage);
  const uintptr_t in = *storage.Create(0, 32);
  const uintptr_t out = *storage.Create(0, 32);
  std::vector<DeviceBuffer> args = {{in, DType::kFloat32, {8}, {1}},
                                    {out, DType::kFloat32, {8}, {1}}};
  ASSERT_TRUE(executor.Run(DoubleF32(4), args).ok());
  ASSERT_TRUE(executor.Run(DoubleF32(1), args).ok());
  const std::string report = ProfileRecorder::Global()->WriteUnwritten(dir);
  EXPECT_NE(report.find("RBLN Profiler Generation Status Report"), std::string::npos);
  EXPECT_NE(report.find("executions recorded : 2 (0 dropped)"), std::string::npos) << report;
  EXPECT_NE(report.find("stages recorded     : 9"), std::string::npos) << report;
  EXPECT_NE(report.find(dir + "/rbln_"), std::string::npos) << report;
  EXPECT_EQ(ProfileRecorder::Global()->WriteUnwritten(dir), "");
}

}  // namespace
}  // namespace rbln::runtime

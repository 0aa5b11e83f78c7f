// The executor's records with RBLN_PROFILER=1 (set by the BUILD target, as
// the recorder reads it when the library loads): argument stages, and one
// compute stage per phase of the program, with the chiplet workers' slices
// it reports (SPEC O1, O2).
// spec: O1, O2, O4
#include <stdlib.h>

#include <algorithm>
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

// out[i] = in[i] * 2 over n floats, in `phases` passes (each doubling and
// halving again but the last), each split into `workers` row slices run on
// their own threads and joined before the next pass -- like a program
// partitioned over chiplet workers with a barrier between its phases --
// each worker reporting its slice of every phase.
class DoubleF32 : public Executable {
 public:
  DoubleF32(int workers, int phases = 1) : workers_(workers), phases_(phases) {}
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
    for (int phase = 0; phase < phases_; ++phase) {
      std::vector<std::thread> threads;
      for (int w = 0; w < workers_; ++w) {
        threads.emplace_back([=] {
          const int64_t start = ProfileRecorder::NowNs();
          for (int64_t i = n * w / workers_; i < n * (w + 1) / workers_; ++i) {
            out[i] = phase == 0 ? 2 * in[i] : phase % 2 == 1 ? out[i] / 2 : out[i] * 2;
          }
          if (slices != nullptr) slices->Report(w, phase, start, ProfileRecorder::NowNs());
        });
      }
      for (std::thread& t : threads) t.join();
    }
    return absl::OkStatus();
  }

 private:
  const int workers_;
  const int phases_;
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
  const profile::Stage& compute = e.stages(2);
  EXPECT_EQ(compute.kind(), profile::COMPUTE);
  EXPECT_EQ(compute.name(), "compute_0");
  EXPECT_EQ(compute.worker(), 0);
  EXPECT_EQ(compute.phase(), 0);
  EXPECT_LE(compute.start_ns(), compute.end_ns());
  ASSERT_EQ(compute.workers_size(), 1);  // The whole run, on worker 0.
  EXPECT_EQ(compute.workers(0).worker(), 0);
  EXPECT_EQ(compute.workers(0).start_ns(), compute.start_ns());
  EXPECT_EQ(compute.workers(0).end_ns(), compute.end_ns());
  EXPECT_EQ(DeviceEventName(0, e, e.stages(1), 1), "i1_0_W0_args_0_1");
  EXPECT_EQ(DeviceEventName(0, e, compute, 0), "i1_0_W0_dbl_0");
}

TEST_F(ExecutorProfileTest, PartitionedProgramGetsOneComputeStagePerPhase) {
  // spec: O2 -- 4 workers and 3 phases (2 barriers): 3 compute stages, each
  // from its first worker's start to its last worker's end, with the 4
  // worker slices as detail; the phases follow each other.
  const profile::Execution e = RunOnce(DoubleF32(4, 3));
  ASSERT_EQ(e.stages_size(), 2 + 3);
  std::vector<std::string> names;
  int64_t previous_end = e.stages(1).end_ns();
  for (int p = 0; p < 3; ++p) {
    const profile::Stage& s = e.stages(2 + p);
    SCOPED_TRACE(s.name());
    EXPECT_EQ(s.kind(), profile::COMPUTE);
    EXPECT_EQ(s.name(), "compute_" + std::to_string(p));
    EXPECT_EQ(s.phase(), p);
    EXPECT_EQ(s.worker(), 0);
    ASSERT_EQ(s.workers_size(), 4);
    int64_t first_start = s.workers(0).start_ns(), last_end = s.workers(0).end_ns();
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(s.workers(w).worker(), w);
      EXPECT_LE(s.workers(w).start_ns(), s.workers(w).end_ns());
      first_start = std::min(first_start, s.workers(w).start_ns());
      last_end = std::max(last_end, s.workers(w).end_ns());
    }
    EXPECT_EQ(s.start_ns(), first_start);
    EXPECT_EQ(s.end_ns(), last_end);
    EXPECT_GE(s.start_ns(), previous_end);  // joined before the next phase
    previous_end = s.end_ns();
    names.push_back(DeviceEventName(7, e, s, 0));
  }
  EXPECT_LE(previous_end, e.end_ns());
  EXPECT_EQ(names, (std::vector<std::string>{"i1_7_W0_dbl_0", "i1_7_W0_dbl_1", "i1_7_W0_dbl_2"}));
}

TEST(ComputeSlicesTest, GroupIntoPhasesSpansEachPhaseAndSortsWorkers) {
  ComputeSliceSink sink;
  sink.Report(1, 1, 50, 70);
  sink.Report(0, 0, 10, 40);
  sink.Report(1, 0, 12, 45);
  sink.Report(0, 1, 46, 60);
  const std::vector<ComputePhase> phases = GroupIntoPhases(sink.Take());
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].phase, 0);
  EXPECT_EQ(phases[0].start_ns, 10);
  EXPECT_EQ(phases[0].end_ns, 45);
  EXPECT_EQ(phases[1].phase, 1);
  EXPECT_EQ(phases[1].start_ns, 46);
  EXPECT_EQ(phases[1].end_ns, 70);
  ASSERT_EQ(phases[1].slices.size(), 2u);
  EXPECT_EQ(phases[1].slices[0].worker, 0);
  EXPECT_EQ(phases[1].slices[1].worker, 1);
  EXPECT_TRUE(sink.Take().empty());
  EXPECT_TRUE(GroupIntoPhases({}).empty());
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
  ASSERT_TRUE(executor.Run(DoubleF32(4, 2), args).ok());
  ASSERT_TRUE(executor.Run(DoubleF32(1), args).ok());
  const std::string report = ProfileRecorder::Global()->WriteUnwritten(dir);
  EXPECT_NE(report.find("RBLN Profiler Generation Status Report"), std::string::npos);
  EXPECT_NE(report.find("executions recorded : 2 (0 dropped)"), std::string::npos) << report;
  // 2 arguments each; 2 phases + 1.
  EXPECT_NE(report.find("stages recorded     : 7"), std::string::npos) << report;
  EXPECT_NE(report.find(dir + "/rbln_"), std::string::npos) << report;
  EXPECT_EQ(ProfileRecorder::Global()->WriteUnwritten(dir), "");
}

}  // namespace
}  // namespace rbln::runtime

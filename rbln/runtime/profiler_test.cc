#include "rbln/runtime/profiler.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

profile::Execution MakeExecution(const std::string& program, int64_t start) {
  profile::Execution e;
  e.set_program(program);
  e.set_npu(0);
  e.set_start_ns(start);
  e.set_end_ns(start + 300);
  profile::Stage* args = e.add_stages();
  args->set_name("args_0");
  args->set_kind(profile::ARGS);
  args->set_start_ns(start);
  args->set_end_ns(start + 100);
  args->set_bytes(4096);
  profile::Stage* compute = e.add_stages();
  compute->set_name("compute");
  compute->set_kind(profile::COMPUTE);
  compute->set_start_ns(start + 100);
  compute->set_end_ns(start + 300);
  return e;
}

TEST(ProfilerTest, OffUnlessEnabledAtStart) {
  // The test binary starts without RBLN_PROFILER.
  if (getenv("RBLN_PROFILER") == nullptr) {
    EXPECT_EQ(ProfileRecorder::Global(), nullptr);
  }
}

TEST(ProfilerTest, RecordsAssignIdsAndDropPastTheLimit) {
  ProfileRecorder recorder(/*max_executions=*/2);
  recorder.Record(MakeExecution("add", 1000));
  recorder.Record(MakeExecution("mul", 2000));
  recorder.Record(MakeExecution("sub", 3000));
  const profile::Profile p = recorder.Snapshot();
  ASSERT_EQ(p.executions_size(), 2);
  EXPECT_EQ(p.executions(0).id(), 1u);
  EXPECT_EQ(p.executions(1).id(), 2u);
  EXPECT_EQ(p.executions(1).program(), "mul");
  EXPECT_EQ(p.dropped_executions(), 1u);
  EXPECT_EQ(p.version(), 1u);
  EXPECT_EQ(p.pid(), getpid());
}

TEST(ProfilerTest, WritesAFileThatParsesBackAndReportsIt) {
  ProfileRecorder recorder;
  recorder.Record(MakeExecution("add", 1000));
  const std::string dir = testing::TempDir();
  absl::StatusOr<std::string> path = recorder.WriteFile(dir);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_NE(path->find("/rbln_"), std::string::npos);
  EXPECT_EQ(path->substr(path->size() - 3), ".pb");
  std::ifstream in(*path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  profile::Profile back;
  ASSERT_TRUE(back.ParseFromString(bytes.str()));
  ASSERT_EQ(back.executions_size(), 1);
  EXPECT_EQ(back.executions(0).stages(1).kind(), profile::COMPUTE);
  EXPECT_EQ(back.executions(0).stages(0).bytes(), 4096u);

  // A second write never overwrites the first.
  absl::StatusOr<std::string> second = recorder.WriteFile(dir);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(*second, *path);

  const std::string report = recorder.StatusReport(path);
  EXPECT_NE(report.find("RBLN Profiler Generation Status Report"), std::string::npos);
  EXPECT_NE(report.find("executions recorded : 1 (0 dropped)"), std::string::npos);
  EXPECT_NE(report.find("stages recorded     : 2"), std::string::npos);
  EXPECT_NE(report.find("compute 0.000 ms"), std::string::npos);
  EXPECT_NE(report.find(*path), std::string::npos);
  EXPECT_NE(report.find("status              : OK"), std::string::npos);

  const std::string failed =
      recorder.StatusReport(recorder.WriteFile("/nonexistent-rbln-dir"));
  EXPECT_NE(failed.find("FAILED: rbln profiler: cannot create /nonexistent-rbln-dir/rbln_"),
            std::string::npos);
  EXPECT_NE(failed.find("RBLN_PROFILER_DIR"), std::string::npos);
}

}  // namespace
}  // namespace rbln::runtime

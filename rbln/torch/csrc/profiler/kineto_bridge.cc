// The Kineto bridge (SPEC O1, O2, O6): with RBLN_PROFILER=1, torch.profiler
// sessions that ask for ProfilerActivity.PrivateUse1 get the runtime's
// recorded program stages as device events, next to the ATen calls.
//
// torch 2.13 forwards a libkineto::IActivityProfiler registered with
// REGISTER_PRIVATEUSE1_PROFILER to Kineto. Kineto calls the session's
// pushCorrelationId/popCorrelationId around every recorded ATen op on the op's
// thread; the runtime stores the innermost id in each execution (metadata
// of the events; they are not linked to the op, SPEC O2). Stages are
// CONCURRENT_KERNEL activities on device = NPU, which torch reports as
// PrivateUse1 ("RBLN") device time (Self RBLN, RBLN total, device_time_total).
// Event names (runtime::DeviceEventName): i1_<call>_W0_args_0_<arg> for
// argument stages and i1_<call>_W0_<program>_<phase> for each compute phase
// of the program (the chiplet workers' slices stay in the .pb), <call>
// counting the session's program runs from 0.
// When the session stops the runtime writes its .pb file and prints its
// status report (SPEC O4).
// Without RBLN_PROFILER nothing is recorded, so no device event appears (O3);
// on the ATOM profile the bridge adds none either (O1).
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <ITraceActivity.h>
#include <TraceSpan.h>
#include <libkineto.h>
#include <output_base.h>

#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rbln/runtime/profiler.h"
#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {
namespace {

using runtime::ProfileRecorder;

// One program stage as a Kineto device activity. Our own ITraceActivity
// rather than GenericTraceActivity, whose inline metadata code needs the fmt
// library that torch links privately.
const libkineto::TraceSpan& Span() {
  static const auto* span = new libkineto::TraceSpan(0, 0, "rbln", "");
  return *span;
}

class StageActivity : public libkineto::ITraceActivity {
 public:
  StageActivity(const libkineto::TraceSpan* span, std::string name, int64_t start_ns,
                int64_t end_ns, int64_t device, int64_t resource, std::string metadata)
      : span_(span),
        name_(std::move(name)),
        start_ns_(start_ns),
        end_ns_(end_ns),
        device_(device),
        resource_(resource),
        metadata_(std::move(metadata)) {}

  int64_t deviceId() const override { return device_; }
  int64_t resourceId() const override { return resource_; }
  int32_t getThreadId() const override { return 0; }
  int64_t timestamp() const override { return start_ns_; }
  int64_t duration() const override { return end_ns_ - start_ns_; }
  int64_t correlationId() const override { return 0; }
  int flowType() const override { return 0; }
  int64_t flowId() const override { return 0; }
  bool flowStart() const override { return false; }
  libkineto::ActivityType type() const override {
    return libkineto::ActivityType::CONCURRENT_KERNEL;
  }
  const std::string name() const override { return name_; }
  // Not linked to the launching op (SPEC O2: per-op Self RBLN stays 0; the
  // device time lives in these events). The op's correlation id is metadata.
  const ITraceActivity* linkedActivity() const override { return nullptr; }
  const libkineto::TraceSpan* traceSpan() const override { return span_; }
  void log(libkineto::ActivityLogger& logger) const override { logger.handleActivity(*this); }
  const std::string metadataJson() const override { return metadata_; }

 private:
  const libkineto::TraceSpan* const span_;
  const std::string name_;
  const int64_t start_ns_, end_ns_, device_, resource_;
  const std::string metadata_;
};

// Kineto's logger keeps pointers to the activities, and torch's profiler
// result reads them again in export_chrome_trace(), after the session is
// gone: activities of the last kKeptTraces traces stay alive here.
class ActivityStore {
 public:
  static ActivityStore& Global() {
    static auto* store = new ActivityStore();
    return *store;
  }
  // Takes ownership; drops the oldest trace's activities past the limit.
  void Keep(std::vector<std::unique_ptr<StageActivity>> trace) {
    std::lock_guard<std::mutex> lock(mu_);
    traces_.push_back(std::move(trace));
    while (traces_.size() > kKeptTraces) traces_.pop_front();
  }

 private:
  static constexpr size_t kKeptTraces = 16;
  std::mutex mu_;
  std::deque<std::vector<std::unique_ptr<StageActivity>>> traces_;
};

// On ATOM the bridge is off: torch.profiler shows host rows only (SPEC O1);
// the .pb file still has the device activity.
bool BridgeOffForProfile() {
  absl::StatusOr<DevicePlan> plan = CurrentPlan();
  return plan.ok() && plan->profile.name == "atom";
}

class RblnProfilerSession : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    ProfileRecorder* recorder = ProfileRecorder::Global();
    first_id_ = recorder ? recorder->num_seen() + 1 : 0;
  }
  // The trace is being collected: the runtime writes its rbln_<timestamp>.pb
  // and prints its status report now, before torch.profiler's tables (seed
  // 002, SPEC O4), also on ATOM where the bridge adds no events.
  void stop() override {
    ProfileRecorder* recorder = ProfileRecorder::Global();
    end_id_ = recorder ? recorder->num_seen() + 1 : 0;
    if (recorder != nullptr) recorder->ReportUnwritten();
  }
  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback, int64_t,
                    int64_t) override {
    ProfileRecorder* recorder = ProfileRecorder::Global();
    if (recorder == nullptr || BridgeOffForProfile()) return;
    const runtime::profile::Profile p = recorder->Snapshot();
    const int64_t offset = p.clock_offset_ns();
    int call = 0;
    std::vector<std::unique_ptr<StageActivity>> activities;
    for (const runtime::profile::Execution& e : p.executions()) {
      if (e.id() < first_id_ || e.id() >= end_id_) continue;
      int arg = 0;
      for (const runtime::profile::Stage& s : e.stages()) {
        const bool compute = s.kind() == runtime::profile::COMPUTE;
        const std::string name =
            runtime::DeviceEventName(call, e, s, compute ? 0 : arg++);
        auto a = std::make_unique<StageActivity>(
            &Span(), name, s.start_ns() + offset, s.end_ns() + offset,
            e.npu() < 0 ? 0 : e.npu(),
            // Rows: argument transfer, compute.
            compute ? 1 : 0,
            absl::StrCat("\"program\": \"", e.program(), "\", \"execution\": ", e.id(),
                         ", \"bytes\": ", s.bytes(), ", \"correlation\": ",
                         e.correlation_id()));
        a->log(logger);
        activities.push_back(std::move(a));
      }
      ++call;
    }
    ActivityStore::Global().Keep(std::move(activities));
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override { ProfileRecorder::PushCorrelationId(id); }
  void popCorrelationId() override { ProfileRecorder::PopCorrelationId(); }

 private:
  uint64_t first_id_ = 0;
  uint64_t end_id_ = 0;
};

class RblnKinetoProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>&, const libkineto::Config&) override {
    return std::make_unique<RblnProfilerSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  const std::string name_ = "rbln";
  const std::set<libkineto::ActivityType> activities_ = {
      libkineto::ActivityType::CONCURRENT_KERNEL,
      libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

}  // namespace
}  // namespace rbln::torch_backend

using RblnKinetoProfiler = rbln::torch_backend::RblnKinetoProfiler;
REGISTER_PRIVATEUSE1_PROFILER(RblnKinetoProfiler);

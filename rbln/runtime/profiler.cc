#include "rbln/runtime/profiler.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rbln/core/env.h"
#include "rbln/runtime/compute_slices.h"

namespace rbln::runtime {
namespace {

constexpr char kEnabledVar[] = "RBLN_PROFILER";
constexpr char kDirVar[] = "RBLN_PROFILER_DIR";

// Executions after the last torch.profiler session (or a process that never
// started one) still get their file.
void WriteAtExit() {
  if (ProfileRecorder* recorder = ProfileRecorder::Global()) recorder->ReportUnwritten();
}

// Read when the library loads, i.e. at process start for the extension
// module; later changes to the environment are ignored.
ProfileRecorder* MakeGlobal() {
  absl::StatusOr<bool> on = env::GetBool(kEnabledVar, false);
  if (!on.ok()) {
    std::fprintf(stderr, "[RBLN Profiler] %s; profiling is off\n",
                 std::string(on.status().message()).c_str());
    return nullptr;
  }
  if (!*on) return nullptr;
  auto* recorder = new ProfileRecorder();
  std::atexit(&WriteAtExit);
  return recorder;
}

ProfileRecorder* const g_recorder = MakeGlobal();

int64_t StageNs(const profile::Stage& s) { return s.end_ns() - s.start_ns(); }

}  // namespace

ProfileRecorder* ProfileRecorder::Global() { return g_recorder; }

namespace {
thread_local std::vector<uint64_t> t_correlation_ids;
}  // namespace

void ProfileRecorder::PushCorrelationId(uint64_t id) {
  t_correlation_ids.push_back(id);
}

void ProfileRecorder::PopCorrelationId() {
  if (!t_correlation_ids.empty()) t_correlation_ids.pop_back();
}

uint64_t ProfileRecorder::CurrentCorrelationId() {
  return t_correlation_ids.empty() ? 0 : t_correlation_ids.back();
}

uint64_t ProfileRecorder::num_seen() const {
  absl::MutexLock lock(&mu_);
  return profile_.executions_size() + profile_.dropped_executions();
}

ProfileRecorder::ProfileRecorder(uint64_t max_executions)
    : max_executions_(max_executions) {
  profile_.set_version(1);
  profile_.set_pid(getpid());
  profile_.set_clock_offset_ns(absl::GetCurrentTimeNanos() - NowNs());
}

int64_t ProfileRecorder::NowNs() { return MonotonicNowNs(); }

void ProfileRecorder::Record(profile::Execution execution) {
  absl::MutexLock lock(&mu_);
  const uint64_t seen = profile_.executions_size() + profile_.dropped_executions();
  if (static_cast<uint64_t>(profile_.executions_size()) >= max_executions_) {
    profile_.set_dropped_executions(profile_.dropped_executions() + 1);
    return;
  }
  execution.set_id(seen + 1);
  *profile_.add_executions() = std::move(execution);
}

profile::Profile ProfileRecorder::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return profile_;
}

profile::Profile ProfileRecorder::TakeUnwritten() {
  absl::MutexLock lock(&mu_);
  profile::Profile out;
  out.set_version(profile_.version());
  out.set_pid(profile_.pid());
  out.set_clock_offset_ns(profile_.clock_offset_ns());
  for (int i = taken_executions_; i < profile_.executions_size(); ++i) {
    *out.add_executions() = profile_.executions(i);
  }
  out.set_dropped_executions(profile_.dropped_executions() - taken_drops_);
  taken_executions_ = profile_.executions_size();
  taken_drops_ = profile_.dropped_executions();
  return out;
}

std::string ProfileRecorder::WriteUnwritten(const std::string& dir) {
  absl::MutexLock round(&report_mu_);
  const profile::Profile p = TakeUnwritten();
  if (p.executions_size() == 0 && p.dropped_executions() == 0) return "";
  return StatusReport(p, WriteProfile(p, dir));
}

void ProfileRecorder::ReportUnwritten() {
  const std::string report = WriteUnwritten(env::GetRaw(kDirVar).value_or("."));
  if (report.empty()) return;
  std::fflush(stdout);  // C stdio output written before this comes first.
  std::fwrite(report.data(), 1, report.size(), stdout);
  std::fflush(stdout);
}

absl::StatusOr<std::string> ProfileRecorder::WriteFile(const std::string& dir) const {
  return WriteProfile(Snapshot(), dir);
}

absl::StatusOr<std::string> ProfileRecorder::WriteProfile(const profile::Profile& p,
                                                          const std::string& dir) {
  std::string bytes;
  if (!p.SerializeToString(&bytes)) {
    return absl::InternalError("rbln profiler: cannot serialize the profile");
  }
  const std::string stamp =
      absl::FormatTime("%Y%m%d%H%M%E3S", absl::Now(), absl::LocalTimeZone());
  std::string digits;
  for (char c : stamp) {
    if (c != '.') digits.push_back(c);
  }
  std::string path = absl::StrCat(dir, "/rbln_", digits, ".pb");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0 && errno == EEXIST) {  // Another process in the same millisecond.
    path = absl::StrCat(dir, "/rbln_", digits, "_", getpid(), ".pb");
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  }
  if (fd < 0) {
    return absl::UnavailableError(absl::StrFormat(
        "rbln profiler: cannot create %s: %s; set %s to a writable directory",
        path, std::strerror(errno), kDirVar));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrFormat(
          "rbln profiler: cannot write %s: %s", path, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return path;
}

std::string ProfileRecorder::StatusReport(
    const absl::StatusOr<std::string>& written) const {
  return StatusReport(Snapshot(), written);
}

std::string ProfileRecorder::StatusReport(const profile::Profile& p,
                                          const absl::StatusOr<std::string>& written) {
  int64_t stages = 0, args_ns = 0, compute_ns = 0;
  for (const profile::Execution& e : p.executions()) {
    for (const profile::Stage& s : e.stages()) {
      ++stages;
      (s.kind() == profile::COMPUTE ? compute_ns : args_ns) += StageNs(s);
    }
  }
  const std::string rule(60, '=');
  std::string out = absl::StrCat(rule, "\n  RBLN Profiler Generation Status Report\n", rule, "\n");
  absl::StrAppendFormat(&out, "  executions recorded : %d (%d dropped)\n",
                        p.executions_size(), p.dropped_executions());
  absl::StrAppendFormat(&out, "  stages recorded     : %d\n", stages);
  absl::StrAppendFormat(&out, "  device time         : %.3f ms (compute %.3f ms, args %.3f ms)\n",
                        (compute_ns + args_ns) * 1e-6, compute_ns * 1e-6, args_ns * 1e-6);
  if (written.ok()) {
    absl::StrAppendFormat(&out, "  output              : %s\n", *written);
    absl::StrAppend(&out, "  status              : OK\n");
  } else {
    absl::StrAppendFormat(&out, "  status              : FAILED: %s\n",
                          written.status().message());
  }
  absl::StrAppend(&out, rule, "\n");
  return out;
}

std::string DeviceEventName(int64_t call, const profile::Execution& execution,
                            const profile::Stage& stage, int arg_index) {
  if (stage.kind() == profile::COMPUTE) {
    return absl::StrCat("i1_", call, "_W", stage.worker(), "_", execution.program(), "_",
                        stage.phase());
  }
  return absl::StrCat("i1_", call, "_W0_args_0_", arg_index);
}

}  // namespace rbln::runtime

#include "rbln/core/signal_recorder.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rbln {

SignalRecorder& SignalRecorder::Global() {
  static auto* recorder = new SignalRecorder(&CounterRegistry::Global());
  return *recorder;
}

SignalRecorder::SignalRecorder(CounterRegistry* counters) : counters_(counters) {}

void SignalRecorder::SetLocationProvider(std::function<std::string()> provider) {
  absl::MutexLock lock(&mu_);
  provider_ = std::move(provider);
}

absl::Status SignalRecorder::BeginCapture() {
  absl::MutexLock lock(&mu_);
  if (capturing_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(
        "rbln: torch.rbln.explain() regions cannot nest: a region with "
        "with_stack=True is already recording; end it first");
  }
  events_.clear();
  capturing_.store(true, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SignalEvent>> SignalRecorder::EndCapture() {
  absl::MutexLock lock(&mu_);
  if (!capturing_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(
        "rbln: no torch.rbln.explain() region is recording");
  }
  capturing_.store(false, std::memory_order_relaxed);
  return std::exchange(events_, {});
}

void SignalRecorder::RecordIfCapturing(absl::string_view signal,
                                       absl::string_view detail, int64_t bytes) {
  if (!capturing()) return;
  std::function<std::string()> provider;
  {
    absl::MutexLock lock(&mu_);
    if (events_.size() >= kMaxEvents) return;
    provider = provider_;
  }
  // Outside mu_: the provider may take the GIL.
  std::string where = provider ? provider() : "";
  absl::MutexLock lock(&mu_);
  if (!capturing_.load(std::memory_order_relaxed) || events_.size() >= kMaxEvents) {
    return;
  }
  events_.push_back(
      SignalEvent{std::string(signal), std::string(detail), bytes, std::move(where)});
}

Signal::Signal(absl::string_view name, SignalRecorder* recorder)
    : name_(name),
      recorder_(recorder),
      count_(recorder->counters().Get(absl::StrCat("signal/", name, "/count"))),
      bytes_(recorder->counters().Get(absl::StrCat("signal/", name, "/bytes"))) {}

void Signal::Fire(int64_t bytes, absl::string_view detail) const {
  count_->Increment();
  bytes_->Add(bytes);
  if (!detail.empty()) {
    recorder_->counters()
        .Get(absl::StrCat("signal/", name_, "/detail/", detail))
        ->Increment();
  }
  recorder_->RecordIfCapturing(name_, detail, bytes);
}

}  // namespace rbln

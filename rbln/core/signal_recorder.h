// Signals: hidden host overhead that torch.rbln.explain() reports (SPEC N3),
// e.g. a device copy that bounced through the host or an op that ran on the
// CPU. A signal is fired where the event really happens (runtime, dispatch).
//
// Firing always bumps process-wide counters (cheap, lock-free):
//   signal/<name>/count, signal/<name>/bytes and, with a detail (for example
//   "max: unsupported_op"), signal/<name>/detail/<detail>.
// explain() diffs them between region entry and exit. Only while a capture
// with source locations is active (explain(with_stack=True)) does firing also
// ask the location provider (the user's Python frame; this library has no
// Python) and keep an event record; otherwise the check is one relaxed load.
//
// Fire() calls the provider, which may take the Python GIL: never fire while
// holding a lock that a Python thread could wait on.
#ifndef RBLN_CORE_SIGNAL_RECORDER_H_
#define RBLN_CORE_SIGNAL_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rbln/core/counters.h"

namespace rbln {

// One fired signal, recorded while a capture is active.
struct SignalEvent {
  std::string signal;  // "host_bounce/d2d_copy"
  std::string detail;  // "" or e.g. "max: unsupported_op"
  int64_t bytes = 0;
  std::string where;   // "file.py:LINE(func) <- ..." or "" if unknown
};

class SignalRecorder {
 public:
  static SignalRecorder& Global();
  // A recorder of its own (tests); `counters` must outlive it.
  explicit SignalRecorder(CounterRegistry* counters);

  // Returns the source location of the code that caused the current event.
  void SetLocationProvider(std::function<std::string()> provider)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Starts keeping event records with locations. One capture at a time:
  // a second Begin before End is FailedPrecondition (regions do not nest).
  absl::Status BeginCapture() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the capture and returns its events in firing order.
  absl::StatusOr<std::vector<SignalEvent>> EndCapture() ABSL_LOCKS_EXCLUDED(mu_);
  bool capturing() const { return capturing_.load(std::memory_order_relaxed); }

  CounterRegistry& counters() const { return *counters_; }

  // Appends a record if a capture is active (asks the provider first).
  void RecordIfCapturing(absl::string_view signal, absl::string_view detail,
                         int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  CounterRegistry* const counters_;
  std::atomic<bool> capturing_{false};
  mutable absl::Mutex mu_;
  std::function<std::string()> provider_ ABSL_GUARDED_BY(mu_);
  std::vector<SignalEvent> events_ ABSL_GUARDED_BY(mu_);
  // Bounds memory if a region fires in a hot loop; the counters stay exact.
  static constexpr size_t kMaxEvents = 4096;
};

// A named signal; construct once (e.g. a function-local static) and Fire().
class Signal {
 public:
  explicit Signal(absl::string_view name,
                  SignalRecorder* recorder = &SignalRecorder::Global());

  void Fire(int64_t bytes, absl::string_view detail = "") const;

  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  SignalRecorder* const recorder_;
  Counter* const count_;
  Counter* const bytes_;
};

}  // namespace rbln

#endif  // RBLN_CORE_SIGNAL_RECORDER_H_

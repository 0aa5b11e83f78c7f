// A device event (SPEC M2, M5): a point in one stream's task order.
//
// Record(stream) remembers the stream's position after its queued tasks and
// queues a marker task; the marker takes a host timestamp when the stream's
// worker *reaches* it, so the time between two events is the time the
// device spent between them, not the time the host took to enqueue.
// Block(waiter) queues a fence on `waiter` that holds back waiter's later
// tasks until the event's stream passed the point; the host does not wait.
#ifndef RBLN_RUNTIME_DEVICE_EVENT_H_
#define RBLN_RUNTIME_DEVICE_EVENT_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rbln/runtime/device_stream.h"

namespace rbln::runtime {

class DeviceEvent {
 public:
  DeviceEvent() = default;
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;

  // Marks the current end of `stream` (re-recording moves the point).
  void Record(DeviceStream& stream) ABSL_LOCKS_EXCLUDED(mu_);
  // True if never recorded or the stream passed the recorded point.
  bool Query() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks the host until the point is passed; returns the stream's kept
  // error, if any. A never-recorded event returns at once.
  absl::Status Synchronize() ABSL_LOCKS_EXCLUDED(mu_);
  // Makes `waiter`'s later tasks wait for this event, on the device side
  // (no-op if never recorded or recorded on `waiter` itself).
  void Block(DeviceStream& waiter) const ABSL_LOCKS_EXCLUDED(mu_);

  bool recorded() const ABSL_LOCKS_EXCLUDED(mu_);
  // Milliseconds from `start` to `end`, both recorded and complete.
  static absl::StatusOr<double> ElapsedMs(const DeviceEvent& start,
                                          const DeviceEvent& end);

 private:
  // One recording: where, and when the worker reached it. Shared with the
  // marker task so re-recording never races with an old marker.
  struct Mark {
    DeviceStream* stream = nullptr;
    uint64_t seq = 0;
    absl::Mutex mu;
    bool reached ABSL_GUARDED_BY(mu) = false;
    absl::Time time ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<Mark> mark() const ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::shared_ptr<Mark> mark_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_DEVICE_EVENT_H_

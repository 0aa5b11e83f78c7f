// A device stream: a FIFO of tasks that a worker thread runs in submission
// order (SPEC M2). Each task gets a sequence number when it is enqueued;
// completed() is the highest number whose task has finished, so "has the
// stream passed point N" is one comparison. The worker starts at the first
// Enqueue, so streams that are only queried cost no thread.
//
// Errors: a failed task does not stop the stream (later tasks are
// independent transfers), but its status is kept and returned by the next
// Wait/Synchronize on this stream, once, with how many other tasks failed
// since; nothing is silently lost.
#ifndef RBLN_RUNTIME_DEVICE_STREAM_H_
#define RBLN_RUNTIME_DEVICE_STREAM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace rbln::runtime {

class DeviceStream {
 public:
  using Task = std::function<absl::Status()>;

  DeviceStream(int npu, int64_t id);
  // Runs the queued tasks to completion, then stops the worker.
  ~DeviceStream();

  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

  int npu() const { return npu_; }
  int64_t id() const { return id_; }

  // Queues `task`; `what` names it in error messages ("host->device
  // transfer of 4096 bytes"). Returns the task's sequence number (> 0).
  uint64_t Enqueue(std::string what, Task task) ABSL_LOCKS_EXCLUDED(mu_);

  // The sequence number of the last task enqueued (0 when none).
  uint64_t submitted() const ABSL_LOCKS_EXCLUDED(mu_);
  // Has every task up to and including `seq` finished?
  bool Passed(uint64_t seq) const ABSL_LOCKS_EXCLUDED(mu_);
  // Has every task enqueued so far finished?
  bool Idle() const ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until the stream has passed `seq`; returns the kept error, if
  // any (and forgets it).
  absl::Status Wait(uint64_t seq) ABSL_LOCKS_EXCLUDED(mu_);
  // Wait(submitted()).
  absl::Status Synchronize() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the stream has passed `seq`, leaving any error for the
  // stream's own Wait/Synchronize (used by fences of other streams).
  void AwaitPassed(uint64_t seq) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Item {
    uint64_t seq;
    std::string what;
    Task task;
  };
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status TakeError() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int npu_;
  const int64_t id_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  int64_t later_errors_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;  // Started by the first Enqueue (under mu_).
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_DEVICE_STREAM_H_

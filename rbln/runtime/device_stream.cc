#include "rbln/runtime/device_stream.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace rbln::runtime {

DeviceStream::DeviceStream(int npu, int64_t id) : npu_(npu), id_(id) {}

DeviceStream::~DeviceStream() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

uint64_t DeviceStream::Enqueue(std::string what, Task task) {
  absl::MutexLock lock(&mu_);
  const uint64_t seq = ++submitted_;
  queue_.push_back(Item{seq, std::move(what), std::move(task)});
  if (!worker_.joinable()) worker_ = std::thread([this] { Run(); });
  return seq;
}

void DeviceStream::Run() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DeviceStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stopping_ || !s->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // Stopping and drained.
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status status = item.task();
    // Drop the task (and what it keeps alive) before announcing completion,
    // so a waiter may free the buffers it used.
    item.task = nullptr;
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      if (first_error_.ok()) {
        first_error_ = absl::Status(
            status.code(),
            absl::StrFormat("rbln: asynchronous %s on stream %d of NPU %d "
                            "(task #%d) failed: %s",
                            item.what, id_, npu_, item.seq, status.message()));
      } else {
        ++later_errors_;
      }
    }
    completed_ = item.seq;
  }
}

uint64_t DeviceStream::submitted() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

bool DeviceStream::Passed(uint64_t seq) const {
  absl::MutexLock lock(&mu_);
  return completed_ >= seq;
}

bool DeviceStream::Idle() const {
  absl::MutexLock lock(&mu_);
  return completed_ == submitted_;
}

absl::Status DeviceStream::TakeError() {
  if (first_error_.ok()) return absl::OkStatus();
  absl::Status error = first_error_;
  if (later_errors_ > 0) {
    error = absl::Status(error.code(),
                         absl::StrFormat("%s (and %d later tasks on this stream "
                                         "failed too)",
                                         error.message(), later_errors_));
  }
  first_error_ = absl::OkStatus();
  later_errors_ = 0;
  return error;
}

absl::Status DeviceStream::Wait(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  auto passed = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return completed_ >= seq;
  };
  mu_.Await(absl::Condition(&passed));
  return TakeError();
}

absl::Status DeviceStream::Synchronize() { return Wait(submitted()); }

void DeviceStream::AwaitPassed(uint64_t seq) const {
  absl::MutexLock lock(&mu_);
  auto passed = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return completed_ >= seq;
  };
  mu_.Await(absl::Condition(&passed));
}

}  // namespace rbln::runtime

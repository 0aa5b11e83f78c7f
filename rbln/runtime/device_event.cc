#include "rbln/runtime/device_event.h"

#include "absl/strings/str_format.h"

namespace rbln::runtime {

void DeviceEvent::Record(DeviceStream& stream) {
  auto mark = std::make_shared<Mark>();
  mark->stream = &stream;
  mark->seq = stream.Enqueue("event marker", [mark]() {
    absl::MutexLock lock(&mark->mu);
    mark->time = absl::Now();
    mark->reached = true;
    return absl::OkStatus();
  });
  absl::MutexLock lock(&mu_);
  mark_ = std::move(mark);
}

std::shared_ptr<DeviceEvent::Mark> DeviceEvent::mark() const {
  absl::MutexLock lock(&mu_);
  return mark_;
}

bool DeviceEvent::recorded() const { return mark() != nullptr; }

bool DeviceEvent::Query() const {
  std::shared_ptr<Mark> m = mark();
  return m == nullptr || m->stream->Passed(m->seq);
}

absl::Status DeviceEvent::Synchronize() {
  std::shared_ptr<Mark> m = mark();
  if (m == nullptr) return absl::OkStatus();
  return m->stream->Wait(m->seq);
}

void DeviceEvent::Block(DeviceStream& waiter) const {
  std::shared_ptr<Mark> m = mark();
  if (m == nullptr || m->stream == &waiter) return;  // FIFO already orders it.
  DeviceStream* source = m->stream;
  const uint64_t seq = m->seq;
  waiter.Enqueue("event fence", [source, seq]() {
    source->AwaitPassed(seq);
    return absl::OkStatus();
  });
}

absl::StatusOr<double> DeviceEvent::ElapsedMs(const DeviceEvent& start,
                                              const DeviceEvent& end) {
  std::shared_ptr<Mark> a = start.mark(), b = end.mark();
  if (a == nullptr || b == nullptr) {
    return absl::FailedPreconditionError(
        "rbln: elapsed_time needs both events recorded; call record() on each "
        "first");
  }
  absl::Time ta, tb;
  bool done = true;
  {
    absl::MutexLock lock(&a->mu);
    done = done && a->reached;
    ta = a->time;
  }
  {
    absl::MutexLock lock(&b->mu);
    done = done && b->reached;
    tb = b->time;
  }
  if (!done) {
    return absl::FailedPreconditionError(
        "rbln: elapsed_time needs both events completed; call "
        "end_event.synchronize() (or torch.rbln.synchronize()) first");
  }
  return absl::ToDoubleMilliseconds(tb - ta);
}

}  // namespace rbln::runtime

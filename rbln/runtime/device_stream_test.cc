// spec: M2, M5 (runtime side of streams and events)
#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rbln/runtime/device_event.h"
#include "rbln/runtime/device_stream.h"

namespace rbln::runtime {
namespace {

TEST(DeviceStreamTest, RunsTasksInSubmissionOrder) {  // spec: M2
  DeviceStream stream(0, 1);
  absl::Mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) {
    stream.Enqueue("append", [&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(stream.Synchronize().ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(stream.Idle());
  EXPECT_EQ(stream.submitted(), 100u);
}

TEST(DeviceStreamTest, CompletionIsPerStream) {  // spec: M2
  DeviceStream busy(0, 1), quick(0, 2);
  absl::Notification release;
  const uint64_t blocked = busy.Enqueue("held", [&] {
    release.WaitForNotification();
    return absl::OkStatus();
  });
  const uint64_t done = quick.Enqueue("quick", [] { return absl::OkStatus(); });
  ASSERT_TRUE(quick.Wait(done).ok());
  EXPECT_TRUE(quick.Idle());
  EXPECT_FALSE(busy.Passed(blocked));
  EXPECT_FALSE(busy.Idle());
  release.Notify();
  ASSERT_TRUE(busy.Wait(blocked).ok());
  EXPECT_TRUE(busy.Idle());
}

TEST(DeviceStreamTest, FenceOrdersAcrossStreamsWithoutBlockingHost) {  // spec: M2
  DeviceStream producer(0, 1), consumer(0, 2);
  absl::Notification release;
  std::atomic<bool> produced{false};
  std::atomic<bool> consumed_after_produce{false};
  producer.Enqueue("produce", [&] {
    release.WaitForNotification();
    produced = true;
    return absl::OkStatus();
  });
  DeviceEvent event;
  event.Record(producer);
  EXPECT_FALSE(event.Query());
  event.Block(consumer);  // Returns at once: the host is not blocked.
  const uint64_t consume = consumer.Enqueue("consume", [&] {
    consumed_after_produce = produced.load();
    return absl::OkStatus();
  });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(consumer.Passed(consume));  // Held back by the fence.
  release.Notify();
  ASSERT_TRUE(consumer.Wait(consume).ok());
  EXPECT_TRUE(consumed_after_produce);
  EXPECT_TRUE(event.Query());
}

TEST(DeviceEventTest, NeverRecordedIsCompleteAndBlockIsNoOp) {  // spec: M2
  DeviceEvent event;
  DeviceStream stream(0, 0);
  EXPECT_TRUE(event.Query());
  EXPECT_TRUE(event.Synchronize().ok());
  event.Block(stream);
  EXPECT_EQ(stream.submitted(), 0u);
  EXPECT_FALSE(DeviceEvent::ElapsedMs(event, event).ok());
}

TEST(DeviceEventTest, ElapsedTimeMeasuresStreamTimeNotEnqueueTime) {  // spec: M5
  DeviceStream stream(0, 1);
  DeviceEvent start, end;
  const absl::Time host_start = absl::Now();
  start.Record(stream);
  stream.Enqueue("work", [] {
    absl::SleepFor(absl::Milliseconds(50));
    return absl::OkStatus();
  });
  end.Record(stream);
  // Enqueueing took far less than the work; not complete yet.
  EXPECT_FALSE(DeviceEvent::ElapsedMs(start, end).ok());
  ASSERT_TRUE(end.Synchronize().ok());
  const double host_ms = absl::ToDoubleMilliseconds(absl::Now() - host_start);
  absl::StatusOr<double> ms = DeviceEvent::ElapsedMs(start, end);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 49.0);
  EXPECT_LE(*ms, host_ms + 1.0);
}

TEST(DeviceStreamTest, FailedTaskSurfacesOnceAtNextSynchronize) {  // spec: M2
  DeviceStream stream(3, 7);
  std::atomic<int> ran{0};
  stream.Enqueue("host->device transfer of 16 bytes", [] {
    return absl::InvalidArgumentError("address 0x10 is not mapped");
  });
  stream.Enqueue("second failure", [] { return absl::InternalError("boom"); });
  stream.Enqueue("after", [&] {
    ++ran;
    return absl::OkStatus();
  });
  const absl::Status status = stream.Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("host->device transfer of 16 bytes"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("stream 7 of NPU 3"), std::string::npos) << status;
  EXPECT_NE(status.message().find("not mapped"), std::string::npos) << status;
  EXPECT_NE(status.message().find("1 later tasks"), std::string::npos) << status;
  EXPECT_EQ(ran.load(), 1);  // Later tasks still ran.
  EXPECT_TRUE(stream.Synchronize().ok());  // Reported once.
}

TEST(DeviceStreamTest, DestructorDrainsQueuedTasks) {  // spec: M2
  std::atomic<int> ran{0};
  {
    DeviceStream stream(0, 1);
    for (int i = 0; i < 10; ++i) {
      stream.Enqueue("count", [&] {
        absl::SleepFor(absl::Milliseconds(1));
        ++ran;
        return absl::OkStatus();
      });
    }
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace rbln::runtime

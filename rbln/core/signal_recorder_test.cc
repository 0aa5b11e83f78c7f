#include "rbln/core/signal_recorder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(SignalRecorderTest, FireCountsCountBytesAndDetail) {
  CounterRegistry counters;
  SignalRecorder recorder(&counters);
  const Signal signal("test/bounce", &recorder);
  signal.Fire(100);
  signal.Fire(28, "mul: dtype");
  const auto snapshot = counters.Snapshot();
  EXPECT_EQ(snapshot.at("signal/test/bounce/count"), 2);
  EXPECT_EQ(snapshot.at("signal/test/bounce/bytes"), 128);
  EXPECT_EQ(snapshot.at("signal/test/bounce/detail/mul: dtype"), 1);
}

TEST(SignalRecorderTest, LocationsOnlyWhileCapturing) {
  CounterRegistry counters;
  SignalRecorder recorder(&counters);
  int provider_calls = 0;
  recorder.SetLocationProvider([&] {
    ++provider_calls;
    return std::string("x.py:3(f)");
  });
  const Signal signal("test/fallback", &recorder);
  signal.Fire(8);  // Not capturing: no provider call, no record.
  EXPECT_EQ(provider_calls, 0);

  ASSERT_TRUE(recorder.BeginCapture().ok());
  EXPECT_TRUE(recorder.capturing());
  signal.Fire(16, "sin: unsupported_op");
  absl::StatusOr<std::vector<SignalEvent>> events = recorder.EndCapture();
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].signal, "test/fallback");
  EXPECT_EQ((*events)[0].detail, "sin: unsupported_op");
  EXPECT_EQ((*events)[0].bytes, 16);
  EXPECT_EQ((*events)[0].where, "x.py:3(f)");
  EXPECT_EQ(provider_calls, 1);

  signal.Fire(8);  // Capture over.
  EXPECT_EQ(provider_calls, 1);
  EXPECT_EQ(counters.Snapshot().at("signal/test/fallback/count"), 3);
}

TEST(SignalRecorderTest, CapturesDoNotNest) {
  CounterRegistry counters;
  SignalRecorder recorder(&counters);
  ASSERT_TRUE(recorder.BeginCapture().ok());
  absl::Status second = recorder.BeginCapture();
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.message().find("cannot nest"), std::string::npos);
  ASSERT_TRUE(recorder.EndCapture().ok());
  EXPECT_FALSE(recorder.EndCapture().ok());  // Nothing to end.
  EXPECT_TRUE(recorder.BeginCapture().ok());  // A new region may start.
}

}  // namespace
}  // namespace rbln

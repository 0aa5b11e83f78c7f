#include "rbln/core/counters.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(CountersTest, SameNameSameCounter) {
  CounterRegistry registry;
  Counter* a = registry.Get("test/a");
  EXPECT_EQ(a, registry.Get("test/a"));
  EXPECT_NE(a, registry.Get("test/b"));
  a->Add(3);
  a->Increment();
  EXPECT_EQ(registry.Snapshot().at("test/a"), 4);
  EXPECT_EQ(registry.Snapshot().at("test/b"), 0);
}

TEST(CountersTest, ConcurrentIncrementsAreAllCounted) {
  CounterRegistry registry;
  Counter* c = registry.Get("test/concurrent");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([c] {
      for (int i = 0; i < 10000; ++i) c->Increment();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
}

}  // namespace
}  // namespace rbln

// Process-wide named event counters. The runtime, compiler and dispatch layer
// bump them when the event really happens (a compile, a DMA); explain() and
// tests read them. Counters are never reset by the code that bumps them.
#ifndef RBLN_CORE_COUNTERS_H_
#define RBLN_CORE_COUNTERS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace rbln {

class Counter {
 public:
  void Add(int64_t delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  void Increment() { Add(1); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class CounterRegistry {
 public:
  static CounterRegistry& Global();

  // Returns the counter named `name`, creating it at zero. The pointer stays
  // valid for the life of the process, so hot paths look it up once.
  Counter* Get(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);

  // Name -> value of every counter, sorted by name.
  std::map<std::string, int64_t> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Counter>> counters_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln

#endif  // RBLN_CORE_COUNTERS_H_

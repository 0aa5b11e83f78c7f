#include "rbln/core/counters.h"

namespace rbln {

CounterRegistry& CounterRegistry::Global() {
  static auto* registry = new CounterRegistry();
  return *registry;
}

Counter* CounterRegistry::Get(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Counter>& slot = counters_[name];
  if (slot == nullptr) slot = std::make_unique<Counter>();
  return slot.get();
}

std::map<std::string, int64_t> CounterRegistry::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [name, counter] : counters_) out[name] = counter->value();
  return out;
}

}  // namespace rbln

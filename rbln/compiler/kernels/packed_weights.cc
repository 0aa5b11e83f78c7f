#include "rbln/compiler/kernels/packed_weights.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "rbln/core/counters.h"
#include "rbln/core/env.h"

namespace rbln::compiler {
namespace {

constexpr char kCapacityVariable[] = "RBLN_COMPILER_PACKED_WEIGHTS_MB";
constexpr int64_t kDefaultCapacityMb = 4096;
// Weights remembered as seen once, at most (each costs a few words).
constexpr size_t kMaxEntries = 1 << 16;

struct Counters {
  Counter* bytes = CounterRegistry::Global().Get("compiler/packed_weights/bytes");
  Counter* packs = CounterRegistry::Global().Get("compiler/packed_weights/packs");
  Counter* hits = CounterRegistry::Global().Get("compiler/packed_weights/hits");
  Counter* evictions =
      CounterRegistry::Global().Get("compiler/packed_weights/evictions");
};

Counters& Count() {
  static auto* counters = new Counters();
  return *counters;
}

std::shared_ptr<void> AlignedBuffer(uint64_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) {
    std::fprintf(stderr,
                 "[rbln compiler] cannot allocate %llu bytes for a packed "
                 "GEMM weight\n",
                 static_cast<unsigned long long>(bytes));
    std::abort();
  }
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// Copies packed for one call up to this size reuse their thread's buffer.
constexpr uint64_t kMaxReusedOnceBytes = uint64_t{64} << 20;

// A buffer for a copy packed for one call: the calling thread's, reused
// while no caller holds it, so a program's first run (every weight packed
// once) does not fault in fresh pages for each (~a third of packing a
// decoder weight into new memory). Larger copies, or while the thread's is
// held, get their own.
std::shared_ptr<void> OnceBuffer(uint64_t bytes) {
  thread_local std::shared_ptr<void> reused;
  thread_local uint64_t reused_bytes = 0;
  if (bytes > kMaxReusedOnceBytes || reused.use_count() > 1) {
    return AlignedBuffer(bytes);
  }
  if (reused == nullptr || reused_bytes < bytes) {
    reused = nullptr;
    reused = AlignedBuffer(bytes);
    reused_bytes = bytes;
  }
  return reused;
}

}  // namespace

absl::StatusOr<uint64_t> PackedWeightsCapacityFromEnv() {
  absl::StatusOr<int64_t> mb =
      env::GetInt(kCapacityVariable, kDefaultCapacityMb, 0, int64_t{1} << 30);
  if (!mb.ok()) return mb.status();
  return static_cast<uint64_t>(*mb) << 20;
}

struct PackedWeightCache::Impl {
  // One weight region in one layout.
  using Key = std::pair<uintptr_t, std::vector<int64_t>>;
  struct Entry {
    uint64_t version = 0;
    uint64_t bytes = 0;
    uint64_t last_use = 0;
    std::shared_ptr<void> data;
  };

  explicit Impl(uint64_t capacity) : capacity(capacity) {}

  // Drops least recently used entries until `incoming` more bytes fit.
  void MakeRoom(uint64_t incoming) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (total + incoming > capacity) {
      auto oldest = entries.end();
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it->second.data != nullptr &&
            (oldest == entries.end() ||
             it->second.last_use < oldest->second.last_use)) {
          oldest = it;
        }
      }
      if (oldest == entries.end()) return;
      Drop(oldest);
      Count().evictions->Increment();
      ++stats.evictions;
    }
  }

  // Forgets the weights seen once and not packed.
  void DropUnpacked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    absl::erase_if(entries, [](const auto& kv) { return kv.second.data == nullptr; });
  }

  void Drop(absl::flat_hash_map<Key, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    total -= it->second.bytes;
    Count().bytes->Add(-static_cast<int64_t>(it->second.bytes));
    entries.erase(it);
  }

  const uint64_t capacity;
  mutable absl::Mutex mu;
  absl::flat_hash_map<Key, Entry> entries ABSL_GUARDED_BY(mu);
  uint64_t total ABSL_GUARDED_BY(mu) = 0;
  uint64_t tick ABSL_GUARDED_BY(mu) = 0;
  Stats stats ABSL_GUARDED_BY(mu);
};

PackedWeightCache::PackedWeightCache(uint64_t capacity_bytes)
    : impl_(std::make_shared<Impl>(capacity_bytes)) {}

namespace {
// Global()'s cache once created, for ClearGlobal().
std::atomic<PackedWeightCache*> g_global{nullptr};
}  // namespace

void PackedWeightCache::ClearGlobal() {
  if (PackedWeightCache* cache = g_global.load(std::memory_order_acquire)) {
    cache->Clear();
  }
}

PackedWeightCache& PackedWeightCache::Global() {
  static PackedWeightCache* cache = [] {
    absl::StatusOr<uint64_t> capacity = PackedWeightsCapacityFromEnv();
    if (!capacity.ok()) {
      std::fprintf(stderr, "[rbln compiler] %s\n",
                   std::string(capacity.status().message()).c_str());
      std::abort();
    }
    auto* created = new PackedWeightCache(*capacity);
    g_global.store(created, std::memory_order_release);
    return created;
  }();
  return *cache;
}

std::shared_ptr<const void> PackedWeightCache::Get(
    const InputContent& content, absl::Span<const int64_t> layout,
    uint64_t bytes, absl::FunctionRef<void(void* out)> pack) {
  Impl& c = *impl_;
  if (bytes > c.capacity) return nullptr;  // could never be kept
  Impl::Key key{content.address,
                std::vector<int64_t>(layout.begin(), layout.end())};
  {
    absl::MutexLock lock(&c.mu);
    auto it = c.entries.find(key);
    const bool seen = it != c.entries.end() &&
                      it->second.version == content.version;
    if (seen && it->second.data != nullptr) {
      it->second.last_use = ++c.tick;
      Count().hits->Increment();
      ++c.stats.hits;
      return it->second.data;
    }
    if (!seen) {
      // First sight of this version: remembered, not packed. A weight
      // written between every two calls (training) is never packed for
      // nothing; a weight used twice is packed at its second use.
      if (it != c.entries.end()) c.Drop(it);
      if (c.entries.size() >= kMaxEntries) c.DropUnpacked();
      c.entries[key] = Impl::Entry{content.version, 0, ++c.tick, nullptr};
      return nullptr;
    }
  }
  // Packed outside the lock: other workers pack their own blocks meanwhile.
  std::shared_ptr<void> data = AlignedBuffer(bytes);
  pack(data.get());
  Count().packs->Increment();
  absl::MutexLock lock(&c.mu);
  ++c.stats.packs;
  auto it = c.entries.find(key);
  if (it != c.entries.end()) c.Drop(it);  // a concurrent run's copy
  c.MakeRoom(bytes);
  c.entries[key] = Impl::Entry{content.version, bytes, ++c.tick, data};
  c.total += bytes;
  Count().bytes->Add(static_cast<int64_t>(bytes));
  return data;
}

std::shared_ptr<const void> PackedWeightCache::GetOrPackOnce(
    const InputContent& content, absl::Span<const int64_t> layout,
    uint64_t bytes, absl::FunctionRef<void(void* out)> pack) {
  std::shared_ptr<const void> kept = Get(content, layout, bytes, pack);
  if (kept != nullptr) return kept;
  std::shared_ptr<void> once = OnceBuffer(bytes);
  pack(once.get());
  absl::MutexLock lock(&impl_->mu);
  ++impl_->stats.packs_once;
  return once;
}

PackedWeightCache::Stats PackedWeightCache::stats() const {
  absl::MutexLock lock(&impl_->mu);
  Stats s = impl_->stats;
  s.bytes = impl_->total;
  return s;
}

void PackedWeightCache::Clear() {
  Impl& c = *impl_;
  absl::MutexLock lock(&c.mu);
  while (!c.entries.empty()) c.Drop(c.entries.begin());
}

uint64_t PackedWeightCache::bytes() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->total;
}

int64_t PackedWeightCache::entries() const {
  absl::MutexLock lock(&impl_->mu);
  return static_cast<int64_t>(impl_->entries.size());
}

}  // namespace rbln::compiler

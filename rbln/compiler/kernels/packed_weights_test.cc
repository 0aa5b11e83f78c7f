#include "rbln/compiler/kernels/packed_weights.h"

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/runtime/executable.h"

namespace rbln::compiler {
namespace {

runtime::BufferView View(void* data, int64_t n, uint64_t version,
                         uintptr_t address) {
  runtime::BufferView v;
  v.data = data;
  v.dtype = DType::kFloat32;
  v.sizes = {n};
  v.strides = {1};
  v.content_version = version;
  v.content_address = address;
  return v;
}

TEST(InputContentTest, FindsRegisteredInputsForTheRunOnly) {
  std::vector<float> weight(64), other(64), output(64);
  std::vector<runtime::BufferView> args = {
      View(weight.data(), 64, 7, 0x10000), View(other.data(), 64, 0, 0x20000),
      View(output.data(), 64, 0, 0)};
  std::vector<void*> data = {weight.data(), other.data()};
  EXPECT_FALSE(FindInputContent(weight.data(), 4).has_value());
  {
    InputContentScope scope(args, data, 2);
    std::optional<InputContent> c = FindInputContent(weight.data() + 8, 16 * 4);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->address, 0x10000u + 32);  // the virtual address of element 8
    EXPECT_EQ(c->version, 7u);
    // Past the input's end, an input without a version, an output: none.
    EXPECT_FALSE(FindInputContent(weight.data() + 60, 8 * 4).has_value());
    EXPECT_FALSE(FindInputContent(other.data(), 4).has_value());
    EXPECT_FALSE(FindInputContent(output.data(), 4).has_value());
    {
      // A concurrent run registering the same bytes with the same content
      // keeps them findable; after it ends they still are.
      InputContentScope same(args, data, 1);
      EXPECT_TRUE(FindInputContent(weight.data(), 4).has_value());
    }
    EXPECT_TRUE(FindInputContent(weight.data(), 4).has_value());
    {
      // One with another version makes them unknown while both run.
      std::vector<runtime::BufferView> newer = {View(weight.data(), 64, 8, 0x10000)};
      InputContentScope conflicting(newer, data, 1);
      EXPECT_FALSE(FindInputContent(weight.data(), 4).has_value());
    }
  }
  EXPECT_FALSE(FindInputContent(weight.data(), 4).has_value());
}

TEST(PackedWeightCacheTest, PacksAtTheSecondUseOfAVersion) {
  PackedWeightCache cache(1 << 20);
  int packs = 0;
  auto pack = [&](void* out) {
    ++packs;
    std::memset(out, packs, 256);
  };
  const std::vector<int64_t> layout = {1, 2, 3};
  // First use: read as stored (a weight written before every call, as in
  // training, is never packed for nothing).
  EXPECT_EQ(cache.Get({0x1000, 1}, layout, 256, pack), nullptr);
  EXPECT_EQ(packs, 0);
  std::shared_ptr<const void> a = cache.Get({0x1000, 1}, layout, 256, pack);
  std::shared_ptr<const void> b = cache.Get({0x1000, 1}, layout, 256, pack);
  EXPECT_EQ(packs, 1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(static_cast<const char*>(b.get())[0], 1);
  // Another layout of the same weight is another copy.
  EXPECT_EQ(cache.Get({0x1000, 1}, {1, 2, 4}, 256, pack), nullptr);
  cache.Get({0x1000, 1}, {1, 2, 4}, 256, pack);
  EXPECT_EQ(packs, 2);
  // A new version (the weight was written) drops the old copy; the old one
  // stays valid for whoever holds it.
  EXPECT_EQ(cache.Get({0x1000, 2}, layout, 256, pack), nullptr);
  std::shared_ptr<const void> c = cache.Get({0x1000, 2}, layout, 256, pack);
  EXPECT_EQ(packs, 3);
  EXPECT_EQ(static_cast<const char*>(c.get())[0], 3);
  EXPECT_EQ(static_cast<const char*>(a.get())[0], 1);
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.bytes(), 512u);
  const PackedWeightCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.packs, 3);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.evictions, 0);
  EXPECT_EQ(stats.packs_once, 0);
  EXPECT_EQ(stats.bytes, 512u);
  cache.Clear();
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(PackedWeightCacheTest, EvictsLeastRecentlyUsedAndSkipsOversize) {
  PackedWeightCache cache(1000);
  int packs = 0;
  auto pack = [&](void*) { ++packs; };
  auto use = [&](uintptr_t address, uint64_t bytes) {
    return cache.Get({address, 1}, {}, bytes, pack);
  };
  for (int i = 0; i < 2; ++i) use(0x1000, 400);
  for (int i = 0; i < 2; ++i) use(0x2000, 400);
  use(0x1000, 400);  // hit: 0x2000 is now the least recently used
  for (int i = 0; i < 2; ++i) use(0x3000, 400);  // evicts 0x2000
  EXPECT_EQ(packs, 3);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_LE(cache.bytes(), 1000u);
  EXPECT_NE(use(0x1000, 400), nullptr);
  EXPECT_EQ(packs, 3);
  EXPECT_EQ(use(0x2000, 400), nullptr);  // forgotten: seen anew
  // Larger than the whole capacity: never packed, the caller reads it as
  // stored.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(use(0x4000, 2000), nullptr);
  EXPECT_EQ(packs, 3);
  // Capacity 0 keeps nothing.
  PackedWeightCache none(0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(none.Get({0x1000, 1}, {}, 64, pack), nullptr);
  }
  EXPECT_EQ(packs, 3);
  EXPECT_EQ(none.entries(), 0);
}

TEST(PackedWeightCacheTest, GetOrPackOnceAlwaysGivesAPackedCopy) {
  PackedWeightCache cache(1000);
  int packs = 0;
  auto pack = [&](void* out) {
    ++packs;
    std::memset(out, packs, 64);
  };
  // First use: a copy for the caller alone, not kept.
  std::shared_ptr<const void> first = cache.GetOrPackOnce({0x1000, 1}, {}, 64, pack);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(static_cast<const char*>(first.get())[0], 1);
  EXPECT_EQ(cache.bytes(), 0u);
  // Second: packed and kept; third: the kept one.
  std::shared_ptr<const void> kept = cache.GetOrPackOnce({0x1000, 1}, {}, 64, pack);
  EXPECT_EQ(cache.GetOrPackOnce({0x1000, 1}, {}, 64, pack).get(), kept.get());
  // Larger than the capacity: a copy per call, never kept.
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(cache.GetOrPackOnce({0x2000, 1}, {}, 2000, pack), nullptr);
  }
  EXPECT_EQ(packs, 4);
  const PackedWeightCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.packs_once, 3);
  EXPECT_EQ(stats.packs, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.bytes, 64u);
}

TEST(PackedWeightCacheTest, CopiesForOneCallReuseTheThreadsBufferOnceReleased) {
  PackedWeightCache cache(1 << 20);
  auto pack_with = [](char value) {
    return [value](void* out) { std::memset(out, value, 4096); };
  };
  const void* buffer = nullptr;
  {
    std::shared_ptr<const void> a = cache.GetOrPackOnce({0x1000, 1}, {}, 4096, pack_with(1));
    buffer = a.get();
    // Held: another weight's copy is packed elsewhere, a's bytes stay.
    std::shared_ptr<const void> b = cache.GetOrPackOnce({0x2000, 1}, {}, 4096, pack_with(2));
    EXPECT_NE(b.get(), buffer);
    EXPECT_EQ(static_cast<const char*>(a.get())[4095], 1);
    EXPECT_EQ(static_cast<const char*>(b.get())[0], 2);
  }
  // Released: the next copy for one call reuses the buffer.
  std::shared_ptr<const void> c = cache.GetOrPackOnce({0x3000, 1}, {}, 4096, pack_with(3));
  EXPECT_EQ(c.get(), buffer);
  EXPECT_EQ(static_cast<const char*>(c.get())[0], 3);
  // A kept copy (second use) is never the thread's buffer.
  c.reset();
  std::shared_ptr<const void> kept = cache.GetOrPackOnce({0x3000, 1}, {}, 4096, pack_with(4));
  EXPECT_NE(kept.get(), buffer);
  std::shared_ptr<const void> d = cache.GetOrPackOnce({0x4000, 1}, {}, 4096, pack_with(5));
  EXPECT_EQ(d.get(), buffer);
  EXPECT_EQ(static_cast<const char*>(kept.get())[0], 4);
  // On another thread, another buffer.
  const void* other = nullptr;
  std::thread([&] {
    other = cache.GetOrPackOnce({0x5000, 1}, {}, 4096, pack_with(6)).get();
  }).join();
  EXPECT_NE(other, buffer);
}

TEST(PackedWeightCacheTest, CapacityFromTheEnvironment) {
  unsetenv("RBLN_COMPILER_PACKED_WEIGHTS_MB");
  EXPECT_EQ(*PackedWeightsCapacityFromEnv(), uint64_t{4096} << 20);
  setenv("RBLN_COMPILER_PACKED_WEIGHTS_MB", "0", 1);
  EXPECT_EQ(*PackedWeightsCapacityFromEnv(), 0u);
  setenv("RBLN_COMPILER_PACKED_WEIGHTS_MB", "lots", 1);
  absl::StatusOr<uint64_t> bad = PackedWeightsCapacityFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("RBLN_COMPILER_PACKED_WEIGHTS_MB"),
            std::string::npos);
  unsetenv("RBLN_COMPILER_PACKED_WEIGHTS_MB");
}

}  // namespace
}  // namespace rbln::compiler

// Copies of GEMM weights in the layout a library wants (oneDNN's blocked
// layouts for AMX/AVX-512, f32 widenings of f16), kept between runs while
// the weight's bytes keep their content version (input_content.h).
//
// Without it every call re-lays out every weight: for a decoder's warm
// forward that is reading and writing all its weights once more per call,
// what PyTorch eager also pays. A new version (the weight was written: an
// optimizer step, a load_state_dict) misses and replaces the old copy.
//
// The copies are host memory of the compiler's library, outside the
// simulated device memory (like oneDNN's own scratchpads); their size is
// bounded by RBLN_COMPILER_PACKED_WEIGHTS_MB (default 4096, 0: keep none),
// least recently used first out, and shown by the counters
// compiler/packed_weights/{bytes,packs,hits,evictions} (all caches) and
// stats() (one cache).
//
// A copy is keyed by the weight's bytes and the words naming its packed
// layout only (gemm_plan::PackedWeightKey: never A's row count), so GEMMs
// of every M over one weight -- a prefill of any length and the decode
// steps -- share one copy.
#ifndef RBLN_COMPILER_KERNELS_PACKED_WEIGHTS_H_
#define RBLN_COMPILER_KERNELS_PACKED_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rbln/compiler/kernels/input_content.h"

namespace rbln::compiler {

// RBLN_COMPILER_PACKED_WEIGHTS_MB in bytes, or an error naming the variable.
absl::StatusOr<uint64_t> PackedWeightsCapacityFromEnv();

class PackedWeightCache {
 public:
  explicit PackedWeightCache(uint64_t capacity_bytes);

  // The process's cache, with the capacity from the environment (aborts
  // with the variable's error on a bad value, like other compiler
  // settings read at a library call).
  static PackedWeightCache& Global();

  // The copy of `content`'s weight in the layout `layout` names (any words
  // that determine it), `bytes` long: the cached one if it was made from
  // the same content version, else a new one `pack` fills (64-byte
  // aligned) -- but only at the second use of a version: at the first one,
  // or when `bytes` exceeds the capacity, null (the caller reads the weight
  // as stored). The result stays valid while held, even if evicted.
  std::shared_ptr<const void> Get(const InputContent& content,
                                  absl::Span<const int64_t> layout,
                                  uint64_t bytes,
                                  absl::FunctionRef<void(void* out)> pack);

  // Get(), except that where Get() gives null, a copy `pack` fills for the
  // caller alone (not kept): every call of a GEMM reads the weight in the
  // same layout with the same primitive, the first one included, so it
  // computes the same bits. The copy for one call is in a buffer of the
  // calling thread's (up to 64 MiB, kept for the thread's life) that the
  // next such copy reuses once the result is released.
  std::shared_ptr<const void> GetOrPackOnce(
      const InputContent& content, absl::Span<const int64_t> layout,
      uint64_t bytes, absl::FunctionRef<void(void* out)> pack);

  // What this cache did since it was created (or Clear()ed: `bytes` only).
  struct Stats {
    int64_t packs = 0;           // copies packed and kept
    int64_t packs_once = 0;      // copies packed for one call (GetOrPackOnce)
    int64_t hits = 0;            // kept copies reused
    int64_t evictions = 0;       // kept copies dropped for room
    uint64_t bytes = 0;          // bytes kept now
  };
  Stats stats() const;

  void Clear();
  // Clears Global() if it exists: never reads the environment (whose bad
  // value Global() would abort on), e.g. for torch.rbln.empty_cache().
  static void ClearGlobal();
  uint64_t bytes() const;
  int64_t entries() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_PACKED_WEIGHTS_H_

// The compiler's entry point: graph IR -> a runnable CompiledProgram.
//
// Compile() runs frontend -> fusion -> bufferization -> lowering -> JIT and
// keeps programs in a specialization cache (SPEC P9, G4): a bounded LRU in
// memory keyed by the graph's fingerprint (dtypes, static shapes and static
// scalars are all in the graph; inputs are contiguous by contract) and the
// target, confirmed by comparing graphs; optionally backed by an on-disk
// cache of object code (see disk_cache.h).
//
// Thread-safe: compiles run outside the cache lock, each on an MLIRContext
// of its own taken from a pool of long-lived contexts (one per concurrent
// compile worker); concurrent Compile() calls for the same graph compile once
// and share the program.
//
// Environment (read when the compiler is constructed from the environment):
//   RBLN_COMPILER_CACHE_SIZE  programs kept in memory (default 512, >= 1)
//   RBLN_COMPILER_CACHE_DIR   directory of the on-disk cache (unset: none)
//   RBLN_COMPILER_PARTITIONS  workers per NPU of a program, 1 to the device
//                             profile's chiplets (default: all of them, 4 on
//                             rebel100, 1 on atom; SPEC A2 needs no setting):
//                             each worker runs on a chiplet of its own
//   RBLN_CHIPLET_THREADS      OS threads that run a program's workers (default:
//                             the cores the process may use; fewer threads
//                             than workers run several workers each, switching
//                             at barriers; results are the same)
//   RBLN_COMPILER_PARTITION_MIN_WORK  loop iterations below which a program
//                             runs on one worker (default 1048576)
//   RBLN_COMPILER_THREADS     threads that compile the segments of one graph
//                             (default: the host's cores, at most 8)
//   RBLN_COMPILER_SEGMENTS    0: compile every graph whole (default 1)
//
// Large graphs compile as segments (ir/graph_segments.h): repeats of a
// block of nodes (a model's identical layers) become segments with the same
// graph, which the cache compiles once, and the unique work is cut into
// pieces that compile in parallel. The result is one program that runs the
// segments' programs in order (CompiledProgram::Sequence), with the same
// results as the whole graph compiled at once. Each segment is a program of
// the caches like any other: an identical layer in another graph, or in
// another process through the disk cache, is not compiled again.
// Counters:
//   compiler/compiles      graphs really compiled (codegen ran; a segment
//                          counts as a graph)
//   compiler/cache_hits    lookups (Compile() calls and segments) answered
//                          from memory
//   compiler/cache_misses  lookups not answered from memory
//   compiler/evictions     programs dropped by the LRU bound
//   compiler/disk_hits     programs loaded from the disk cache (no codegen)
#ifndef RBLN_COMPILER_COMPILER_H_
#define RBLN_COMPILER_COMPILER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "rbln/compiler/abi/partition_layout.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/compiler/ir/graph_segments.h"
#include "rbln/core/counters.h"

namespace mlir {
class MLIRContext;
}

namespace rbln::compiler {

class DiskCache;

struct CompilerOptions {
  int64_t cache_capacity = 512;
  std::string cache_dir;  // empty: no disk cache
  // Chiplet partitioning (SPEC A2); part of the cache key.
  PartitionOptions partition;
  // Threads compiling the segments of one graph, and where graphs are cut
  // (segment.pieces follows compile_threads in FromEnv()).
  int compile_threads = 1;
  ir::SegmentOptions segment;

  // From RBLN_COMPILER_CACHE_SIZE / RBLN_COMPILER_CACHE_DIR; a bad value is an
  // InvalidArgument naming the variable and the expected form.
  static absl::StatusOr<CompilerOptions> FromEnv();
};

// This compiler's cache statistics since construction (or ResetStats()).
struct CompilerStats {
  int64_t hits = 0;       // answered from memory
  int64_t misses = 0;     // not in memory (compiled or loaded from disk)
  int64_t evictions = 0;  // dropped by the LRU bound
  int64_t compiles = 0;   // codegen ran
  int64_t disk_hits = 0;  // loaded from the disk cache without codegen
  int64_t disk_writes = 0;
  int64_t disk_rejects = 0;  // corrupt or stale disk entries (rebuilt)
  int64_t entries = 0;       // programs in memory now
  int64_t capacity = 0;
  absl::Duration compile_time;  // total time in codegen compiles
  absl::Duration disk_load_time;  // total time loading from disk
};

class Compiler {
 public:
  // Options from the environment; a bad value makes every Compile() fail
  // with that error.
  Compiler();
  explicit Compiler(CompilerOptions options);
  ~Compiler();

  // The process-wide compiler (options from the environment).
  static Compiler& Global();

  absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compile(
      const ir::Graph& graph) ABSL_LOCKS_EXCLUDED(mu_);

  // Drops every cached program (running programs keep theirs alive).
  void ClearCache() ABSL_LOCKS_EXCLUDED(mu_);
  int64_t cache_size() const ABSL_LOCKS_EXCLUDED(mu_);
  CompilerStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  void ResetStats() ABSL_LOCKS_EXCLUDED(mu_);
  const CompilerOptions& options() const { return options_; }

  // What the cache keys on besides the graph: target triple, CPU, and the
  // code generation switches (BLAS on or off, chiplet partitions and their
  // size threshold).
  static std::string TargetDescription(const PartitionOptions& partition);

  // Every IR op name the frontend converts, sorted (frontend/frontend.h):
  // callers that cut graphs (torch.compile's host ops, SPEC J6) decide with
  // it which ops run outside the device program.
  static std::vector<std::string> ImplementedOps();
  // Drops the weights packed for library calls in this process
  // (kernels/packed_weights.h): the next call packs them again.
  static void ClearPackedWeights();

 private:
  explicit Compiler(absl::StatusOr<CompilerOptions> options);

  struct Entry {
    std::shared_ptr<const CompiledProgram> program;
    std::string graph_bytes;  // ir::DeterministicBytes, confirms hits
    std::list<uint64_t>::iterator lru;  // position in lru_
  };
  // A compile in progress that other callers of the same key wait for.
  struct InFlight {
    absl::Notification done;
    absl::StatusOr<std::shared_ptr<const CompiledProgram>> result;
    std::string graph_bytes;
  };

  // Where a lookup's program came from.
  enum class Source { kMemory, kDisk, kCodegen, kSequence };

  // The cache lookup behind Compile(); `whole`: never cut into segments
  // (the segments themselves).
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> Lookup(
      const ir::Graph& graph, bool whole, Source* source) ABSL_LOCKS_EXCLUDED(mu_);
  // Segments, or disk then codegen; runs without mu_.
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> Build(
      const ir::Graph& graph, uint64_t key, bool whole, Source* source)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> Codegen(
      const ir::Graph& graph, uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);
  // The segments' programs (in parallel), then the sequence of them.
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> BuildSequence(
      const ir::Graph& graph, const ir::SegmentPlan& plan) ABSL_LOCKS_EXCLUDED(mu_);
  void Insert(uint64_t key, std::shared_ptr<const CompiledProgram> program,
              std::string graph_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<mlir::MLIRContext> AcquireContext() ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseContext(std::unique_ptr<mlir::MLIRContext> context)
      ABSL_LOCKS_EXCLUDED(mu_);

  const CompilerOptions options_;
  const absl::Status options_status_;
  const std::string target_;
  std::unique_ptr<DiskCache> disk_;

  mutable absl::Mutex mu_;
  // Long-lived: creating a context costs milliseconds.
  std::vector<std::unique_ptr<mlir::MLIRContext>> idle_contexts_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Entry> cache_ ABSL_GUARDED_BY(mu_);
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<uint64_t, std::shared_ptr<InFlight>> in_flight_
      ABSL_GUARDED_BY(mu_);
  CompilerStats stats_ ABSL_GUARDED_BY(mu_);

  Counter* const compiles_;
  Counter* const cache_hits_;
  Counter* const cache_misses_;
  Counter* const evictions_;
  Counter* const disk_hits_;
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_COMPILER_H_

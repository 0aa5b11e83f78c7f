#include "rbln/compiler/compiler.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "mlir/IR/MLIRContext.h"
#include "rbln/compiler/execution/chiplet_team.h"
#include "rbln/compiler/execution/disk_cache.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/kernels/blas_loader.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/compiler/kernels/packed_weights.h"
#include "rbln/compiler/pipelines/mlir_compat.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/core/device_profile.h"
#include "rbln/core/env.h"
#include "rbln/core/status_macros.h"

namespace rbln::compiler {
absl::StatusOr<CompilerOptions> CompilerOptions::FromEnv() {
  CompilerOptions options;
  RBLN_ASSIGN_OR_RETURN(
      options.cache_capacity,
      env::GetInt("RBLN_COMPILER_CACHE_SIZE", options.cache_capacity, 1,
                  int64_t{1} << 40));
  options.cache_dir = env::GetRaw("RBLN_COMPILER_CACHE_DIR").value_or("");
  // Read by the GEMM library at run time; a bad value fails the compile.
  RBLN_RETURN_IF_ERROR(PackedWeightsCapacityFromEnv().status());
  RBLN_RETURN_IF_ERROR(F16GemmRouteFromEnv().status());
  RBLN_ASSIGN_OR_RETURN(DeviceProfile profile, DeviceProfile::FromEnvironment());
  RBLN_ASSIGN_OR_RETURN(
      int64_t partitions,
      // A worker per chiplet at most: the runtime places each on its own.
      env::GetInt("RBLN_COMPILER_PARTITIONS", profile.chiplets_per_npu, 1,
                  profile.chiplets_per_npu));
  options.partition.partitions = static_cast<int>(partitions);
  RBLN_ASSIGN_OR_RETURN(
      options.partition.min_work,
      env::GetInt("RBLN_COMPILER_PARTITION_MIN_WORK",
                  options.partition.min_work, 0, int64_t{1} << 50));
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  RBLN_ASSIGN_OR_RETURN(
      int64_t threads,
      env::GetInt("RBLN_COMPILER_THREADS", std::min<int64_t>(cores, 8), 1, 256));
  options.compile_threads = static_cast<int>(threads);
  // Read by the chiplet teams when they start; a bad value is reported here.
  RBLN_RETURN_IF_ERROR(ChipletThreadsFromEnv().status());
  options.segment.pieces = options.compile_threads;
  RBLN_ASSIGN_OR_RETURN(int64_t segments,
                        env::GetInt("RBLN_COMPILER_SEGMENTS", 1, 0, 1));
  if (segments == 0) options.segment.min_work = std::numeric_limits<int>::max();
  return options;
}

std::vector<std::string> Compiler::ImplementedOps() {
  return compiler::ImplementedOps();
}

void Compiler::ClearPackedWeights() { PackedWeightCache::ClearGlobal(); }

std::string Compiler::TargetDescription(const PartitionOptions& partition) {
  // The GEMM library is part of the target: a program compiled for one
  // calls it (and a disk cache entry must not be reused for another).
  absl::StatusOr<bool> blas = BlasRewriteEnabled();
  absl::StatusOr<std::optional<GemmLibrary>> library = ChosenGemmLibrary();
  const char* gemm = "0";
  if (blas.ok() && *blas && library.ok() && library->has_value()) {
    gemm = **library == GemmLibrary::kOnednn ? "onednn" : "openblas";
  }
  return absl::StrFormat(
      "%s;cpu=%s;blas=%s;partitions=%d;partition_min_work=%d",
      llvm::sys::getProcessTriple(), llvm::sys::getHostCPUName().str(), gemm,
      partition.partitions, partition.min_work);
}

Compiler::Compiler() : Compiler(CompilerOptions::FromEnv()) {}

Compiler::Compiler(CompilerOptions options)
    : Compiler(absl::StatusOr<CompilerOptions>(std::move(options))) {}

Compiler::Compiler(absl::StatusOr<CompilerOptions> options)
    : options_(options.ok() ? *options : CompilerOptions()),
      options_status_(
          !options.ok() ? options.status()
          : options_.cache_capacity >= 1
              ? absl::OkStatus()
              : absl::InvalidArgumentError(absl::StrFormat(
                    "compiler cache capacity must be >= 1, got %d",
                    options_.cache_capacity))),
      target_(TargetDescription(options_.partition)),
      disk_(options_.cache_dir.empty()
                ? nullptr
                : std::make_unique<DiskCache>(options_.cache_dir, target_)),
      compiles_(CounterRegistry::Global().Get("compiler/compiles")),
      cache_hits_(CounterRegistry::Global().Get("compiler/cache_hits")),
      cache_misses_(CounterRegistry::Global().Get("compiler/cache_misses")),
      evictions_(CounterRegistry::Global().Get("compiler/evictions")),
      disk_hits_(CounterRegistry::Global().Get("compiler/disk_hits")) {}

Compiler::~Compiler() = default;

Compiler& Compiler::Global() {
  static auto* compiler = new Compiler();
  return *compiler;
}

absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compiler::Compile(
    const ir::Graph& graph) {
  if (!options_status_.ok()) return options_status_;
  Source source;
  return Lookup(graph, /*whole=*/false, &source);
}

absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compiler::Lookup(
    const ir::Graph& graph, bool whole, Source* source) {
  // One serialization per call: hashed for the key, compared to confirm.
  std::string bytes = ir::DeterministicBytes(graph);
  const uint64_t key = ir::StableHash(target_, ir::StableHash(bytes));
  std::shared_ptr<InFlight> flight;
  bool owner = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.graph_bytes == bytes) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++stats_.hits;
      cache_hits_->Increment();
      *source = Source::kMemory;
      return it->second.program;
    }
    ++stats_.misses;
    cache_misses_->Increment();
    auto f = in_flight_.find(key);
    if (f != in_flight_.end()) {
      flight = f->second;
    } else {
      flight = std::make_shared<InFlight>();
      flight->graph_bytes = bytes;
      in_flight_[key] = flight;
      owner = true;
    }
  }
  if (!owner) {
    flight->done.WaitForNotification();
    if (flight->graph_bytes == bytes) {
      *source = Source::kMemory;  // Another caller compiled it.
      return flight->result;
    }
    // A different graph with the same key (a hash collision): compile it
    // without sharing.
    return Build(graph, key, whole, source);
  }
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> result =
      Build(graph, key, whole, source);
  {
    absl::MutexLock lock(&mu_);
    if (result.ok()) Insert(key, *result, std::move(bytes));
    in_flight_.erase(key);
  }
  flight->result = result;
  flight->done.Notify();
  return result;
}

void Compiler::Insert(uint64_t key,
                      std::shared_ptr<const CompiledProgram> program,
                      std::string graph_bytes) {
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    lru_.erase(it->second.lru);
    cache_.erase(it);
  }
  lru_.push_front(key);
  cache_[key] = Entry{std::move(program), std::move(graph_bytes), lru_.begin()};
  while (static_cast<int64_t>(cache_.size()) > options_.cache_capacity) {
    cache_.erase(lru_.back());
    lru_.pop_back();
    ++stats_.evictions;
    evictions_->Increment();
  }
}

absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compiler::Build(
    const ir::Graph& graph, uint64_t key, bool whole, Source* source) {
  if (!whole) {
    ir::SegmentPlan plan = ir::PlanSegments(graph, options_.segment);
    if (plan.starts.size() > 1) {
      *source = Source::kSequence;
      return BuildSequence(graph, plan);
    }
  }
  if (disk_ != nullptr) {
    const absl::Time start = absl::Now();
    DiskCache::LoadResult loaded = disk_->Load(graph, key);
    absl::MutexLock lock(&mu_);
    if (loaded.program != nullptr) {
      ++stats_.disk_hits;
      const absl::Duration elapsed = absl::Now() - start;
      stats_.disk_load_time += elapsed;
      disk_hits_->Increment();
      CompileReport report;
      report.phases.disk_load = elapsed;
      report.wall = elapsed;
      report.disk_hits = 1;
      loaded.program->set_compile_report(report);
      *source = Source::kDisk;
      return std::shared_ptr<const CompiledProgram>(std::move(loaded.program));
    }
    if (loaded.rejected) ++stats_.disk_rejects;
  }
  *source = Source::kCodegen;
  return Codegen(graph, key);
}

absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compiler::BuildSequence(
    const ir::Graph& graph, const ir::SegmentPlan& plan) {
  const absl::Time start = absl::Now();
  // Every op the frontend lacks, listed at once as for a whole graph (J6).
  RBLN_RETURN_IF_ERROR(CheckOpsImplemented(graph));
  RBLN_ASSIGN_OR_RETURN(std::vector<ir::Segment> segments,
                        ir::SplitGraph(graph, plan.starts));
  // Distinct segments (equal graphs have equal names: content hashes),
  // largest first so that the threads finish together.
  std::vector<int> unique;
  std::vector<int> unique_of(segments.size());
  absl::flat_hash_map<std::string, int> by_name;
  for (size_t s = 0; s < segments.size(); ++s) {
    auto [it, inserted] = by_name.emplace(segments[s].graph.name(), unique.size());
    if (inserted) unique.push_back(static_cast<int>(s));
    unique_of[s] = it->second;
  }
  std::vector<int> order(unique.size());
  for (size_t u = 0; u < order.size(); ++u) order[u] = static_cast<int>(u);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return segments[unique[x]].graph.nodes_size() > segments[unique[y]].graph.nodes_size();
  });
  std::vector<absl::StatusOr<std::shared_ptr<const CompiledProgram>>> programs(
      unique.size(), absl::UnknownError("not compiled"));
  std::vector<Source> sources(unique.size(), Source::kMemory);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < order.size(); i = next++) {
      const int u = order[i];
      programs[u] = Lookup(segments[unique[u]].graph, /*whole=*/true, &sources[u]);
    }
  };
  const int threads =
      std::max(1, std::min(options_.compile_threads, static_cast<int>(unique.size())));
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();

  CompileReport report;
  report.segments = static_cast<int>(segments.size());
  report.unique_segments = static_cast<int>(unique.size());
  report.threads = threads;
  report.block_nodes = plan.block_nodes;
  report.block_repeats = plan.block_repeats;
  for (size_t u = 0; u < unique.size(); ++u) {
    const ir::Segment& segment = segments[unique[u]];
    if (!programs[u].ok()) {
      const absl::Status& status = programs[u].status();
      return absl::Status(
          status.code(),
          absl::StrFormat("%s\n(in segment %d of %d of graph %s: nodes %d..%d)",
                          status.message(), unique[u] + 1, segments.size(), graph.name(),
                          segment.nodes.front(), segment.nodes.back()));
    }
    switch (sources[u]) {
      case Source::kCodegen:
        ++report.codegen;
        report.phases += (*programs[u])->compile_report().phases;
        break;
      case Source::kDisk:
        ++report.disk_hits;
        report.phases += (*programs[u])->compile_report().phases;
        break;
      default:
        ++report.memory_hits;
        break;
    }
  }
  std::vector<std::shared_ptr<const CompiledProgram>> steps;
  for (size_t s = 0; s < segments.size(); ++s) steps.push_back(*programs[unique_of[s]]);
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<CompiledProgram> sequence,
                        CompiledProgram::Sequence(graph, segments, std::move(steps)));
  report.wall = absl::Now() - start;
  sequence->set_compile_report(report);
  return std::shared_ptr<const CompiledProgram>(std::move(sequence));
}

absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compiler::Codegen(
    const ir::Graph& graph, uint64_t key) {
  const absl::Time start = absl::Now();
  std::unique_ptr<mlir::MLIRContext> context = AcquireContext();
  CompileReport report;
  report.codegen = 1;
  absl::StatusOr<std::unique_ptr<CompiledProgram>> program = [&]()
      -> absl::StatusOr<std::unique_ptr<CompiledProgram>> {
    absl::Time phase_start = absl::Now();
    RBLN_ASSIGN_OR_RETURN(mlir::OwningOpRef<mlir::ModuleOp> module,
                          ImportGraph(graph, context.get()));
    report.phases.frontend = absl::Now() - phase_start;
    phase_start = absl::Now();
    const std::string dump_name =
        absl::StrFormat("%s_%016x", graph.name(), ir::Fingerprint(graph));
    RBLN_RETURN_IF_ERROR(RunStages(*module, FullPipeline(options_.partition), dump_name));
    report.phases.mlir_passes = absl::Now() - phase_start;
    const std::string object_path =
        disk_ != nullptr ? disk_->TempObjectPath(key) : std::string();
    RBLN_ASSIGN_OR_RETURN(
        std::unique_ptr<CompiledProgram> p,
        CompiledProgram::Create(*module, graph, object_path, &report.phases));
    if (disk_ != nullptr) {
      // A failed write only costs the next process a compile.
      if (disk_->Store(graph, key, object_path, p->uses_blas(),
                       p->uses_onednn(), p->partition_layout())
              .ok()) {
        absl::MutexLock lock(&mu_);
        ++stats_.disk_writes;
      }
    }
    return p;
  }();
  ReleaseContext(std::move(context));
  if (!program.ok()) return program.status();
  report.wall = absl::Now() - start;
  (*program)->set_compile_report(report);
  compiles_->Increment();
  {
    absl::MutexLock lock(&mu_);
    ++stats_.compiles;
    stats_.compile_time += absl::Now() - start;
  }
  return std::shared_ptr<const CompiledProgram>(std::move(*program));
}

std::unique_ptr<mlir::MLIRContext> Compiler::AcquireContext() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_contexts_.empty()) {
      std::unique_ptr<mlir::MLIRContext> context =
          std::move(idle_contexts_.back());
      idle_contexts_.pop_back();
      return context;
    }
  }
  return CreateCompilerContext();
}

void Compiler::ReleaseContext(std::unique_ptr<mlir::MLIRContext> context) {
  absl::MutexLock lock(&mu_);
  idle_contexts_.push_back(std::move(context));
}

void Compiler::ClearCache() {
  absl::MutexLock lock(&mu_);
  cache_.clear();
  lru_.clear();
}

int64_t Compiler::cache_size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(cache_.size());
}

CompilerStats Compiler::stats() const {
  absl::MutexLock lock(&mu_);
  CompilerStats s = stats_;
  s.entries = static_cast<int64_t>(cache_.size());
  s.capacity = options_.cache_capacity;
  return s;
}

void Compiler::ResetStats() {
  absl::MutexLock lock(&mu_);
  stats_ = CompilerStats();
}

}  // namespace rbln::compiler

// The compiler's entry point: graph IR -> a runnable CompiledProgram.
//
// Compile() runs frontend -> fusion -> bufferization -> lowering -> JIT, and
// keeps compiled programs in an in-process cache keyed by the graph's
// fingerprint (confirmed by comparing graphs). Counters:
//   compiler/compiles    graphs really compiled (codegen ran)
//   compiler/cache_hits  Compile() calls answered from the cache
#ifndef RBLN_COMPILER_COMPILER_H_
#define RBLN_COMPILER_COMPILER_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rbln/compiler/compiled_program.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/core/counters.h"

namespace mlir {
class MLIRContext;
}

namespace rbln::compiler {

class Compiler {
 public:
  Compiler();
  ~Compiler();

  // The process-wide compiler.
  static Compiler& Global();

  absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compile(
      const ir::Graph& graph) ABSL_LOCKS_EXCLUDED(mu_);

  // Drops every cached program (running programs keep theirs alive).
  void ClearCache() ABSL_LOCKS_EXCLUDED(mu_);
  int64_t cache_size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> CompileUncached(
      const ir::Graph& graph) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Long-lived: creating a context costs milliseconds.
  std::unique_ptr<mlir::MLIRContext> context_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<const CompiledProgram>> cache_
      ABSL_GUARDED_BY(mu_);
  Counter* const compiles_;
  Counter* const cache_hits_;
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_COMPILER_H_

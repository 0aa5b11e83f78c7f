// Where a program's compile time went, per phase (issue 17): kept with every
// CompiledProgram; torch.compile's inspect() and INFO log show it.
#ifndef RBLN_COMPILER_COMPILE_REPORT_H_
#define RBLN_COMPILER_COMPILE_REPORT_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace rbln::compiler {

// Time per phase, summed over the programs compiled (with several compile
// threads the sum exceeds the wall time).
struct CompilePhases {
  absl::Duration frontend;        // graph IR -> MLIR linalg on tensors
  absl::Duration mlir_passes;     // fusion, bufferization, BLAS, partition,
                                  // lowering to the LLVM dialect
  absl::Duration llvm_translate;  // LLVM dialect -> LLVM IR
  absl::Duration llvm_optimize;   // LLVM's -O2 passes
  absl::Duration llvm_codegen;    // machine code (and the object for the
                                  // disk cache)
  absl::Duration disk_load;       // objects read from the disk cache

  CompilePhases& operator+=(const CompilePhases& other) {
    frontend += other.frontend;
    mlir_passes += other.mlir_passes;
    llvm_translate += other.llvm_translate;
    llvm_optimize += other.llvm_optimize;
    llvm_codegen += other.llvm_codegen;
    disk_load += other.disk_load;
    return *this;
  }
};

struct CompileReport {
  CompilePhases phases;
  absl::Duration wall;  // the compile as the caller waited for it
  // The graph's segments (ir/graph_segments.h): 1 for a whole program.
  int segments = 1;
  int unique_segments = 1;
  // How the unique segments (or the whole program) were obtained.
  int codegen = 0;       // compiled now
  int disk_hits = 0;     // loaded from the disk cache
  int memory_hits = 0;   // already compiled in this process
  int threads = 1;       // compile threads used
  // The repeated block the segments deduplicate (0: none).
  int block_nodes = 0;
  int block_repeats = 0;

  std::string ToString() const {
    auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
    return absl::StrFormat(
        "wall %.1f ms; frontend %.1f ms, MLIR passes %.1f ms, LLVM translate "
        "%.1f ms, LLVM optimize %.1f ms, LLVM codegen %.1f ms, disk load %.1f "
        "ms; %d segment(s), %d unique (%d compiled, %d from disk, %d in "
        "memory) on %d thread(s)",
        ms(wall), ms(phases.frontend), ms(phases.mlir_passes),
        ms(phases.llvm_translate), ms(phases.llvm_optimize),
        ms(phases.llvm_codegen), ms(phases.disk_load), segments,
        unique_segments, codegen, disk_hits, memory_hits, threads);
  }
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_COMPILE_REPORT_H_

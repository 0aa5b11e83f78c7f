// memrefCopy: the runtime function MLIR's memref-to-LLVM lowering calls for a
// memref.copy between non-contiguous (strided) memrefs, normally found in
// libmlir_c_runner_utils. Compiled kernels get ours by name (RuntimeSymbols),
// so a strided copy that bufferization leaves in a program (a slice of a
// padded or transposed buffer) links without loading MLIR's runner library.
#ifndef RBLN_COMPILER_KERNELS_MEMREF_COPY_H_
#define RBLN_COMPILER_KERNELS_MEMREF_COPY_H_

#include <cstdint>

namespace rbln::compiler {

inline constexpr char kMemrefCopySymbol[] = "memrefCopy";

// MLIR's UnrankedMemRefType<char>: the rank and a pointer to the ranked
// descriptor {allocated, aligned, offset, sizes[rank], strides[rank]}.
struct UnrankedMemref {
  int64_t rank;
  void* descriptor;
};

}  // namespace rbln::compiler

// Same signature and semantics as MLIR's (mlir/ExecutionEngine/CRunnerUtils):
// copies every element of `src` into `dst` (same sizes), `element_size` bytes
// each, following both memrefs' offsets and strides.
extern "C" void rbln_memref_copy(int64_t element_size,
                                 rbln::compiler::UnrankedMemref* src,
                                 rbln::compiler::UnrankedMemref* dst);

#endif  // RBLN_COMPILER_KERNELS_MEMREF_COPY_H_

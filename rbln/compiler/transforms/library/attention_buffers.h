// What the attention rewrites (paged_attention_rewrite_pass.cc,
// masked_attention_rewrite_pass.cc) share: the buffers a call addresses and
// how its work items are cut into blocks.
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_ATTENTION_BUFFERS_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_ATTENTION_BUFFERS_H_

#include <cstdint>
#include <optional>

#include "llvm/ADT/SmallVector.h"
#include "mlir/IR/Value.h"
#include "rbln/compiler/transforms/library/gemm_lowering.h"

namespace rbln::compiler {

// One buffer the call reads or writes: its address (Matrix: the memref,
// static offset if known, element size) and strides in elements.
struct Buffer {
  Matrix base;
  llvm::SmallVector<int64_t> strides;
};

// `v` as a Buffer if its strides are static and its last one is 1 (or
// `contiguous`: the strides of a row-major array of its shape).
std::optional<Buffer> AsBuffer(mlir::Value v, bool contiguous);

// Blocks of `items` work items with `work` multiply-adds in all: at least
// ~50 us of work a block -- a call costs little next to it, unlike a
// GEMM's (LibraryCallBlocks), whose threshold would leave a decode step's
// attention (16 requests x 128 keys, 2 M) whole on one chiplet worker.
int64_t AttentionBlocks(int64_t work, int64_t items);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_ATTENTION_BUFFERS_H_

// Which program inputs a library call's pointer reads, and the version of
// their bytes (runtime::BufferView::content_version), so that what a GEMM
// derives from a weight -- oneDNN's packed layout of it, its f32 widening --
// is computed once and reused while the weight is not written
// (packed_weights.h).
//
// A running program registers its inputs with a known version for the
// duration of the run (InputContentScope); the library calls it makes, on
// any of its chiplet workers, look their operands up by host pointer. A
// program never writes its inputs (an input overlapping an output is read
// from a copy, aliased_inputs.h; the copy holds the same version's bytes),
// so an input's bytes stay those of its version for the whole run.
#ifndef RBLN_COMPILER_KERNELS_INPUT_CONTENT_H_
#define RBLN_COMPILER_KERNELS_INPUT_CONTENT_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "rbln/runtime/executable.h"

namespace rbln::compiler {

// The content of the bytes a pointer points at: the virtual address of the
// first of them and their storage's content version. Equal values mean
// equal bytes (for as many bytes as the input holds from there).
struct InputContent {
  uintptr_t address = 0;
  uint64_t version = 0;
  bool operator==(const InputContent& o) const {
    return address == o.address && version == o.version;
  }
};

// The content of [p, p + bytes) if the range lies inside one input a
// running program registered; nothing otherwise (an intermediate buffer,
// an input without a version, or one two concurrent runs registered with
// different versions).
std::optional<InputContent> FindInputContent(const void* p, uint64_t bytes);

// Registers, for its lifetime, the inputs among `args` (the first
// `num_inputs`) that carry a content version, at the host pointers the
// kernels read them through (`data[i]`, which may be a copy).
class InputContentScope {
 public:
  InputContentScope(absl::Span<const runtime::BufferView> args,
                    absl::Span<void* const> data, int num_inputs);
  ~InputContentScope();
  InputContentScope(const InputContentScope&) = delete;
  InputContentScope& operator=(const InputContentScope&) = delete;

 private:
  std::vector<uintptr_t> registered_;  // host start addresses
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_INPUT_CONTENT_H_

// The caller's side of SPEC P4 for aliased arguments. Kernels write their
// outputs in place and may write an output element before they have read
// every input element (transpose, matmul, anything fused), so an input whose
// bytes overlap an output's must be read from a copy taken before the call.
// Two outputs that overlap cannot both be written and are an error.
#ifndef RBLN_COMPILER_EXECUTION_ALIASED_INPUTS_H_
#define RBLN_COMPILER_EXECUTION_ALIASED_INPUTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "rbln/runtime/executable.h"

namespace rbln::compiler {

class AliasedInputCopies {
 public:
  // `args`: `num_inputs` inputs, then the outputs, each dense (the caller
  // has checked contiguity). Copies every input that overlaps an output;
  // FailedPrecondition naming `program` if two outputs overlap.
  static absl::StatusOr<AliasedInputCopies> Make(
      absl::Span<const runtime::BufferView> args, int num_inputs,
      absl::string_view program);

  // The data pointer to pass for argument `i`: the copy of an aliased
  // input, else the caller's own.
  void* Data(absl::Span<const runtime::BufferView> args, int i) const;
  int num_copies() const { return num_copies_; }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> copies_;  // per input; null: none
  int num_copies_ = 0;
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_EXECUTION_ALIASED_INPUTS_H_

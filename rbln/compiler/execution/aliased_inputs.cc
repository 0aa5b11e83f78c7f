#include "rbln/compiler/execution/aliased_inputs.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rbln/core/dtype.h"

namespace rbln::compiler {
namespace {

// The bytes a dense buffer occupies; empty when it has no elements.
struct Bytes {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;

  bool empty() const { return begin == end; }
  bool Overlaps(const Bytes& o) const {
    return !empty() && !o.empty() && begin < o.end && o.begin < end;
  }
};

Bytes BytesOf(const runtime::BufferView& b) {
  int64_t n = 1;
  for (int64_t d : b.sizes) n *= d;
  const auto* p = static_cast<const uint8_t*>(b.data);
  return {p, p + n * DTypeSize(b.dtype)};
}

}  // namespace

absl::StatusOr<AliasedInputCopies> AliasedInputCopies::Make(
    absl::Span<const runtime::BufferView> args, int num_inputs,
    absl::string_view program) {
  AliasedInputCopies result;
  result.copies_.resize(num_inputs);
  std::vector<Bytes> bytes;
  for (const runtime::BufferView& b : args) bytes.push_back(BytesOf(b));
  const int n = args.size();
  for (int i = num_inputs; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if (bytes[i].Overlaps(bytes[j])) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "program %s: outputs %d and %d overlap in memory; each output "
            "needs its own buffer",
            program, i - num_inputs, j - num_inputs));
      }
    }
  }
  for (int i = 0; i < num_inputs; ++i) {
    bool aliased = false;
    for (int j = num_inputs; j < n && !aliased; ++j) {
      aliased = bytes[i].Overlaps(bytes[j]);
    }
    if (!aliased) continue;
    const size_t size = bytes[i].end - bytes[i].begin;
    result.copies_[i] = std::make_unique<uint8_t[]>(size);
    std::memcpy(result.copies_[i].get(), bytes[i].begin, size);
    ++result.num_copies_;
  }
  return result;
}

void* AliasedInputCopies::Data(absl::Span<const runtime::BufferView> args,
                               int i) const {
  if (i < static_cast<int>(copies_.size()) && copies_[i] != nullptr) {
    return copies_[i].get();
  }
  return args[i].data;
}

}  // namespace rbln::compiler

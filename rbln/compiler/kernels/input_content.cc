#include "rbln/compiler/kernels/input_content.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rbln/core/dtype.h"
#include "rbln/runtime/strided_span.h"

namespace rbln::compiler {
namespace {

struct Range {
  uintptr_t end = 0;  // host, exclusive
  InputContent content;
  int runs = 0;         // concurrent runs that registered it
  bool agreed = true;   // all of them with the same content
};

struct Registry {
  absl::Mutex mu;
  std::map<uintptr_t, Range> ranges ABSL_GUARDED_BY(mu);  // by host start
};

Registry& Global() {
  static auto* registry = new Registry();
  return *registry;
}

}  // namespace

std::optional<InputContent> FindInputContent(const void* p, uint64_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  Registry& r = Global();
  absl::ReaderMutexLock lock(&r.mu);
  auto it = r.ranges.upper_bound(at);
  if (it == r.ranges.begin()) return std::nullopt;
  --it;
  const Range& range = it->second;
  if (!range.agreed || at + bytes > range.end) return std::nullopt;
  return InputContent{range.content.address + (at - it->first),
                      range.content.version};
}

InputContentScope::InputContentScope(absl::Span<const runtime::BufferView> args,
                                     absl::Span<void* const> data,
                                     int num_inputs) {
  Registry& r = Global();
  for (int i = 0; i < num_inputs; ++i) {
    const runtime::BufferView& v = args[i];
    const uint64_t bytes =
        runtime::StridedSpanBytes(v.sizes, v.strides, DTypeSize(v.dtype));
    if (v.content_version == 0 || data[i] == nullptr || bytes == 0) continue;
    const auto start = reinterpret_cast<uintptr_t>(data[i]);
    const InputContent content{v.content_address, v.content_version};
    absl::MutexLock lock(&r.mu);
    auto [it, inserted] = r.ranges.try_emplace(start);
    Range& range = it->second;
    if (inserted) {
      range.end = start + bytes;
      range.content = content;
    } else if (!(range.content == content) || range.end != start + bytes) {
      range.agreed = false;
    }
    ++range.runs;
    registered_.push_back(start);
  }
}

InputContentScope::~InputContentScope() {
  if (registered_.empty()) return;
  Registry& r = Global();
  absl::MutexLock lock(&r.mu);
  for (uintptr_t start : registered_) {
    auto it = r.ranges.find(start);
    if (it != r.ranges.end() && --it->second.runs == 0) r.ranges.erase(it);
  }
}

}  // namespace rbln::compiler

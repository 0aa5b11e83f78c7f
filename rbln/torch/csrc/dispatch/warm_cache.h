// The C++ warm cache of compiled-kernel ops (SPEC G2): specialization key ->
// the compiled program and what running it needs. The key is built from the
// raw argument values on the dispatcher's stack, without formatting, so a hit
// costs a hash of a few dozen bytes and one lookup.
#ifndef RBLN_TORCH_CSRC_DISPATCH_WARM_CACHE_H_
#define RBLN_TORCH_CSRC_DISPATCH_WARM_CACHE_H_

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "rbln/compiler/execution/compiled_program.h"

namespace rbln::torch_backend {

// Builds the specialization key of one call (SPEC G2): the overload, then per
// argument a tag and its contents -- for device tensors dtype, device index,
// storage offset, sizes and strides; for Python scalars (wrapped CPU 0-dim
// tensors) and other non-tensor arguments their values.
class WarmKey {
 public:
  // Starts a key for the overload numbered `overload_id`.
  void Reset(uint32_t overload_id);
  // Appends one schema argument. Returns false when the argument has a kind
  // the warm cache does not key (the call then takes the slow path).
  bool Add(const c10::IValue& value);
  const std::string& bytes() const { return bytes_; }

 private:
  template <typename T>
  void Put(const T& v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  bool AddTensor(const at::Tensor& t);

  std::string bytes_;
};

// A device-tensor input of a compiled call: schema argument `arg`, element
// `list_index` of a tensor list (-1 for a plain tensor argument).
struct InputSlot {
  int arg = 0;
  int list_index = -1;
};

// One result of a compiled call.
struct WarmOutput {
  std::vector<int64_t> sizes;
  at::ScalarType dtype = at::kHalf;
};

// The compiled program of one specialization, with what running it needs.
struct WarmEntry {
  std::shared_ptr<const compiler::CompiledProgram> program;
  std::vector<InputSlot> inputs;
  // Per input: a view the program reads from its storage span, replaying
  // the view as its first node (SPEC G3, H7).
  std::vector<bool> reads_span;
  std::vector<WarmOutput> outputs;  // In the op's return order.
};

class WarmCache {
 public:
  static WarmCache& Global();

  std::shared_ptr<const WarmEntry> Find(const std::string& key) const
      ABSL_LOCKS_EXCLUDED(mu_);
  void Insert(std::string key, std::shared_ptr<const WarmEntry> entry)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const WarmEntry>> entries_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_WARM_CACHE_H_

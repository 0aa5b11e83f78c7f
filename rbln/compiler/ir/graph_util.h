// Helpers over the graph IR: validation, a stable fingerprint, a text dump.
#ifndef RBLN_COMPILER_IR_GRAPH_UTIL_H_
#define RBLN_COMPILER_IR_GRAPH_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/core/dtype.h"

namespace rbln::compiler::ir {

// Every input of every node and every graph output names a value defined
// earlier; names are unique; shapes are non-negative.
absl::Status Validate(const Graph& graph);

// Stable across processes and builds: a hash of the deterministic
// serialization (the on-disk cache keys on it).
uint64_t Fingerprint(const Graph& graph);

// The deterministic serialization Fingerprint() hashes: equal bytes, equal
// graphs (a much cheaper comparison than MessageDifferencer).
std::string DeterministicBytes(const Graph& graph);

// FNV-1a, 64 bit: the same in every process and build (absl::Hash is seeded
// per process, so it cannot key anything on disk).
uint64_t StableHash(absl::string_view bytes,
                    uint64_t seed = 0xcbf29ce484222325ull);

// Readable one-line-per-node form for logs and compiler dumps, e.g.
//   graph add(%a: f16[2,3], %b: f16[2,3]) {
//     %out: f16[2,3] = add(%a, %b) {alpha=1}
//     return %out
//   }
std::string ToText(const Graph& graph);

std::string TypeToText(const TensorType& type);

// PyTorch's name of an IR dtype ("float16", "int64", ...), for messages
// that users compare with torch's.
const char* TorchDTypeName(DType t);

// The runtime's element type of an IR dtype.
rbln::DType ToRuntimeDType(DType t);

}  // namespace rbln::compiler::ir

#endif  // RBLN_COMPILER_IR_GRAPH_UTIL_H_

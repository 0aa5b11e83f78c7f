// The on-disk program cache (beyond SPEC P9): object code of compiled
// programs, so that a new process skips codegen.
//
// Each entry is two files in the cache directory, named by the cache key:
//   <key>.o         the kernel's relocatable object (ExecutionEngine's dump)
//   <key>.manifest  a CacheManifest: key, compiler version, LLVM version,
//                   target, the graph, the object's size and hash
// Both are written to temporary names and renamed into place, object first,
// so readers never see half an entry. An entry whose manifest does not
// parse, whose object does not match its size or hash, or that was written by
// another compiler version, LLVM or target is rejected: reported once per key
// on stderr and rebuilt (the new entry replaces it).
#ifndef RBLN_COMPILER_EXECUTION_DISK_CACHE_H_
#define RBLN_COMPILER_EXECUTION_DISK_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "rbln/compiler/abi/partition_layout.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler {

// Bump when code generation changes in a way that makes old objects (or
// what their manifests record, e.g. uses_onednn) wrong.
inline constexpr char kCompilerVersion[] = "rbln-compiler-13";

// What a manifest records as its compiler: kCompilerVersion, then "+" and
// the GNU build ID of the binary this compiler is linked into, so that an
// entry written by any other build (a changed kernel ABI or code generation
// without a bump) is stale. Just kCompilerVersion if the binary has no ID.
const std::string& CompilerBuild();

class DiskCache {
 public:
  DiskCache(std::string dir, std::string target);

  struct LoadResult {
    std::unique_ptr<CompiledProgram> program;  // null: compile it
    bool rejected = false;  // an entry existed but was corrupt or stale
  };
  LoadResult Load(const ir::Graph& graph, uint64_t key) const;

  // Where codegen dumps the object for `key` before Store() (unique per
  // call, so concurrent processes do not clobber each other).
  std::string TempObjectPath(uint64_t key) const;
  // Moves the object at `object_path` into the cache and writes the
  // manifest.
  absl::Status Store(const ir::Graph& graph, uint64_t key,
                     const std::string& object_path, bool uses_blas,
                     bool uses_onednn, const PartitionLayout& layout) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string PathOf(uint64_t key, const char* suffix) const;
  // Once per entry path and process, however many compilers share the
  // directory.
  void ReportOnce(uint64_t key, const std::string& why) const;

  const std::string dir_;
  const std::string target_;
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_EXECUTION_DISK_CACHE_H_

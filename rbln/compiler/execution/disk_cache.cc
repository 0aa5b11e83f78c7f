#include "rbln/compiler/execution/disk_cache.h"

#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/util/message_differencer.h"
#include "llvm/Config/llvm-config.h"
#include "rbln/compiler/execution/disk_cache.pb.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/kernels/blas_loader.h"
#include "rbln/compiler/kernels/onednn_gemm.h"

namespace rbln::compiler {
namespace {

// The GNU build ID note of a loaded object (hex), or "" if it has none.
std::string GnuBuildId(const dl_phdr_info& object) {
  for (int i = 0; i < object.dlpi_phnum; ++i) {
    const ElfW(Phdr)& note = object.dlpi_phdr[i];
    if (note.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(object.dlpi_addr + note.p_vaddr);
    const char* end = p + note.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((n->n_namesz + 3) & ~3u);
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        std::string id;
        for (uint32_t k = 0; k < n->n_descsz; ++k) {
          id += absl::StrFormat("%02x", static_cast<uint8_t>(desc[k]));
        }
        return id;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
  return "";
}

// Whether `address` lies in one of `object`'s loaded segments.
bool Contains(const dl_phdr_info& object, uintptr_t address) {
  for (int i = 0; i < object.dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = object.dlpi_phdr[i];
    const uintptr_t start = object.dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && address >= start && address < start + ph.p_memsz) {
      return true;
    }
  }
  return false;
}

// The GNU build ID (hex) of the loaded object that contains `address`, or
// "" if it has none.
std::string BuildIdOf(const void* address) {
  struct Search {
    uintptr_t address;
    std::string id;
  } search{reinterpret_cast<uintptr_t>(address), ""};
  dl_iterate_phdr(
      [](dl_phdr_info* object, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        if (!Contains(*object, s->address)) return 0;
        s->id = GnuBuildId(*object);
        return 1;
      },
      &search);
  return search.id;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Writes `bytes` to a temporary file and renames it to `path`.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& bytes) {
  const std::string tmp = absl::StrFormat("%s.%d.tmp", path, getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::InternalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrFormat("cannot rename %s to %s: %s",
                                               tmp, path, std::strerror(errno)));
  }
  return absl::OkStatus();
}

// mkdir -p.
void MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      mkdir(dir.substr(0, i).c_str(), 0755);
    }
  }
}

}  // namespace

DiskCache::DiskCache(std::string dir, std::string target)
    : dir_(std::move(dir)), target_(std::move(target)) {
  MakeDirs(dir_);
}

std::string DiskCache::PathOf(uint64_t key, const char* suffix) const {
  return absl::StrFormat("%s/%016x%s", dir_, key, suffix);
}

std::string DiskCache::TempObjectPath(uint64_t key) const {
  static std::atomic<int64_t> sequence{0};
  return absl::StrFormat("%s/%016x.o.%d.%d.tmp", dir_, key, getpid(),
                         sequence.fetch_add(1));
}

void DiskCache::ReportOnce(uint64_t key, const std::string& why) const {
  static absl::Mutex mu(absl::kConstInit);
  static auto* reported = new absl::flat_hash_set<std::string>();
  absl::MutexLock lock(&mu);
  if (!reported->insert(PathOf(key, "")).second) return;
  std::fprintf(stderr,
               "rbln compiler: disk cache entry %s is %s; rebuilding it\n",
               PathOf(key, ".manifest").c_str(), why.c_str());
}

const std::string& CompilerBuild() {
  static const std::string* build = [] {
    const std::string id = BuildIdOf(reinterpret_cast<const void*>(&CompilerBuild));
    return new std::string(id.empty() ? std::string(kCompilerVersion)
                                      : absl::StrCat(kCompilerVersion, "+", id));
  }();
  return *build;
}

DiskCache::LoadResult DiskCache::Load(const ir::Graph& graph,
                                      uint64_t key) const {
  LoadResult result;
  absl::StatusOr<std::string> manifest_bytes =
      ReadFile(PathOf(key, ".manifest"));
  if (!manifest_bytes.ok()) return result;  // No entry.
  result.rejected = true;
  CacheManifest manifest;
  if (!manifest.ParseFromString(*manifest_bytes)) {
    ReportOnce(key, "corrupt (the manifest does not parse)");
    return result;
  }
  if (manifest.compiler_version() != CompilerBuild() ||
      manifest.llvm_version() != LLVM_VERSION_STRING ||
      manifest.target() != target_) {
    ReportOnce(key, absl::StrFormat(
                        "stale (written by %s, LLVM %s, target %s; this is "
                        "%s, LLVM %s, target %s)",
                        manifest.compiler_version(), manifest.llvm_version(),
                        manifest.target(), CompilerBuild(),
                        LLVM_VERSION_STRING, target_));
    return result;
  }
  if (manifest.key() != key ||
      !google::protobuf::util::MessageDifferencer::Equals(manifest.graph(),
                                                          graph)) {
    ReportOnce(key, "for another graph with the same key");
    return result;
  }
  absl::StatusOr<std::string> object = ReadFile(PathOf(key, ".o"));
  if (!object.ok()) {
    ReportOnce(key, "corrupt (its object file is missing)");
    return result;
  }
  if (static_cast<int64_t>(object->size()) != manifest.object_size() ||
      ir::StableHash(*object) != manifest.object_hash()) {
    ReportOnce(key, "corrupt (the object file does not match the manifest)");
    return result;
  }
  if (manifest.uses_onednn() && !LoadOnednn()) {
    ReportOnce(key, "unusable (it calls oneDNN, but " + OnednnDescription() + ")");
    return result;
  }
  if (manifest.uses_blas() && !manifest.uses_onednn() && !LoadOpenBlas()) {
    ReportOnce(key, "unusable (it calls cblas_sgemm, but OpenBLAS does not load)");
    return result;
  }
  PartitionLayout layout;
  layout.partitions = std::max(1, manifest.partitions());
  layout.scratch_bytes = manifest.scratch_bytes();
  for (const CacheManifest::ScratchBuffer& buffer : manifest.scratch()) {
    layout.scratch.push_back(ScratchBuffer{
        buffer.home(), buffer.offset(),
        std::vector<int64_t>(buffer.shape().begin(), buffer.shape().end()),
        buffer.accessors()});
  }
  layout.segment_bytes.assign(manifest.segment_bytes().begin(),
                              manifest.segment_bytes().end());
  absl::StatusOr<std::unique_ptr<CompiledProgram>> program =
      CompiledProgram::LoadObject(*object, graph, manifest.uses_blas(),
                                  manifest.uses_onednn(),
                                  std::move(layout));
  if (!program.ok()) {
    ReportOnce(key, absl::StrFormat("corrupt (loading failed: %s)",
                                    program.status().message()));
    return result;
  }
  result.program = std::move(*program);
  result.rejected = false;
  return result;
}

absl::Status DiskCache::Store(const ir::Graph& graph, uint64_t key,
                              const std::string& object_path,
                              bool uses_blas, bool uses_onednn,
                              const PartitionLayout& layout) const {
  absl::StatusOr<std::string> object = ReadFile(object_path);
  if (!object.ok()) {
    return absl::InternalError("the JIT wrote no object file at " + object_path);
  }
  CacheManifest manifest;
  manifest.set_key(key);
  manifest.set_compiler_version(CompilerBuild());
  manifest.set_llvm_version(LLVM_VERSION_STRING);
  manifest.set_target(target_);
  *manifest.mutable_graph() = graph;
  manifest.set_object_size(static_cast<int64_t>(object->size()));
  manifest.set_object_hash(ir::StableHash(*object));
  manifest.set_uses_blas(uses_blas);
  manifest.set_uses_onednn(uses_onednn);
  manifest.set_partitions(layout.partitions);
  manifest.set_scratch_bytes(layout.scratch_bytes);
  for (const ScratchBuffer& buffer : layout.scratch) {
    CacheManifest::ScratchBuffer* entry = manifest.add_scratch();
    entry->set_offset(buffer.offset);
    for (int64_t d : buffer.shape) entry->add_shape(d);
    entry->set_home(buffer.home);
    entry->set_accessors(buffer.accessors);
  }
  for (int64_t bytes : layout.segment_bytes) manifest.add_segment_bytes(bytes);
  if (std::rename(object_path.c_str(), PathOf(key, ".o").c_str()) != 0) {
    std::remove(object_path.c_str());
    return absl::InternalError("cannot move the object into " + dir_);
  }
  return WriteFileAtomically(PathOf(key, ".manifest"),
                             manifest.SerializeAsString());
}

}  // namespace rbln::compiler

#include "rbln/runtime/virtual_storage.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rbln/core/signal_recorder.h"
#include "rbln/core/status_macros.h"
#include "rbln/runtime/page_commit.h"

namespace rbln::runtime {
namespace {

constexpr uint64_t kVirtualPage = 4096;

thread_local std::string t_offload_dir;

// Host-side accesses of rbln storages, whether served from the host shadow or
// after a real DMA (explain()'s v2h/h2v; the DMA engine counts the real
// transfers).
struct HostAccessCounters {
  Counter* reads = CounterRegistry::Global().Get("storage/host_reads");
  Counter* read_bytes = CounterRegistry::Global().Get("storage/host_read_bytes");
  Counter* writes = CounterRegistry::Global().Get("storage/host_writes");
  Counter* write_bytes = CounterRegistry::Global().Get("storage/host_write_bytes");
};

const HostAccessCounters& HostAccess() {
  static const auto* counters = new HostAccessCounters();
  return *counters;
}

// runtime/v2v_slow: a device-to-device copy between different chiplets
// (or NPUs), which the v2v engine cannot keep on one chiplet (SPEC D7).
const Signal& V2vSlow() {
  static const auto* signal = new Signal("runtime/v2v_slow");
  return *signal;
}

}  // namespace

StorageManager::HostShadow::~HostShadow() {
  if (fd >= 0) {
    if (data != nullptr) munmap(data, size);
    close(fd);
    unlink(path.c_str());
  } else {
    std::free(data);
  }
}

std::string StorageManager::SetThreadOffloadDir(std::string dir) {
  std::swap(t_offload_dir, dir);
  return dir;
}

absl::string_view DataStateName(DataState state) {
  switch (state) {
    case DataState::kEmpty:
      return "empty";
    case DataState::kHostLatest:
      return "host-latest";
    case DataState::kDeviceLatest:
      return "device-latest";
    case DataState::kInSync:
      return "in-sync";
  }
  return "?";
}

StorageManager::StorageManager(int num_npus, uint64_t virtual_bytes_per_npu,
                               PhysicalMemory* physical, DmaEngine* dma,
                               bool eager)
    : physical_(physical),
      dma_(dma),
      eager_(eager),
      uploads_(CounterRegistry::Global().Get("storage/uploads")),
      downloads_(CounterRegistry::Global().Get("storage/downloads")),
      pushes_(CounterRegistry::Global().Get("storage/host_pushes")),
      same_chiplet_copies_(
          CounterRegistry::Global().Get("storage/d2d_same_chiplet_copies")),
      cross_chiplet_copies_(
          CounterRegistry::Global().Get("storage/d2d_cross_chiplet_copies")) {
  const uint64_t size =
      (virtual_bytes_per_npu + kVirtualPage - 1) / kVirtualPage * kVirtualPage;
  for (int i = 0; i < num_npus; ++i) {
    // Address space only: never backed, never accessible from the host.
    void* base = mmap(nullptr, size, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    VirtualRange r;
    if (base != MAP_FAILED) {
      r.base = base;
      r.size = size;
      r.addresses = std::make_unique<ChipletHeap>(size, kVirtualPage);
    }
    ranges_.push_back(std::move(r));
  }
}

StorageManager::~StorageManager() {
  for (VirtualRange& r : ranges_) {
    if (r.base != nullptr) munmap(r.base, r.size);
  }
}

namespace {

// Process-wide, so that a version never repeats across storages (a new
// storage at a released one's address gets a version of its own).
uint64_t NextContentVersion() {
  static std::atomic<uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

absl::StatusOr<uintptr_t> StorageManager::Create(int npu, uint64_t nbytes,
                                                 AllocationContext context) {
  if (npu < 0 || npu >= static_cast<int>(ranges_.size()) ||
      ranges_[npu].base == nullptr) {
    return absl::OutOfRangeError(
        absl::StrFormat("rbln: no virtual address range for NPU %d", npu));
  }
  if (nbytes == 0) return absl::InvalidArgumentError("rbln: empty storage");
  VirtualRange& range = ranges_[npu];
  absl::StatusOr<uint64_t> offset = range.addresses->Allocate(nbytes);
  if (!offset.ok()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rbln: out of virtual device addresses on NPU %d for %d bytes", npu,
        nbytes));
  }
  auto s = std::make_unique<Storage>();
  s->base = reinterpret_cast<uintptr_t>(range.base) + *offset;
  s->nbytes = nbytes;
  s->npu = npu;
  s->offload_dir = t_offload_dir;
  s->context = std::move(context);
  s->content_version = NextContentVersion();
  const uintptr_t base = s->base;
  absl::MutexLock lock(&mu_);
  Storage& ref = *s;
  storages_[base] = std::move(s);
  if (eager_) {
    if (absl::Status st = AcquireDevice(ref); !st.ok()) {
      storages_.erase(base);
      (void)range.addresses->Free(*offset);
      return st;
    }
  }
  return base;
}

absl::Status StorageManager::Release(uintptr_t base) {
  // The DMA engine may still use the block: wait (leaving a failure for the
  // stream's next synchronize, since a deleter cannot report it).
  if (auto [stream, seq] = PendingTransfer(base); stream != nullptr) {
    stream->AwaitPassed(seq);
  }
  std::unique_ptr<Storage> s;
  {
    absl::MutexLock lock(&mu_);
    auto it = storages_.find(base);
    if (it == storages_.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rbln: 0x%x is not the base of a live storage", base));
    }
    s = std::move(it->second);
    storages_.erase(it);
    if (s->block) {
      DeferredFree deferred{*s->block, {}};
      for (DeviceStream* stream : s->recorded_streams) {
        const uint64_t point = stream->submitted();
        if (!stream->Passed(point)) deferred.points.emplace_back(stream, point);
      }
      if (!deferred.points.empty()) {
        deferred_.push_back(std::move(deferred));
        s->block.reset();  // Freed by FreeDeferredLocked.
      }
    }
  }
  if (s->block) RBLN_RETURN_IF_ERROR(physical_->FreePhysical(*s->block));
  VirtualRange& range = ranges_[s->npu];
  return range.addresses->Free(base - reinterpret_cast<uintptr_t>(range.base));
}

absl::StatusOr<StorageManager::Storage*> StorageManager::Find(
    uintptr_t address, uint64_t n) const {
  auto it = storages_.upper_bound(address);
  if (it != storages_.begin()) {
    Storage* s = std::prev(it)->second.get();
    if (address >= s->base && n <= s->nbytes && address - s->base <= s->nbytes - n) {
      return s;
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "rbln: [0x%x, +%d bytes) is not inside a live rbln storage", address, n));
}

absl::StatusOr<char*> StorageManager::Shadow(Storage& s) {
  if (s.shadow) return s.shadow->data;
  auto shadow = std::make_unique<HostShadow>();
  shadow->size = s.nbytes;
  if (s.offload_dir.empty()) {
    // Zero-filled, so reading a never-written storage is deterministic;
    // calloc, not new[](): a large block comes zeroed from the kernel page
    // by page as it is written, without a memset over all of it first.
    shadow->data = static_cast<char*>(std::calloc(s.nbytes, 1));
    if (shadow->data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rbln: out of host memory: cannot allocate the %d-byte host copy of "
          "the storage at 0x%x",
          s.nbytes, s.base));
    }
  } else {
    std::string path = s.offload_dir + "/rbln-offload-XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) {
      return absl::UnavailableError(absl::StrFormat(
          "rbln: offload: cannot create a file in %s: %s", s.offload_dir,
          strerror(errno)));
    }
    shadow->fd = fd;
    shadow->path = path;
    if (ftruncate(fd, static_cast<off_t>(s.nbytes)) != 0) {
      return absl::UnavailableError(absl::StrFormat(
          "rbln: offload: cannot size %s to %d bytes: %s", path, s.nbytes,
          strerror(errno)));
    }
    void* p = mmap(nullptr, s.nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      return absl::UnavailableError(absl::StrFormat(
          "rbln: offload: cannot map %s: %s", path, strerror(errno)));
    }
    shadow->data = static_cast<char*>(p);
  }
  s.shadow = std::move(shadow);
  return s.shadow->data;
}

void StorageManager::FreeDeferredLocked(bool wait) {
  std::vector<DeferredFree> still;
  for (DeferredFree& d : deferred_) {
    bool passed = true;
    for (auto& [stream, point] : d.points) {
      if (wait) stream->AwaitPassed(point);
      passed = passed && stream->Passed(point);
    }
    if (passed) {
      (void)physical_->FreePhysical(d.block);
    } else {
      still.push_back(std::move(d));
    }
  }
  deferred_ = std::move(still);
}

int64_t StorageManager::FreeDeferredBlocks(bool wait) {
  absl::MutexLock lock(&mu_);
  FreeDeferredLocked(wait);
  return static_cast<int64_t>(deferred_.size());
}

absl::Status StorageManager::AcquireDevice(Storage& s) {
  if (s.block) return absl::OkStatus();
  if (!deferred_.empty()) FreeDeferredLocked(/*wait=*/false);
  absl::StatusOr<DeviceAllocation> allocated =
      physical_->AllocatePhysical(s.npu, s.nbytes, PhysicalMemory::kAnyChiplet, s.context);
  if (!allocated.ok() && absl::IsResourceExhausted(allocated.status()) &&
      !deferred_.empty()) {
    // Blocks held back by record_stream may be what is missing: wait for
    // their streams, as CUDA's allocator does before reporting OOM.
    FreeDeferredLocked(/*wait=*/true);
    allocated =
        physical_->AllocatePhysical(s.npu, s.nbytes, PhysicalMemory::kAnyChiplet, s.context);
  }
  RBLN_ASSIGN_OR_RETURN(DeviceAllocation block, std::move(allocated));
  absl::StatusOr<void*> view = physical_->HostView(block);
  if (!view.ok()) {
    (void)physical_->FreePhysical(block);
    return view.status();
  }
  s.block = block;
  s.backing = *view;
  if (s.program_owned) RBLN_RETURN_IF_ERROR(physical_->SetProgramOwned(block, true));
  return absl::OkStatus();
}

absl::Status StorageManager::Upload(Storage& s) {
  RBLN_ASSIGN_OR_RETURN(char* shadow, Shadow(s));
  RBLN_RETURN_IF_ERROR(dma_->HostToDevice(s.block->address, shadow, s.nbytes));
  uploads_->Increment();
  return absl::OkStatus();
}

absl::Status StorageManager::Download(Storage& s) {
  RBLN_ASSIGN_OR_RETURN(char* shadow, Shadow(s));
  RBLN_RETURN_IF_ERROR(dma_->DeviceToHost(shadow, s.block->address, s.nbytes));
  downloads_->Increment();
  return absl::OkStatus();
}

absl::Status StorageManager::WriteFromHost(uintptr_t address, const void* src,
                                           uint64_t n) {
  if (n == 0) return absl::OkStatus();
  RBLN_RETURN_IF_ERROR(AwaitTransfer(address));
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, n));
  HostAccess().writes->Increment();
  HostAccess().write_bytes->Add(static_cast<int64_t>(n));
  s->content_version = NextContentVersion();
  const uint64_t offset = address - s->base;
  if (s->state == DataState::kDeviceLatest) {
    // The device holds the rest of the bytes: write through to it.
    RBLN_RETURN_IF_ERROR(dma_->HostToDevice(s->block->address + offset, src, n));
    pushes_->Increment();
    return absl::OkStatus();
  }
  RBLN_ASSIGN_OR_RETURN(char* shadow, Shadow(*s));
  // A weight's bytes at .to("rbln"): its fresh host pages committed on
  // several cores first (page_commit.h).
  CommitPagesForWrite(shadow + offset, n);
  std::memcpy(shadow + offset, src, n);
  s->state = DataState::kHostLatest;
  return absl::OkStatus();
}

absl::Status StorageManager::ReadToHost(void* dst, uintptr_t address,
                                        uint64_t n) {
  return ReadOnHost(address, n, [&](const void* bytes) {
    // `dst` is often a new CPU tensor (.cpu() of a weight): its pages
    // committed on several cores first (page_commit.h).
    CommitPagesForWrite(dst, n);
    std::memcpy(dst, bytes, n);
  });
}

absl::Status StorageManager::ReadOnHost(uintptr_t address, uint64_t n,
                                        absl::FunctionRef<void(const void* bytes)> read) {
  if (n == 0) return absl::OkStatus();
  RBLN_RETURN_IF_ERROR(AwaitTransfer(address));
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, n));
  HostAccess().reads->Increment();
  HostAccess().read_bytes->Add(static_cast<int64_t>(n));
  if (s->state == DataState::kDeviceLatest) {
    RBLN_RETURN_IF_ERROR(Download(*s));
    s->state = DataState::kInSync;
  }
  RBLN_ASSIGN_OR_RETURN(char* shadow, Shadow(*s));
  read(shadow + (address - s->base));
  return absl::OkStatus();
}

absl::StatusOr<void*> StorageManager::MapForDevice(uintptr_t address,
                                                   uint64_t n,
                                                   DeviceAccess access,
                                                   uint64_t* content_version) {
  RBLN_RETURN_IF_ERROR(AwaitTransfer(address));
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, n == 0 ? 1 : n));
  RBLN_RETURN_IF_ERROR(AcquireDevice(*s));
  // The device use re-lays the storage out for the op (SPEC L3): later
  // uploads into it are synchronous.
  s->flat = false;
  const bool whole = address == s->base && n == s->nbytes;
  if (s->state == DataState::kHostLatest &&
      (access != DeviceAccess::kWrite || !whole)) {
    RBLN_RETURN_IF_ERROR(Upload(*s));
    s->state = DataState::kInSync;
  }
  if (access != DeviceAccess::kRead) {
    s->state = DataState::kDeviceLatest;
    s->content_version = NextContentVersion();
  }
  if (content_version != nullptr) *content_version = s->content_version;
  return static_cast<char*>(s->backing) + (address - s->base);
}

absl::Status StorageManager::CopyOnDevice(uintptr_t dst, uintptr_t src,
                                          uint64_t n) {
  if (n == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* from, MapForDevice(src, n, DeviceAccess::kRead));
  RBLN_ASSIGN_OR_RETURN(void* to, MapForDevice(dst, n, DeviceAccess::kWrite));
  (void)from;
  (void)to;
  return CopyBetweenStorages(dst, n, src, n, n, [&](uintptr_t to_phys, uintptr_t from_phys) {
    return dma_->DeviceToDevice(to_phys, from_phys, n);
  });
}

absl::Status StorageManager::ReadFromDevice(void* dst, uintptr_t address,
                                            uint64_t n) {
  if (n == 0) return absl::OkStatus();
  RBLN_RETURN_IF_ERROR(MapForDevice(address, n, DeviceAccess::kRead).status());
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, n));
  HostAccess().reads->Increment();
  HostAccess().read_bytes->Add(static_cast<int64_t>(n));
  return dma_->DeviceToHost(dst, s->block->address + (address - s->base), n);
}

absl::Status StorageManager::CopyBetweenStorages(
    uintptr_t dst, uint64_t dst_span, uintptr_t src, uint64_t src_span, uint64_t bytes,
    absl::FunctionRef<absl::Status(uintptr_t dst_physical, uintptr_t src_physical)> dma) {
  bool cross_chiplet = false;
  {
    absl::MutexLock lock(&mu_);
    RBLN_ASSIGN_OR_RETURN(Storage * d, Find(dst, dst_span));
    RBLN_ASSIGN_OR_RETURN(Storage * s, Find(src, src_span));
    cross_chiplet = d->block->npu != s->block->npu ||
                    d->block->chiplet != s->block->chiplet;
    (cross_chiplet ? cross_chiplet_copies_ : same_chiplet_copies_)->Increment();
    RBLN_RETURN_IF_ERROR(
        dma(d->block->address + (dst - d->base), s->block->address + (src - s->base)));
  }
  // Outside mu_: firing may ask Python for the source line.
  if (cross_chiplet) V2vSlow().Fire(static_cast<int64_t>(bytes));
  return absl::OkStatus();
}

absl::Status StorageManager::CopyStridedOnDevice(
    uintptr_t dst, absl::Span<const int64_t> dst_strides, uintptr_t src,
    absl::Span<const int64_t> src_strides, absl::Span<const int64_t> sizes,
    uint64_t elem_size) {
  uint64_t numel = 1;
  for (int64_t size : sizes) numel *= static_cast<uint64_t>(size);
  if (numel == 0) return absl::OkStatus();
  const uint64_t dst_span = StridedSpanBytes(sizes, dst_strides, elem_size);
  const uint64_t src_span = StridedSpanBytes(sizes, src_strides, elem_size);
  if (dst < src + src_span && src < dst + dst_span) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the source's bytes [0x%x, +%d) and the destination's bytes [0x%x, +%d) "
        "overlap (views of one storage), and the strided-copy engine copies "
        "between disjoint ranges only",
        src, src_span, dst, dst_span));
  }
  RBLN_ASSIGN_OR_RETURN(void* from, MapForDevice(src, src_span, DeviceAccess::kRead));
  // A destination with gaps between its elements keeps the gap bytes: read
  // them to the device first.
  const bool dense_dst = numel * elem_size == dst_span;
  RBLN_ASSIGN_OR_RETURN(
      void* to, MapForDevice(dst, dst_span,
                             dense_dst ? DeviceAccess::kWrite : DeviceAccess::kReadWrite));
  (void)from;
  (void)to;
  return CopyBetweenStorages(
      dst, dst_span, src, src_span, numel * elem_size,
      [&](uintptr_t to_phys, uintptr_t from_phys) {
        return dma_->DeviceToDeviceStrided(to_phys, dst_strides, from_phys, src_strides,
                                           sizes, elem_size);
      });
}

absl::Status StorageManager::Bind(uintptr_t base) {
  RBLN_RETURN_IF_ERROR(AwaitTransfer(base));
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(base, 1));
  if (s->base != base) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rbln: bind_device_memory needs the start of a storage; 0x%x is %d "
        "bytes into one",
        base, base - s->base));
  }
  RBLN_RETURN_IF_ERROR(AcquireDevice(*s));
  s->bound = true;
  s->flat = true;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> StorageManager::ReleaseHostCopy(uintptr_t address) {
  RBLN_RETURN_IF_ERROR(AwaitTransfer(address));
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, 1));
  if (s->state != DataState::kInSync || !s->shadow || s->shadow->fd >= 0) return 0;
  const uint64_t freed = s->shadow->size;
  s->shadow.reset();
  s->state = DataState::kDeviceLatest;
  return freed;
}

absl::Status StorageManager::AlignLayout(uintptr_t target_base,
                                         uintptr_t ref_base) {
  RBLN_RETURN_IF_ERROR(AwaitTransfer(target_base));
  RBLN_RETURN_IF_ERROR(AwaitTransfer(ref_base));
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * target, Find(target_base, 1));
  RBLN_ASSIGN_OR_RETURN(Storage * ref, Find(ref_base, 1));
  if (target->base != target_base || ref->base != ref_base) {
    return absl::FailedPreconditionError(
        "rbln: set_device_layout_like needs the start of both storages");
  }
  if (target->npu != ref->npu) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rbln: set_device_layout_like needs both tensors on one device "
        "(NPU %d vs NPU %d)",
        target->npu, ref->npu));
  }
  if (!ref->block || ref->state == DataState::kHostLatest ||
      ref->state == DataState::kEmpty) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rbln: set_device_layout_like needs ref's data on the device, but ref "
        "is %s; run a device op on it first",
        DataStateName(ref->state)));
  }
  if (target->block && target->block->chiplet == ref->block->chiplet) {
    return absl::OkStatus();
  }
  RBLN_ASSIGN_OR_RETURN(DeviceAllocation block,
                        physical_->AllocatePhysical(target->npu, target->nbytes,
                                                    ref->block->chiplet, target->context));
  absl::StatusOr<void*> view = physical_->HostView(block);
  if (!view.ok()) {
    (void)physical_->FreePhysical(block);
    return view.status();
  }
  if (target->block) {
    const bool device_has_data = target->state == DataState::kDeviceLatest ||
                                 target->state == DataState::kInSync;
    if (device_has_data) {
      RBLN_RETURN_IF_ERROR(
          dma_->DeviceToDevice(block.address, target->block->address, target->nbytes));
    }
    RBLN_RETURN_IF_ERROR(physical_->FreePhysical(*target->block));
  }
  target->block = block;
  target->backing = *view;
  if (target->program_owned) {
    RBLN_RETURN_IF_ERROR(physical_->SetProgramOwned(block, true));
  }
  return absl::OkStatus();
}

absl::StatusOr<StorageInfo> StorageManager::Info(uintptr_t address) const {
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, 1));
  StorageInfo info;
  info.address = s->base;
  info.nbytes = s->nbytes;
  info.npu = s->npu;
  info.state = s->state;
  info.bound = s->bound;
  info.flat = s->flat;
  info.transfer_pending =
      s->pending_stream != nullptr && !s->pending_stream->Passed(s->pending_seq);
  info.has_device_memory = s->block.has_value();
  if (s->block) {
    info.chiplet = s->block->chiplet;
    info.device_bytes = s->block->size;
  }
  if (s->shadow) {
    info.offload_path = s->shadow->path;
    info.host_bytes = s->shadow->size;
  }
  info.program_owned = s->program_owned;
  info.content_version = s->content_version;
  return info;
}

std::pair<DeviceStream*, uint64_t> StorageManager::PendingTransfer(
    uintptr_t address) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Storage*> s = Find(address, 1);
  if (!s.ok() || (*s)->pending_stream == nullptr) return {nullptr, 0};
  return {(*s)->pending_stream, (*s)->pending_seq};
}

absl::Status StorageManager::AwaitTransfer(uintptr_t address) {
  auto [stream, seq] = PendingTransfer(address);
  if (stream == nullptr) return absl::OkStatus();
  absl::Status status = stream->Wait(seq);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Storage*> s = Find(address, 1);
  if (s.ok() && (*s)->pending_stream == stream && (*s)->pending_seq == seq) {
    (*s)->pending_stream = nullptr;
    (*s)->pending_seq = 0;
  }
  return status;
}

absl::StatusOr<bool> StorageManager::WriteFromHostAsync(
    uintptr_t address, const void* src, uint64_t n, DeviceStream& stream,
    std::shared_ptr<const void> keep_alive) {
  if (n == 0) return true;
  // Transfers queued on another stream finish first; on the same stream the
  // FIFO orders them.
  if (auto [other, seq] = PendingTransfer(address); other != nullptr && other != &stream) {
    RBLN_RETURN_IF_ERROR(AwaitTransfer(address));
  }
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, n));
  if (!s->block || !s->flat) return false;  // Not one flat region (SPEC L1-L3).
  if (s->state == DataState::kHostLatest && !(address == s->base && n == s->nbytes)) {
    // The rest of the storage's bytes are in the shadow: the device gets
    // them first, as for any device write of part of a storage.
    RBLN_RETURN_IF_ERROR(Upload(*s));
  }
  s->state = DataState::kDeviceLatest;
  s->content_version = NextContentVersion();
  s->pending_stream = &stream;
  s->pending_seq = dma_->HostToDeviceAsync(stream, s->block->address + (address - s->base),
                                           src, n, std::move(keep_alive));
  return true;
}

absl::StatusOr<bool> StorageManager::ReadToHostAsync(
    void* dst, uintptr_t address, uint64_t n, DeviceStream& stream,
    std::shared_ptr<const void> keep_alive) {
  if (n == 0) return true;
  if (auto [other, seq] = PendingTransfer(address); other != nullptr && other != &stream) {
    RBLN_RETURN_IF_ERROR(AwaitTransfer(address));
  }
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, n));
  if (!s->block || (s->state != DataState::kDeviceLatest && s->state != DataState::kInSync)) {
    return false;  // The latest bytes are on the host side.
  }
  s->pending_stream = &stream;
  s->pending_seq = dma_->DeviceToHostAsync(stream, dst, s->block->address + (address - s->base),
                                           n, std::move(keep_alive));
  return true;
}

absl::Status StorageManager::RecordStream(uintptr_t address, DeviceStream& stream) {
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(address, 1));
  for (DeviceStream* recorded : s->recorded_streams) {
    if (recorded == &stream) return absl::OkStatus();
  }
  s->recorded_streams.push_back(&stream);
  return absl::OkStatus();
}

absl::Status StorageManager::SetProgramOwned(uintptr_t base, bool owned) {
  absl::MutexLock lock(&mu_);
  RBLN_ASSIGN_OR_RETURN(Storage * s, Find(base, 1));
  if (s->program_owned == owned) return absl::OkStatus();
  if (s->block) RBLN_RETURN_IF_ERROR(physical_->SetProgramOwned(*s->block, owned));
  s->program_owned = owned;
  return absl::OkStatus();
}

bool StorageManager::Contains(uintptr_t address) const {
  absl::MutexLock lock(&mu_);
  return Find(address, 1).ok();
}

int64_t StorageManager::num_storages() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(storages_.size());
}

}  // namespace rbln::runtime

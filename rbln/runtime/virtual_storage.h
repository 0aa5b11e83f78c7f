// Virtual storage and the three data states (SPEC D1-D8).
//
// Every rbln storage is a range of *virtual* device addresses (what
// data_ptr() shows; PROT_NONE, so a host dereference faults) with, lazily,
//   * a host shadow: where host writes land and host reads are served, and
//   * a physical block on one chiplet: acquired at the first device use
//     (or at creation with eager allocation, or by Bind()).
// Per storage the manager tracks where the latest bytes are and moves them
// only when the other side needs them:
//
//   state        | host read            | host write          | device read          | device write
//   -------------+----------------------+---------------------+----------------------+------------------
//   empty        | zeros, no DMA        | -> host-latest      | acquire, no DMA      | -> device-latest
//   host-latest  | shadow, no DMA       | shadow              | H2D, -> in-sync      | H2D unless whole, -> device-latest
//   device-latest| D2H, -> in-sync      | H2D into the block  | no DMA               | no DMA
//   in-sync      | shadow, no DMA       | shadow, -> host-lat.| no DMA               | -> device-latest
//
// Transfers always move the whole storage, so a state describes all of it.
//
// Asynchronous transfers (SPEC L1-L5): WriteFromHostAsync/ReadToHostAsync
// queue a DMA between a host buffer and a storage's physical block on a
// device stream. The storage remembers the pending transfer; every later
// access to it (host read/write, device use, copies, Bind, Release) first
// waits for that transfer, so the storage is never read, written, or its
// block freed while the DMA engine still works on it. RecordStream defers
// the return of a released storage's block to the caching allocator until
// the streams it was used on have passed the point of release.
#ifndef RBLN_RUNTIME_VIRTUAL_STORAGE_H_
#define RBLN_RUNTIME_VIRTUAL_STORAGE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rbln/core/counters.h"
#include "rbln/runtime/allocation_observer.h"
#include "rbln/runtime/chiplet_heap.h"
#include "rbln/runtime/device_stream.h"
#include "rbln/runtime/dma_engine.h"
#include "rbln/runtime/physical_memory.h"

namespace rbln::runtime {

enum class DataState { kEmpty, kHostLatest, kDeviceLatest, kInSync };
absl::string_view DataStateName(DataState state);

enum class DeviceAccess { kRead, kWrite, kReadWrite };

struct StorageInfo {
  uintptr_t address = 0;  // Virtual base.
  uint64_t nbytes = 0;
  int npu = 0;
  DataState state = DataState::kEmpty;
  bool has_device_memory = false;
  bool bound = false;        // Flat region acquired by Bind() (SPEC D6).
  // Still one flat region: bound, and not re-laid out by a device use since
  // (SPEC L1, L3); only such storages take asynchronous uploads.
  bool flat = false;
  bool transfer_pending = false;  // An asynchronous transfer is queued.
  int chiplet = -1;          // When has_device_memory.
  uint64_t device_bytes = 0;  // Rounded size of the physical block.
  std::string offload_path;   // File holding the host shadow, if offloaded.
  uint64_t host_bytes = 0;    // Size of the host copy; 0 while it has none.
  bool program_owned = false;  // SetProgramOwned().
  uint64_t content_version = 0;  // See StorageManager::MapForDevice.
};

class StorageManager {
 public:
  // `eager` acquires physical memory at Create (TORCH_RBLN_EAGER_MALLOC).
  StorageManager(int num_npus, uint64_t virtual_bytes_per_npu,
                 PhysicalMemory* physical, DmaEngine* dma, bool eager);
  ~StorageManager();

  StorageManager(const StorageManager&) = delete;
  StorageManager& operator=(const StorageManager&) = delete;

  // A new storage of `nbytes` (> 0) on `npu`; returns its virtual address.
  // Its physical blocks are allocated with `context` (allocation_observer.h).
  absl::StatusOr<uintptr_t> Create(int npu, uint64_t nbytes,
                                   AllocationContext context = nullptr);
  // Frees the storage at its base address and its physical block.
  absl::Status Release(uintptr_t base);

  // Host-side access to [address, address + n) inside one storage.
  absl::Status WriteFromHost(uintptr_t address, const void* src, uint64_t n);
  absl::Status ReadToHost(void* dst, uintptr_t address, uint64_t n);
  // A host read of [address, address + n) like ReadToHost -- same state
  // change, D2H and counters -- that hands the host copy's bytes to `read`
  // in place instead of copying them out. `read` runs under the manager's
  // lock: it must not call back into the manager.
  absl::Status ReadOnHost(uintptr_t address, uint64_t n,
                          absl::FunctionRef<void(const void* bytes)> read);

  // Host-accessible view of the physical bytes behind [address, address + n)
  // for a device-side access (the executor, device copies): acquires memory
  // and uploads as the state table says. With kWrite/kReadWrite the storage
  // is device-latest afterwards.
  //
  // `content_version`, if given, receives the storage's content version
  // after the access: a process-wide unique number that every write to the
  // storage (host or device, whole or part) replaces with a new one. Equal
  // versions of one address mean equal bytes, so what is derived from a
  // storage's bytes (a GEMM library's packed copy of a weight) can be kept
  // and reused while the version stays the same.
  absl::StatusOr<void*> MapForDevice(uintptr_t address, uint64_t n,
                                     DeviceAccess access,
                                     uint64_t* content_version = nullptr);

  // Device-to-device copy between (possibly the same) storages.
  absl::Status CopyOnDevice(uintptr_t dst, uintptr_t src, uint64_t n);
  // The device's bytes of [address, address + n) into host memory at `dst`,
  // by a D2H DMA of those n bytes: the read side of a device copy that goes
  // through the host (SPEC K3's host bounce). Like the source of any device
  // copy, the storage is mapped for a device read first (memory acquired, a
  // host-latest storage uploaded); the read leaves its state as it was.
  // Counted as a host read (storage/host_reads), always with a real D2H.
  absl::Status ReadFromDevice(void* dst, uintptr_t address, uint64_t n);
  // Element-wise strided copy between device storages through the DMA
  // engine's strided descriptors (SPEC K2); sizes/strides in elements of
  // `elem_size` bytes, `dst`/`src` the first elements. Bytes of the
  // destination span between its elements keep their values. Fails with
  // FailedPrecondition (saying why) when the two spans overlap.
  absl::Status CopyStridedOnDevice(uintptr_t dst, absl::Span<const int64_t> dst_strides,
                                   uintptr_t src, absl::Span<const int64_t> src_strides,
                                   absl::Span<const int64_t> sizes, uint64_t elem_size);

  // Asynchronous host->device write of [address, address + n) from `src`
  // on `stream` (SPEC L1): starts, and returns true, only when the storage
  // is still one flat region (Bind() and no device use since); returns
  // false, doing nothing, otherwise (the caller copies synchronously).
  // `keep_alive` is held until the transfer finished (e.g. the host
  // buffer's owner). `src` must stay untouched until then (SPEC L5).
  absl::StatusOr<bool> WriteFromHostAsync(uintptr_t address, const void* src,
                                          uint64_t n, DeviceStream& stream,
                                          std::shared_ptr<const void> keep_alive);
  // Asynchronous device->host read into `dst`: starts, and returns true,
  // only when the device holds the storage's latest bytes; false otherwise.
  absl::StatusOr<bool> ReadToHostAsync(void* dst, uintptr_t address, uint64_t n,
                                       DeviceStream& stream,
                                       std::shared_ptr<const void> keep_alive);
  // Waits for the pending asynchronous transfer on the storage holding
  // `address`, if any; returns that stream's kept error.
  absl::Status AwaitTransfer(uintptr_t address);

  // Tensor.record_stream: the storage's block may be in use by `stream`'s
  // queued work, so when the storage is released its block goes back to the
  // allocator only after `stream` passed the point of release.
  absl::Status RecordStream(uintptr_t address, DeviceStream& stream);
  // Returns the blocks of released storages whose recorded streams have
  // passed; with `wait`, first waits for those streams. Returns how many
  // are still deferred.
  int64_t FreeDeferredBlocks(bool wait);

  // Acquires the storage's physical memory now, as one flat region (SPEC D6).
  absl::Status Bind(uintptr_t base);

  // Frees the host copy of an in-sync storage (its bytes are also on the
  // device), which becomes device-latest: a later host read downloads them
  // again. Returns the bytes freed: 0 for a storage in another state or
  // whose host copy is an offload file (SPEC F3). A served model's weights
  // otherwise occupy host memory as well as device memory.
  absl::StatusOr<uint64_t> ReleaseHostCopy(uintptr_t address);

  // Places `target`'s physical block where `ref`'s is (same NPU, same
  // chiplet), so copies between them stay on one chiplet (SPEC D7). Copies
  // no data through the host; a block that must move is moved on the device.
  // `ref`'s data must be on the device.
  absl::Status AlignLayout(uintptr_t target_base, uintptr_t ref_base);

  // Storages created by this thread while `dir` is non-empty keep their host
  // shadow in a file under `dir`, removed with the storage (SPEC F3).
  // Returns the previous setting.
  static std::string SetThreadOffloadDir(std::string dir);

  absl::StatusOr<StorageInfo> Info(uintptr_t address) const;

  // Marks the storage's device memory, now and whenever it acquires a new
  // block, as owned by a cached compiled program: counted as reserved, not
  // allocated (SPEC E2; PhysicalMemory::SetProgramOwned).
  absl::Status SetProgramOwned(uintptr_t base, bool owned);
  // Does `address` fall inside a live storage?
  bool Contains(uintptr_t address) const;
  int64_t num_storages() const;

 private:
  // The host copy of a storage: heap memory, or a shared mapping of a file
  // when offloaded.
  struct HostShadow {
    char* data = nullptr;
    uint64_t size = 0;
    int fd = -1;
    std::string path;
    ~HostShadow();
  };
  struct Storage {
    uintptr_t base = 0;
    uint64_t nbytes = 0;
    int npu = 0;
    DataState state = DataState::kEmpty;
    bool bound = false;
    bool flat = false;  // See StorageInfo::flat.
    // The last asynchronous transfer queued on the storage.
    DeviceStream* pending_stream = nullptr;
    uint64_t pending_seq = 0;
    std::vector<DeviceStream*> recorded_streams;  // Tensor.record_stream.
    std::string offload_dir;
    std::unique_ptr<HostShadow> shadow;  // Allocated on first need.
    std::optional<DeviceAllocation> block;
    void* backing = nullptr;  // Host view of `block`.
    bool program_owned = false;  // Applied to every block it gets (SPEC E2).
    AllocationContext context;   // Given to every block it gets.
    // Replaced by NextContentVersion() at creation and at every write.
    uint64_t content_version = 0;
  };
  // A released block waiting for streams to pass points (record_stream).
  struct DeferredFree {
    DeviceAllocation block;
    std::vector<std::pair<DeviceStream*, uint64_t>> points;
  };
  struct VirtualRange {
    void* base = nullptr;
    uint64_t size = 0;
    std::unique_ptr<ChipletHeap> addresses;  // Hands out virtual ranges.
  };

  // The storage holding [address, address + n), or an error naming the range.
  absl::StatusOr<Storage*> Find(uintptr_t address, uint64_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The device-to-device copy shared by CopyOnDevice and CopyStridedOnDevice
  // (both ranges already mapped for the device): finds the two storages,
  // counts the copy as same- or cross-chiplet, runs `dma` on their physical
  // addresses under mu_, then fires runtime/v2v_slow for `bytes` if the copy
  // crossed chiplets.
  absl::Status CopyBetweenStorages(
      uintptr_t dst, uint64_t dst_span, uintptr_t src, uint64_t src_span, uint64_t bytes,
      absl::FunctionRef<absl::Status(uintptr_t dst_physical, uintptr_t src_physical)> dma)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AcquireDevice(Storage& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the deferred blocks whose points have passed (all, with `wait`).
  void FreeDeferredLocked(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pending transfer of the storage holding `address` (null if none).
  std::pair<DeviceStream*, uint64_t> PendingTransfer(uintptr_t address) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<char*> Shadow(Storage& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Upload(Storage& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Download(Storage& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PhysicalMemory* const physical_;
  DmaEngine* const dma_;
  const bool eager_;
  std::vector<VirtualRange> ranges_;  // Per NPU; fixed after construction.
  mutable absl::Mutex mu_;
  std::map<uintptr_t, std::unique_ptr<Storage>> storages_ ABSL_GUARDED_BY(mu_);
  std::vector<DeferredFree> deferred_ ABSL_GUARDED_BY(mu_);
  Counter* const uploads_;    // Whole-storage H2D caused by a device use.
  Counter* const downloads_;  // Whole-storage D2H caused by a host read.
  Counter* const pushes_;     // Host writes into device-latest storages.
  Counter* const same_chiplet_copies_;   // Device copies within a chiplet.
  Counter* const cross_chiplet_copies_;  // Device copies between chiplets.
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_VIRTUAL_STORAGE_H_

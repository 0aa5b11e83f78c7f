// Device memory of one simulated NPU.
//
// Device memory is not host memory (SPEC D5). The NPU's memory is one memfd;
// it is mapped twice:
//   * the *device range*, PROT_NONE: the addresses handed out as device
//     pointers (what `tensor.data_ptr()` shows). A host dereference faults.
//   * the *backing range*, read-write, private to this library: only the DMA
//     engine and the executor translate device addresses into it.
// Chiplet c of the NPU owns [c * memory_per_chiplet, (c+1) * memory_per_chiplet)
// of the range. The memfd is sparse: untouched memory costs nothing.
#ifndef RBLN_RUNTIME_DEVICE_MEMORY_H_
#define RBLN_RUNTIME_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace rbln::runtime {

class DeviceMemory {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceMemory>> Create(
      int npu_index, int num_chiplets, uint64_t memory_per_chiplet);
  ~DeviceMemory();

  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  int npu_index() const { return npu_index_; }
  int num_chiplets() const { return num_chiplets_; }
  uint64_t memory_per_chiplet() const { return memory_per_chiplet_; }
  uint64_t size() const { return size_; }

  // First device address of the NPU / of a chiplet.
  uintptr_t device_base() const { return reinterpret_cast<uintptr_t>(device_range_); }
  uintptr_t chiplet_base(int chiplet) const {
    return device_base() + static_cast<uint64_t>(chiplet) * memory_per_chiplet_;
  }

  bool Contains(uintptr_t device_address, uint64_t nbytes) const;
  // Chiplet that holds `device_address`; the address must be in range.
  int ChipletOf(uintptr_t device_address) const;

  // Host-accessible view of [device_address, device_address + nbytes), for the
  // DMA engine and the executor only. Fails if the range is outside this NPU.
  absl::StatusOr<void*> Translate(uintptr_t device_address,
                                  uint64_t nbytes) const;

 private:
  DeviceMemory(int npu_index, int num_chiplets, uint64_t memory_per_chiplet,
               int fd, void* device_range, void* backing_range);

  const int npu_index_;
  const int num_chiplets_;
  const uint64_t memory_per_chiplet_;
  const uint64_t size_;
  const int fd_;
  void* const device_range_;   // PROT_NONE.
  void* const backing_range_;  // PROT_READ | PROT_WRITE.
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_DEVICE_MEMORY_H_

#include "rbln/runtime/device_memory.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace rbln::runtime {
namespace {

absl::Status ErrnoError(absl::string_view what, int npu) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "rbln: cannot create device memory of NPU %d: %s failed: %s", npu, what,
      strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Create(
    int npu_index, int num_chiplets, uint64_t memory_per_chiplet) {
  const uint64_t size = memory_per_chiplet * static_cast<uint64_t>(num_chiplets);
  std::string name = absl::StrFormat("rbln-npu%d", npu_index);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return ErrnoError("memfd_create", npu_index);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    absl::Status s = ErrnoError("ftruncate", npu_index);
    close(fd);
    return s;
  }
  // MAP_NORESERVE: the card's memory is committed page by page as it is used.
  void* device_range = mmap(nullptr, size, PROT_NONE,
                            MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (device_range == MAP_FAILED) {
    absl::Status s = ErrnoError("mmap of the device range", npu_index);
    close(fd);
    return s;
  }
  void* backing_range = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (backing_range == MAP_FAILED) {
    absl::Status s = ErrnoError("mmap of the backing range", npu_index);
    munmap(device_range, size);
    close(fd);
    return s;
  }
  // A core dump of a process holding a 144 GiB card should not include it.
  madvise(backing_range, size, MADV_DONTDUMP);
  return std::unique_ptr<DeviceMemory>(
      new DeviceMemory(npu_index, num_chiplets, memory_per_chiplet, fd,
                       device_range, backing_range));
}

DeviceMemory::DeviceMemory(int npu_index, int num_chiplets,
                           uint64_t memory_per_chiplet, int fd,
                           void* device_range, void* backing_range)
    : npu_index_(npu_index),
      num_chiplets_(num_chiplets),
      memory_per_chiplet_(memory_per_chiplet),
      size_(memory_per_chiplet * static_cast<uint64_t>(num_chiplets)),
      fd_(fd),
      device_range_(device_range),
      backing_range_(backing_range) {}

DeviceMemory::~DeviceMemory() {
  munmap(backing_range_, size_);
  munmap(device_range_, size_);
  close(fd_);
}

bool DeviceMemory::Contains(uintptr_t device_address, uint64_t nbytes) const {
  return device_address >= device_base() && nbytes <= size_ &&
         device_address - device_base() <= size_ - nbytes;
}

int DeviceMemory::ChipletOf(uintptr_t device_address) const {
  return static_cast<int>((device_address - device_base()) /
                          memory_per_chiplet_);
}

absl::StatusOr<void*> DeviceMemory::Translate(uintptr_t device_address,
                                              uint64_t nbytes) const {
  if (!Contains(device_address, nbytes)) {
    return absl::OutOfRangeError(absl::StrFormat(
        "rbln: device range [0x%x, +%d) is outside NPU %d memory [0x%x, +%d)",
        device_address, nbytes, npu_index_, device_base(), size_));
  }
  return static_cast<char*>(backing_range_) + (device_address - device_base());
}

}  // namespace rbln::runtime

// Pinned host memory for rbln (SPEC F1): page-aligned host buffers, locked
// in RAM with mlock where the process may (RLIMIT_MEMLOCK), still pinned for
// our purposes where it may not (the buffer is aligned and never moves; the
// failure is counted as runtime/pinned_mlock_failures). Registered as the
// PrivateUse1 host allocator, so pin_memory=True, Tensor.pin_memory() and
// is_pinned() work when rbln is the accelerator.
#ifndef RBLN_TORCH_CSRC_PINNED_HOST_ALLOCATOR_H_
#define RBLN_TORCH_CSRC_PINNED_HOST_ALLOCATOR_H_

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>

#include <cstddef>

namespace rbln::torch_backend {

c10::Allocator* GetPinnedHostAllocator();
bool IsPinnedHostPtr(const void* ptr);

// Marks host memory allocated elsewhere (huge_host_empty) as pinned until
// UnregisterPinnedRegion.
void RegisterPinnedRegion(const void* ptr, size_t nbytes);
void UnregisterPinnedRegion(const void* ptr);

// Statistics of the blocks this allocator made (torch.rbln.host_memory_stats):
// nothing is cached, so allocations equal active requests; times are the
// mmap+mlock and munlock+munmap calls, in microseconds.
at::HostStats PinnedHostStats();
void ResetPinnedHostStats(bool peak);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_PINNED_HOST_ALLOCATOR_H_

// The rbln device allocator PyTorch sees (c10::DeviceAllocator, so that
// torch.accelerator.memory_* work). Each allocation is a block of the
// simulated NPU's memory; data_ptr() is its device address, which the host
// cannot dereference (SPEC D5). Statistics count device memory only.
// The caching layer (reuse of freed blocks, empty_cache) is SPEC E1's and
// comes on top of this.
#ifndef RBLN_TORCH_CSRC_DEVICE_ALLOCATOR_H_
#define RBLN_TORCH_CSRC_DEVICE_ALLOCATOR_H_

#include <c10/core/CachingDeviceAllocator.h>

namespace rbln::torch_backend {

c10::DeviceAllocator* GetDeviceAllocator();

// Device of an address handed out by the allocator, or -1.
c10::DeviceIndex DeviceOfAddress(const void* address);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DEVICE_ALLOCATOR_H_

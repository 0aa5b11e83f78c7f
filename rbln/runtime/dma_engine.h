// The DMA engine: the only path by which bytes cross between host memory and
// device memory, or between device buffers. Every copy is counted
// (runtime/dma_{h2d,d2h,d2d}_{copies,bytes}) for explain() and the profiler.
#ifndef RBLN_RUNTIME_DMA_ENGINE_H_
#define RBLN_RUNTIME_DMA_ENGINE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "rbln/core/counters.h"
#include "rbln/runtime/address_space.h"
#include "rbln/runtime/device_stream.h"
#include "rbln/runtime/strided_span.h"

namespace rbln::runtime {

class DmaEngine {
 public:
  // `host_link_bytes_per_second` (the profile's host DMA rate; 0: no rate
  // model) paces asynchronous host transfers.
  explicit DmaEngine(const AddressSpace* address_space,
                     double host_link_bytes_per_second = 0);

  absl::Status HostToDevice(uintptr_t dst, const void* src, uint64_t nbytes);
  absl::Status DeviceToHost(void* dst, uintptr_t src, uint64_t nbytes);
  absl::Status DeviceToDevice(uintptr_t dst, uintptr_t src, uint64_t nbytes);
  // An N-dimensional strided copy between device buffers, like a DMA
  // descriptor with one stride per dimension (SPEC K2: strided device copies
  // stay on the device). Sizes and strides count elements of `elem_size`
  // bytes; strides are non-negative; `dst` and `src` are the first
  // elements. The ranges must not overlap. Counted as runtime/dma_d2d_strided_*.
  absl::Status DeviceToDeviceStrided(uintptr_t dst, absl::Span<const int64_t> dst_strides,
                                     uintptr_t src, absl::Span<const int64_t> src_strides,
                                     absl::Span<const int64_t> sizes, uint64_t elem_size);

  // Asynchronous host<->device transfers (SPEC L1): queued on `stream`,
  // they run when the stream's worker reaches them and take the stream at
  // least nbytes / host link rate, as the host link of the simulated card
  // would (synchronous copies are not paced: they model the time the host
  // spends anyway). Counted as runtime/dma_{h2d,d2h}_async_*, not with the
  // synchronous DMA. `keep_alive` is released when the task finished. Returns
  // the task's sequence number on `stream`; errors surface at the stream's
  // next Wait/Synchronize.
  uint64_t HostToDeviceAsync(DeviceStream& stream, uintptr_t dst, const void* src,
                             uint64_t nbytes, std::shared_ptr<const void> keep_alive);
  uint64_t DeviceToHostAsync(DeviceStream& stream, void* dst, uintptr_t src,
                             uint64_t nbytes, std::shared_ptr<const void> keep_alive);

  double host_link_bytes_per_second() const { return host_link_rate_; }

 private:
  struct Direction {
    Counter* copies;
    Counter* bytes;
  };
  static Direction MakeDirection(absl::string_view name);
  static void Count(const Direction& d, uint64_t nbytes);
  // Sleeps until `start` + nbytes at the host link rate.
  void PaceHostTransfer(int64_t start_ns, uint64_t nbytes) const;

  const AddressSpace* const address_space_;
  const double host_link_rate_;
  const Direction h2d_async_;
  const Direction d2h_async_;
  const Direction h2d_;
  // Device pages committed ahead of large copies (page_commit.h).
  Counter* const committed_bytes_;
  const Direction d2h_;
  const Direction d2d_;
  const Direction d2d_strided_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_DMA_ENGINE_H_

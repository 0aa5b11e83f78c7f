// rbln streams for PyTorch (SPEC M1-M3): c10::Stream ids mapped to the
// runtime's DeviceStreams, and the current stream per device per thread.
//
// Stream ids: 0 is a device's default stream; 1..kPoolSize are the shared
// pool (getStreamFromGlobalPool, round robin); larger ids are streams made
// by getNewStream (torch.rbln.Stream(), torch.Stream(device="rbln")).
//
// What is asynchronous: host<->device transfers that qualify for
// non_blocking (SPEC L1), event markers and cross-stream fences run on the
// stream's worker. Kernels (compiled or CPU fallback) and synchronous copies
// run on the calling thread, after the current stream's queued work and any
// pending transfer touching their buffers completed, so submission order
// holds (SPEC M2).
#ifndef RBLN_TORCH_CSRC_STREAMS_H_
#define RBLN_TORCH_CSRC_STREAMS_H_

#include <c10/core/Stream.h>

#include "rbln/runtime/device_stream.h"

namespace rbln::torch_backend {

inline constexpr c10::StreamId kPoolSize = 32;

c10::Stream DefaultStream(c10::DeviceIndex device);
c10::Stream NewStream(c10::DeviceIndex device);
c10::Stream PoolStream(c10::DeviceIndex device);

// This thread's current stream on `device` (the default stream until set).
c10::Stream CurrentStream(c10::DeviceIndex device);
// Makes `stream` current on its device for this thread; returns the old one.
c10::Stream ExchangeStream(c10::Stream stream);

// The runtime stream behind `stream` (commits the runtime).
runtime::DeviceStream& RuntimeStream(const c10::Stream& stream);

// Blocks until `device`'s current stream finished its queued work; throws
// a queued task's error. Called before a kernel runs on the host (M2).
void CompleteCurrentStreamWork(c10::DeviceIndex device);
// Blocks until every stream of `device` finished (pending async transfers
// included, SPEC M3, L4); throws the first error a stream kept.
void SynchronizeDeviceStreams(c10::DeviceIndex device);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_STREAMS_H_

#include "rbln/runtime/dma_engine.h"

#include <cstring>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rbln/core/status_macros.h"
#include "rbln/runtime/page_commit.h"

namespace rbln::runtime {

DmaEngine::Direction DmaEngine::MakeDirection(absl::string_view name) {
  CounterRegistry& registry = CounterRegistry::Global();
  return {registry.Get(absl::StrCat("runtime/dma_", name, "_copies")),
          registry.Get(absl::StrCat("runtime/dma_", name, "_bytes"))};
}

void DmaEngine::Count(const Direction& d, uint64_t nbytes) {
  d.copies->Increment();
  d.bytes->Add(static_cast<int64_t>(nbytes));
}

DmaEngine::DmaEngine(const AddressSpace* address_space,
                     double host_link_bytes_per_second)
    : address_space_(address_space),
      host_link_rate_(host_link_bytes_per_second),
      h2d_async_(MakeDirection("h2d_async")),
      d2h_async_(MakeDirection("d2h_async")),
      h2d_(MakeDirection("h2d")),
      committed_bytes_(CounterRegistry::Global().Get("runtime/dma_committed_bytes")),
      d2h_(MakeDirection("d2h")),
      d2d_(MakeDirection("d2d")),
      d2d_strided_(MakeDirection("d2d_strided")) {}

absl::Status DmaEngine::HostToDevice(uintptr_t dst, const void* src,
                                     uint64_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* to, address_space_->Translate(dst, nbytes));
  committed_bytes_->Add(static_cast<int64_t>(CommitPagesForWrite(to, nbytes)));
  std::memcpy(to, src, nbytes);
  Count(h2d_, nbytes);
  return absl::OkStatus();
}

absl::Status DmaEngine::DeviceToHost(void* dst, uintptr_t src,
                                     uint64_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* from, address_space_->Translate(src, nbytes));
  // Host pages too: a download often lands in a new host copy or tensor.
  CommitPagesForWrite(dst, nbytes);
  std::memcpy(dst, from, nbytes);
  Count(d2h_, nbytes);
  return absl::OkStatus();
}

absl::Status DmaEngine::DeviceToDevice(uintptr_t dst, uintptr_t src,
                                       uint64_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* to, address_space_->Translate(dst, nbytes));
  RBLN_ASSIGN_OR_RETURN(void* from, address_space_->Translate(src, nbytes));
  committed_bytes_->Add(static_cast<int64_t>(CommitPagesForWrite(to, nbytes)));
  std::memmove(to, from, nbytes);
  Count(d2d_, nbytes);
  return absl::OkStatus();
}

void DmaEngine::PaceHostTransfer(int64_t start_ns, uint64_t nbytes) const {
  if (host_link_rate_ <= 0) return;
  const absl::Time done = absl::FromUnixNanos(start_ns) +
                          absl::Seconds(static_cast<double>(nbytes) / host_link_rate_);
  absl::SleepFor(done - absl::Now());  // No-op when the copy took longer.
}

uint64_t DmaEngine::HostToDeviceAsync(DeviceStream& stream, uintptr_t dst,
                                      const void* src, uint64_t nbytes,
                                      std::shared_ptr<const void> keep_alive) {
  return stream.Enqueue(
      absl::StrFormat("host->device transfer of %d bytes to 0x%x", nbytes, dst),
      [this, dst, src, nbytes, keep = std::move(keep_alive)]() {
        const int64_t start = absl::GetCurrentTimeNanos();
        // Counted apart from synchronous DMA: explain()'s host->device push
        // counts synchronous uploads only (SPEC L3).
        RBLN_ASSIGN_OR_RETURN(void* to, address_space_->Translate(dst, nbytes));
        committed_bytes_->Add(static_cast<int64_t>(CommitPagesForWrite(to, nbytes)));
        std::memcpy(to, src, nbytes);
        Count(h2d_async_, nbytes);
        PaceHostTransfer(start, nbytes);
        return absl::OkStatus();
      });
}

uint64_t DmaEngine::DeviceToHostAsync(DeviceStream& stream, void* dst,
                                      uintptr_t src, uint64_t nbytes,
                                      std::shared_ptr<const void> keep_alive) {
  return stream.Enqueue(
      absl::StrFormat("device->host transfer of %d bytes from 0x%x", nbytes, src),
      [this, dst, src, nbytes, keep = std::move(keep_alive)]() {
        const int64_t start = absl::GetCurrentTimeNanos();
        RBLN_ASSIGN_OR_RETURN(void* from, address_space_->Translate(src, nbytes));
        std::memcpy(dst, from, nbytes);
        Count(d2h_async_, nbytes);
        PaceHostTransfer(start, nbytes);
        return absl::OkStatus();
      });
}

absl::Status DmaEngine::DeviceToDeviceStrided(
    uintptr_t dst, absl::Span<const int64_t> dst_strides, uintptr_t src,
    absl::Span<const int64_t> src_strides, absl::Span<const int64_t> sizes,
    uint64_t elem_size) {
  const size_t rank = sizes.size();
  if (dst_strides.size() != rank || src_strides.size() != rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln: strided device copy of rank %d got %d destination and %d "
        "source strides",
        rank, dst_strides.size(), src_strides.size()));
  }
  uint64_t numel = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (sizes[d] < 0 || dst_strides[d] < 0 || src_strides[d] < 0) {
      return absl::InvalidArgumentError(
          "rbln: strided device copy needs non-negative sizes and strides");
    }
    numel *= static_cast<uint64_t>(sizes[d]);
  }
  if (numel == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* to_base, address_space_->Translate(
                                           dst, StridedSpanBytes(sizes, dst_strides, elem_size)));
  RBLN_ASSIGN_OR_RETURN(void* from_base, address_space_->Translate(
                                             src, StridedSpanBytes(sizes, src_strides, elem_size)));
  char* const to = static_cast<char*>(to_base);
  const char* const from = static_cast<const char*>(from_base);
  // Rows along the innermost dimension; a row whose elements are adjacent
  // on both sides is one memcpy.
  const int64_t inner = rank == 0 ? 1 : sizes[rank - 1];
  const int64_t dst_inner = rank == 0 ? 1 : dst_strides[rank - 1];
  const int64_t src_inner = rank == 0 ? 1 : src_strides[rank - 1];
  const bool dense_rows = dst_inner == 1 && src_inner == 1;
  std::vector<int64_t> index(rank > 0 ? rank - 1 : 0, 0);
  for (uint64_t row = 0, rows = numel / inner; row < rows; ++row) {
    int64_t dst_off = 0, src_off = 0;
    for (size_t d = 0; d < index.size(); ++d) {
      dst_off += index[d] * dst_strides[d];
      src_off += index[d] * src_strides[d];
    }
    char* out = to + dst_off * elem_size;
    const char* in = from + src_off * elem_size;
    if (dense_rows) {
      std::memcpy(out, in, inner * elem_size);
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        std::memcpy(out + i * dst_inner * elem_size, in + i * src_inner * elem_size,
                    elem_size);
      }
    }
    for (size_t d = index.size(); d-- > 0;) {  // Next row: odometer step.
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  Count(d2d_strided_, numel * elem_size);
  return absl::OkStatus();
}

}  // namespace rbln::runtime

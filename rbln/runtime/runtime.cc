#include "rbln/runtime/runtime.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rbln/core/env.h"
#include "rbln/core/status_macros.h"

namespace rbln::runtime {

absl::StatusOr<Runtime*> Runtime::Get() {
  static const auto* const runtime =
      new absl::StatusOr<std::unique_ptr<Runtime>>([] {
        absl::StatusOr<DeviceProfile> profile = DeviceProfile::FromEnvironment();
        if (!profile.ok()) {
          return absl::StatusOr<std::unique_ptr<Runtime>>(profile.status());
        }
        absl::StatusOr<RuntimeOptions> options = OptionsFromEnvironment();
        if (!options.ok()) {
          return absl::StatusOr<std::unique_ptr<Runtime>>(options.status());
        }
        options->publish_stats = true;
        return Create(*profile, *options);
      }());
  if (!runtime->ok()) return runtime->status();
  return runtime->value().get();
}

absl::StatusOr<RuntimeOptions> Runtime::OptionsFromEnvironment() {
  RuntimeOptions options;
  RBLN_ASSIGN_OR_RETURN(options.eager_malloc,
                        env::GetBool("TORCH_RBLN_EAGER_MALLOC", false));
  return options;
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    const DeviceProfile& profile, RuntimeOptions options) {
  std::vector<Npu> npus(profile.num_npus);
  for (int i = 0; i < profile.num_npus; ++i) {
    RBLN_ASSIGN_OR_RETURN(
        npus[i].memory,
        DeviceMemory::Create(i, profile.chiplets_per_npu,
                             profile.memory_per_chiplet));
    for (int c = 0; c < profile.chiplets_per_npu; ++c) {
      npus[i].chiplets.push_back(std::make_unique<ChipletHeap>(
          profile.memory_per_chiplet, profile.allocation_unit));
      npus[i].caches.push_back(std::make_unique<ChipletCachingAllocator>(
          npus[i].chiplets.back().get()));
    }
  }
  return std::unique_ptr<Runtime>(
      new Runtime(profile, options, std::move(npus)));
}

DeviceStream& Runtime::Stream(int npu, int64_t id) {
  absl::MutexLock lock(&streams_mu_);
  std::unique_ptr<DeviceStream>& stream = streams_[{npu, id}];
  if (stream == nullptr) stream = std::make_unique<DeviceStream>(npu, id);
  return *stream;
}

absl::Status Runtime::SynchronizeNpu(int npu) {
  RBLN_RETURN_IF_ERROR(CheckNpuIndex(npu));
  std::vector<DeviceStream*> streams;
  {
    absl::MutexLock lock(&streams_mu_);
    for (auto it = streams_.lower_bound({npu, INT64_MIN});
         it != streams_.end() && it->first.first == npu; ++it) {
      streams.push_back(it->second.get());
    }
  }
  absl::Status first;
  for (DeviceStream* stream : streams) first.Update(stream->Synchronize());
  storage_.FreeDeferredBlocks(/*wait=*/false);
  return first;
}

bool Runtime::NpuBusy(int npu) const {
  absl::MutexLock lock(&streams_mu_);
  for (auto it = streams_.lower_bound({npu, INT64_MIN});
       it != streams_.end() && it->first.first == npu; ++it) {
    if (!it->second->Idle()) return true;
  }
  return false;
}

std::vector<const DeviceMemory*> Runtime::Memories(const std::vector<Npu>& npus) {
  std::vector<const DeviceMemory*> out;
  for (const Npu& npu : npus) out.push_back(npu.memory.get());
  return out;
}

// Virtual addresses per NPU: room for its memory several times over, so
// fragmentation of the virtual range never limits what physical memory allows.
constexpr uint64_t kVirtualRangeFactor = 4;

Runtime::Runtime(const DeviceProfile& profile, RuntimeOptions options,
                 std::vector<Npu> npus)
    : profile_(profile),
      npus_(std::move(npus)),
      address_space_(Memories(npus_)),
      dma_(&address_space_, profile.host_dma_bytes_per_second),
      storage_(profile.num_npus, kVirtualRangeFactor * profile.memory_per_npu(),
               this, &dma_, options.eager_malloc),
      executor_(&storage_, this, profile.chiplets_per_npu),
      totals_(profile.num_npus),
      chiplet_stats_(profile.num_npus),
      memory_fractions_(profile.num_npus, 1.0),
      busy_ns_(static_cast<size_t>(profile.num_npus) * profile.chiplets_per_npu, 0) {
  executor_.SetBusyObserver([this](const ComputeUnit& unit, int64_t ns) {
    absl::MutexLock lock(&totals_mu_);
    const int64_t index = int64_t{unit.npu} * profile_.chiplets_per_npu + unit.chiplet;
    if (index < 0 || index >= static_cast<int64_t>(busy_ns_.size())) return;
    busy_ns_[index] += ns;
    if (publisher_) publisher_->PublishBusy(unit.npu, unit.chiplet, busy_ns_[index]);
  });
  if (options.publish_stats) {
    absl::MutexLock lock(&totals_mu_);
    publisher_ = StatsPublisher::Create(profile.name, profile.num_npus,
                                        profile.chiplets_per_npu,
                                        profile.memory_per_chiplet);
  }
}

absl::Status Runtime::CheckNpuIndex(int npu) const {
  if (npu < 0 || npu >= num_npus()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "rbln: NPU index %d is out of range: this process has %d NPU(s) "
        "(valid: 0..%d)",
        npu, num_npus(), num_npus() - 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAllocation> Runtime::AllocatePhysical(int npu, uint64_t nbytes,
                                                           int wanted,
                                                           AllocationContext context) {
  RBLN_RETURN_IF_ERROR(CheckNpuIndex(npu));
  const Npu& n = npus_[npu];
  if (wanted != kAnyChiplet &&
      (wanted < 0 || wanted >= static_cast<int>(n.caches.size()))) {
    return absl::OutOfRangeError(
        absl::StrFormat("rbln: NPU %d has no chiplet %d", npu, wanted));
  }
  int chiplet = wanted == kAnyChiplet ? 0 : wanted;
  int64_t least = -1;
  for (int c = 0; wanted == kAnyChiplet && c < static_cast<int>(n.caches.size());
       ++c) {
    const AllocatorStats stats = n.caches[c]->stats();
    // Program-owned blocks (E2) occupy the chiplet as much as the user's.
    const int64_t allocated =
        stats.allocated_bytes.current + stats.program_bytes.current;
    if (least < 0 || allocated < least) {
      chiplet = c;
      least = allocated;
    }
  }
  ChipletCachingAllocator& cache = *n.caches[chiplet];
  absl::StatusOr<uint64_t> offset = cache.Allocate(nbytes, std::move(context));
  UpdateTotals(npu, chiplet);
  if (!offset.ok()) {
    const double fraction = MemoryFraction(npu);
    const std::string limited =
        fraction < 1.0
            ? absl::StrFormat("; this process may reserve %g of each chiplet of NPU %d "
                              "(set_per_process_memory_fraction)",
                              fraction, npu)
            : "";
    uint64_t npu_free = 0;
    for (int c = 0; c < static_cast<int>(n.chiplets.size()); ++c) {
      npu_free += n.chiplets[c]->free_bytes() + n.caches[c]->cached_bytes();
    }
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rbln: out of device memory on NPU %d chiplet %d: tried to allocate "
        "%d bytes; chiplet %d has %d bytes free and %d cached of %d; the "
        "NPU's %d chiplet(s) have %d bytes free or cached in total, but a "
        "storage cannot span chiplets%s (%s)",
        npu, chiplet, nbytes, chiplet, n.chiplets[chiplet]->free_bytes(),
        cache.cached_bytes(), profile_.memory_per_chiplet, n.chiplets.size(),
        npu_free, limited, offset.status().message()));
  }
  DeviceAllocation a;
  a.npu = npu;
  a.chiplet = chiplet;
  a.address = n.memory->chiplet_base(chiplet) + *offset;
  a.size = cache.BlockSize(*offset);
  return a;
}

absl::Status Runtime::FreePhysical(const DeviceAllocation& block) {
  RBLN_ASSIGN_OR_RETURN(const DeviceMemory* memory,
                        address_space_.Owner(block.address, 1));
  const int chiplet = memory->ChipletOf(block.address);
  const Npu& n = npus_[memory->npu_index()];
  RBLN_RETURN_IF_ERROR(
      n.caches[chiplet]->Free(block.address - memory->chiplet_base(chiplet)));
  UpdateTotals(memory->npu_index(), chiplet);
  return absl::OkStatus();
}

absl::Status Runtime::SetProgramOwned(const DeviceAllocation& block, bool owned) {
  RBLN_ASSIGN_OR_RETURN(const DeviceMemory* memory,
                        address_space_.Owner(block.address, 1));
  const int chiplet = memory->ChipletOf(block.address);
  const Npu& n = npus_[memory->npu_index()];
  RBLN_RETURN_IF_ERROR(n.caches[chiplet]->SetProgramOwned(
      block.address - memory->chiplet_base(chiplet), owned));
  UpdateTotals(memory->npu_index(), chiplet);
  return absl::OkStatus();
}

absl::StatusOr<void*> Runtime::HostView(const DeviceAllocation& block) {
  return address_space_.Translate(block.address, block.size);
}

uint64_t Runtime::UsedBytes(int npu, int chiplet) const {
  return npus_[npu].chiplets[chiplet]->used_bytes();
}

uint64_t Runtime::FreeBytes(int npu, int chiplet) const {
  return npus_[npu].chiplets[chiplet]->free_bytes();
}

AllocatorStats Runtime::ChipletStats(int npu, int chiplet) const {
  return npus_[npu].caches[chiplet]->stats();
}

std::vector<SegmentInfo> Runtime::ChipletSnapshot(int npu, int chiplet) const {
  return npus_[npu].caches[chiplet]->Snapshot();
}

uintptr_t Runtime::ChipletBase(int npu, int chiplet) const {
  return npus_[npu].memory->chiplet_base(chiplet);
}

AllocatorStats Runtime::NpuStats(int npu) const {
  absl::MutexLock lock(&totals_mu_);
  return totals_[npu];
}

void Runtime::UpdateTotals(int npu, int chiplet) {
  absl::MutexLock lock(&totals_mu_);
  const auto& caches = npus_[npu].caches;
  std::vector<AllocatorStats>& last = chiplet_stats_[npu];
  if (last.size() != caches.size()) last.resize(caches.size());
  AllocatorStats& total = totals_[npu];
  // The totals are the sum of the chiplets' last stats: only the chiplets
  // read now change, so their difference to what was last read is added
  // (an allocation reads one chiplet; summing every chiplet's stats again
  // was a measurable part of an eager op).
  for (int c = 0; c < static_cast<int>(caches.size()); ++c) {
    if (chiplet >= 0 && c != chiplet) continue;
    AllocatorStats now = caches[c]->stats();
    if (publisher_) publisher_->Publish(npu, c, now);
    auto from = now.AllStats();
    auto before = last[c].AllStats();
    auto to = total.AllStats();
    for (size_t i = 0; i < from.size(); ++i) {
      to[i]->current += from[i]->current - before[i]->current;
      to[i]->allocated += from[i]->allocated - before[i]->allocated;
      to[i]->freed += from[i]->freed - before[i]->freed;
    }
    total.num_alloc_retries += now.num_alloc_retries - last[c].num_alloc_retries;
    total.num_ooms += now.num_ooms - last[c].num_ooms;
    total.num_device_alloc += now.num_device_alloc - last[c].num_device_alloc;
    total.num_device_free += now.num_device_free - last[c].num_device_free;
    last[c] = now;
  }
  for (Stat* stat : total.AllStats()) stat->peak = std::max(stat->peak, stat->current);
}

void Runtime::ResetPeakStats(int npu) {
  for (const auto& cache : npus_[npu].caches) cache->ResetPeakStats();
  absl::MutexLock lock(&totals_mu_);
  for (Stat* stat : totals_[npu].AllStats()) stat->ResetPeak();
}

void Runtime::ResetAccumulatedStats(int npu) {
  for (const auto& cache : npus_[npu].caches) cache->ResetAccumulatedStats();
  UpdateTotals(npu);
}

void Runtime::EmptyCache() {
  for (int npu = 0; npu < num_npus(); ++npu) {
    for (const auto& cache : npus_[npu].caches) cache->EmptyCache();
    UpdateTotals(npu);
  }
  std::vector<std::function<void()>> droppers;
  {
    absl::MutexLock lock(&droppers_mu_);
    droppers = droppers_;
  }
  for (const auto& drop : droppers) drop();
}

absl::Status Runtime::SetMemoryFraction(int npu, double fraction) {
  RBLN_RETURN_IF_ERROR(CheckNpuIndex(npu));
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln: invalid memory fraction %g; it must be in [0, 1] (a share of "
        "each chiplet's memory)",
        fraction));
  }
  // Whole allocation units; 0 lets nothing new be reserved (a 1-byte cap:
  // the cache's 0 means no cap).
  const uint64_t unit = profile_.allocation_unit;
  const uint64_t limit =
      fraction == 0.0
          ? 1
          : std::max<uint64_t>(
                unit,
                static_cast<uint64_t>(fraction * static_cast<double>(profile_.memory_per_chiplet)) /
                    unit * unit);
  for (const auto& cache : npus_[npu].caches) {
    cache->SetMemoryLimit(fraction >= 1.0 ? 0 : limit);
  }
  absl::MutexLock lock(&totals_mu_);
  memory_fractions_[npu] = fraction;
  return absl::OkStatus();
}

int64_t Runtime::BusyNs(int npu, int chiplet) const {
  absl::MutexLock lock(&totals_mu_);
  return busy_ns_[static_cast<size_t>(npu) * profile_.chiplets_per_npu + chiplet];
}

double Runtime::MemoryFraction(int npu) const {
  absl::MutexLock lock(&totals_mu_);
  return memory_fractions_[npu];
}

void Runtime::SetAllocationObserver(AllocationObserver* observer) {
  for (int npu = 0; npu < num_npus(); ++npu) {
    const Npu& n = npus_[npu];
    for (int c = 0; c < static_cast<int>(n.caches.size()); ++c) {
      if (observer == nullptr) {
        n.caches[c]->SetEventSink(nullptr);
        continue;
      }
      const uintptr_t base = n.memory->chiplet_base(c);
      n.caches[c]->SetEventSink([observer, npu, c, base](const AllocationEvent& e) {
        AllocationEvent event = e;
        event.npu = npu;
        event.chiplet = c;
        if (event.action != AllocationEvent::Action::kOom) event.address += base;
        observer->OnAllocationEvent(event);
      });
    }
  }
}

void Runtime::RegisterCacheDropper(std::function<void()> dropper) {
  absl::MutexLock lock(&droppers_mu_);
  droppers_.push_back(std::move(dropper));
}

}  // namespace rbln::runtime

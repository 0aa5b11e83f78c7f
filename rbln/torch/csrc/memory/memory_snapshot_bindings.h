// torch_rbln._C entry points of torch.rbln.memory's history and snapshots
// (memory_history.h): _record_memory_history, _memory_snapshot (the
// dictionary of torch.cuda.memory._snapshot()) and _set_oom_observer (a
// Python callable run at an out-of-memory error, e.g. to dump a snapshot).
#ifndef RBLN_TORCH_CSRC_MEMORY_SNAPSHOT_BINDINGS_H_
#define RBLN_TORCH_CSRC_MEMORY_SNAPSHOT_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace rbln::torch_backend {

void RegisterMemorySnapshotBindings(pybind11::module_& m);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_MEMORY_SNAPSHOT_BINDINGS_H_

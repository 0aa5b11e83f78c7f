// torch_rbln._C entry points of torch.rbln.explain() (SPEC N1-N4).
#ifndef RBLN_TORCH_CSRC_EXPLAIN_BINDINGS_H_
#define RBLN_TORCH_CSRC_EXPLAIN_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace rbln::torch_backend {

// Adds _explain_begin_capture, _explain_end_capture and
// _set_signal_location_provider to `m`.
void RegisterExplainBindings(pybind11::module_& m);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_EXPLAIN_BINDINGS_H_

// c10 errors as the Python exceptions torch's own bindings raise for them,
// for pybind11 entry points of torch_rbln._C (which pybind11 would otherwise
// turn into RuntimeError, with the C++ backtrace): an out-of-memory error
// must reach user code as torch.OutOfMemoryError, whichever entry point hit
// it (an eager op, a compiled graph's workspace, an upload).
#ifndef RBLN_TORCH_CSRC_PYTHON_ERRORS_H_
#define RBLN_TORCH_CSRC_PYTHON_ERRORS_H_

#include <pybind11/pybind11.h>

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>  // torch::PyWarningHandler

#include <stdexcept>
#include <utility>

namespace rbln::torch_backend {

// Runs fn() (GIL held) and rethrows c10::IndexError as IndexError,
// c10::ValueError as ValueError, c10::OutOfMemoryError as
// torch.OutOfMemoryError and any other c10::Error as RuntimeError, each
// without the C++ backtrace; a TORCH_WARN inside becomes a Python warning.
template <typename Fn>
decltype(auto) CallWithPythonErrors(Fn&& fn) {
  torch::PyWarningHandler warnings;
  try {
    return std::forward<Fn>(fn)();
  } catch (const c10::IndexError& e) {
    warnings.set_in_exception();
    throw pybind11::index_error(e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    warnings.set_in_exception();
    throw pybind11::value_error(e.what_without_backtrace());
  } catch (const c10::OutOfMemoryError& e) {
    warnings.set_in_exception();
    const pybind11::object type = pybind11::module_::import("torch").attr("OutOfMemoryError");
    PyErr_SetString(type.ptr(), e.what_without_backtrace());
    throw pybind11::error_already_set();
  } catch (const c10::Error& e) {
    warnings.set_in_exception();
    throw std::runtime_error(e.what_without_backtrace());
  }
}

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_PYTHON_ERRORS_H_

#include "rbln/torch/csrc/profiler/explain_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "rbln/core/signal_recorder.h"

namespace py = pybind11;

namespace rbln::torch_backend {

void RegisterExplainBindings(py::module_& m) {
  // `fn()` returns "file.py:LINE(func) <- ..." of the user's code. Called at
  // a signal site only while a with_stack region records; the site may run
  // with the GIL released (torch ops release it), so take it here.
  m.def("_set_signal_location_provider", [](py::object fn) {
    auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
      py::gil_scoped_acquire gil;
      delete p;
    });
    SignalRecorder::Global().SetLocationProvider([holder]() -> std::string {
      py::gil_scoped_acquire gil;
      try {
        return (*holder)().cast<std::string>();
      } catch (const py::error_already_set&) {
        return "";
      }
    });
  });
  m.def("_explain_begin_capture", [] {
    if (absl::Status s = SignalRecorder::Global().BeginCapture(); !s.ok()) {
      throw std::runtime_error(std::string(s.message()));
    }
  });
  // [(signal, detail, bytes, where)] fired since _explain_begin_capture.
  m.def("_explain_end_capture", [] {
    absl::StatusOr<std::vector<SignalEvent>> events =
        SignalRecorder::Global().EndCapture();
    if (!events.ok()) throw std::runtime_error(std::string(events.status().message()));
    std::vector<std::tuple<std::string, std::string, int64_t, std::string>> out;
    out.reserve(events->size());
    for (SignalEvent& e : *events) {
      out.emplace_back(std::move(e.signal), std::move(e.detail), e.bytes,
                       std::move(e.where));
    }
    return out;
  });
}

}  // namespace rbln::torch_backend

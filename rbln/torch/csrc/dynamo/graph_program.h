// Whole-graph programs for torch.compile(backend="rbln") (SPEC J1, J7, P9).
//
// The Dynamo backend (torch_rbln/_dynamo) converts a captured, functionalized
// ATen graph to the graph IR in Python and hands it here as plain lists; this
// file builds the ir::Graph, compiles it to one program and runs it on the
// rbln tensors' device memory. Every graph input (parameters and buffers
// included) is a runtime buffer, never a baked constant, so graphs with equal
// shapes share a program. Inputs the graph mutates (a KV cache's
// index_copy_) can be updated in place: the program writes them through their
// own data pointers (graph.proto's Update) and their version is bumped.
// Counters: graph/compiles, graph/compile_errors, graph/runs,
// graph/cpu_fallback, graph/host_ops.
#ifndef RBLN_TORCH_CSRC_DYNAMO_GRAPH_PROGRAM_H_
#define RBLN_TORCH_CSRC_DYNAMO_GRAPH_PROGRAM_H_

#include <pybind11/pybind11.h>

namespace rbln::torch_backend {

// Adds _graph_compile, _graph_compile_error and the GraphProgram class to
// torch_rbln._C.
void RegisterGraphProgramBindings(pybind11::module_& m);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DYNAMO_GRAPH_PROGRAM_H_

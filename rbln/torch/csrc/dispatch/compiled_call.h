// One compiled-op call read by its op's schema (the dispatch slow path of
// compiled_ops.cc): the graph op and its attributes, the device tensors that
// become graph inputs, and the results' sizes and dtypes inferred on the meta
// device.
#ifndef RBLN_TORCH_CSRC_DISPATCH_COMPILED_CALL_H_
#define RBLN_TORCH_CSRC_DISPATCH_COMPILED_CALL_H_

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/torch/csrc/dispatch/warm_cache.h"

namespace rbln::torch_backend {

// One call, read by the op's schema (the slow path).
struct Call {
  std::string op;        // Graph op: the schema's base name ("mul").
  std::string overload;  // Full name for logs ("aten::mul.Tensor").
  std::vector<at::Tensor> inputs;
  std::vector<InputSlot> slots;  // Where each input sits on the stack.
  std::vector<std::string> input_names;
  compiler::ir::Node node;  // Attributes only; inputs/outputs filled later.
  bool has_zero_dim_device_tensor = false;
  bool has_scalar_operand = false;  // `x + 1.0` (SPEC G3).
  std::optional<c10::Device> out_device;  // Of an out= argument (arange).
  std::string unsupported;  // Why the arguments cannot be described.
};

inline constexpr char kSdpaOverload[] = "aten::_scaled_dot_product_fused_attention_overrideable";
bool IsSdpa(const Call& call);

bool IsComparison(const std::string& op);

// A view input the program reads from its storage (SPEC G3, H7): the graph
// input is the span of the storage the view covers, and the program's first
// node replays the view on it (strided_view), so no contiguous copy is made
// on the device. Comparison ops keep materializing views with .contiguous()
// as H7 says.
bool ReadsViewFromSpan(const std::string& op, const at::Tensor& t);

// Ops whose results are indices: an int64 result is their nature, not a
// dtype the device lacks.
bool ProducesIndices(const std::string& op);

// The graph op of an overload: "aten::add_" -> "add", "aten::_softmax" ->
// "softmax".
std::string GraphOpName(const c10::FunctionSchema& schema);

// Reads the call on top of `stack` by `op`'s schema.
Call ReadCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

// In-place self or out=: the argument the op writes, if any.
std::optional<int> DestinationArg(const c10::FunctionSchema& schema);

bool IsConvolutionBackward(const Call& call);

// The functional results' sizes and dtypes, by running the op on meta
// tensors (nullopt: no meta kernel or it refused the arguments; the CPU
// then gives the user its error).
std::optional<std::vector<at::Tensor>> InferOutputs(const c10::OperatorHandle& op,
                                                    const torch::jit::Stack& stack,
                                                    const Call& call);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_COMPILED_CALL_H_

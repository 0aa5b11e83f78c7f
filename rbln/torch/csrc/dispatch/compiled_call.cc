// Reading a compiled-op call by its schema; see compiled_call.h.
#include "rbln/torch/csrc/dispatch/compiled_call.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::torch_backend {

bool IsSdpa(const Call& call) { return call.op == "scaled_dot_product_attention"; }

bool IsComparison(const std::string& op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}

// A view input the program reads from its storage (SPEC G3, H7): the graph
// input is the span of the storage the view covers, and the program's first
// node replays the view on it (strided_view), so no contiguous copy is made
// on the device. Comparison ops keep materializing views with .contiguous()
// as H7 says.
bool ReadsViewFromSpan(const std::string& op, const at::Tensor& t) {
  return !t.is_contiguous() && t.numel() > 0 && !IsComparison(op);
}

// Ops whose results are indices: an int64 result is their nature, not a
// dtype the device lacks.
bool ProducesIndices(const std::string& op) {
  return op == "argmax" || op == "argmin" || op == "arange" || op == "max" || op == "min";
}

namespace {

void SetScalarAttr(Call& call, const std::string& name, const c10::Scalar& s) {
  compiler::ir::Attribute& a = (*call.node.mutable_attrs())[name];
  if (s.isBoolean()) {
    a.set_b(s.toBool());
  } else if (s.isIntegral(false)) {
    a.set_i(s.toLong());
  } else if (s.isFloatingPoint()) {
    a.set_f(s.toDouble());
  } else {
    call.unsupported = "complex scalar";
  }
}

}  // namespace

// The graph op of an overload: "aten::add_" -> "add", "aten::_softmax" ->
// "softmax".
std::string GraphOpName(const c10::FunctionSchema& schema) {
  std::string op = schema.name().substr(schema.name().find("::") + 2);
  if (!op.empty() && op.back() == '_') op.pop_back();
  if (op == "_softmax" || op == "_log_softmax") op.erase(0, 1);
  // max(a, b, out=) and min(a, b, out=) are maximum/minimum; the unary and
  // dim overloads reduce.
  if ((op == "max" || op == "min") &&
      (schema.overload_name() == "other" || schema.overload_name() == "out")) {
    op = op == "max" ? "maximum" : "minimum";
  }
  // PyTorch's sdpa hands the whole attention to PrivateUse1 through the
  // overrideable backend (see RblnFusedSdpChoice).
  if (op == "_scaled_dot_product_fused_attention_overrideable") {
    op = "scaled_dot_product_attention";
  }
  // ATen's convolution reaches PrivateUse1 through the overrideable ops,
  // which take the compiler's convolution attributes.
  if (op == "convolution_overrideable") op = "convolution";
  if (op == "convolution_backward_overrideable") op = "convolution_backward";
  return op;
}

Call ReadCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  Call call;
  call.op = GraphOpName(schema);
  call.overload = absl::StrCat(schema.name(), schema.overload_name().empty() ? "" : ".",
                               schema.overload_name());
  const auto& args = schema.arguments();
  const size_t first = stack.size() - args.size();
  auto add_input = [&](const at::Tensor& t, const std::string& name, int arg,
                       int list_index) {
    if (t.dim() == 0) call.has_zero_dim_device_tensor = true;
    call.inputs.push_back(t);
    call.slots.push_back(InputSlot{arg, list_index});
    call.input_names.push_back(name);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::Argument& arg = args[i];
    const c10::IValue& v = stack[first + i];
    const std::string& name = arg.name();
    // An absent optional tensor: None, or an undefined tensor (ATen's
    // _convolution passes an undefined bias on).
    if (v.isNone() || (v.isTensor() && !v.toTensor().defined())) continue;
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (arg.is_out()) {
        call.out_device = t.device();
        continue;
      }
      if (t.is_cpu() && t.dim() == 0) {
        // A Python scalar operand (`x * 2.0`): an attribute, in the key.
        SetScalarAttr(call, name, t.item());
        call.has_scalar_operand = true;
        continue;
      }
      add_input(t, name, static_cast<int>(i), -1);
    } else if (v.isTensorList()) {
      const c10::List<at::Tensor> list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        add_input(list[k], absl::StrCat(name, ".", k), static_cast<int>(i),
                  static_cast<int>(k));
      }
    } else if (v.isScalar()) {
      SetScalarAttr(call, name, v.toScalar());
      if (name == "other" || name == "exponent") call.has_scalar_operand = true;
    } else if (v.isString()) {
      (*call.node.mutable_attrs())[name].set_s(v.toStringRef());
    } else if (v.isIntList()) {
      (*call.node.mutable_attrs())[name].set_s(absl::StrJoin(v.toIntVector(), ","));
    } else if (v.isBool()) {
      (*call.node.mutable_attrs())[name].set_b(v.toBool());
    } else if (v.isBoolList()) {
      // convolution_backward's output_mask: "1,0,1", as fx_to_ir writes it.
      std::vector<std::string> bits;
      for (bool b : v.toBoolList()) bits.push_back(b ? "1" : "0");
      (*call.node.mutable_attrs())[name].set_s(absl::StrJoin(bits, ","));
    } else {
      call.unsupported = absl::StrCat("argument ", name, " of type ", v.tagKind());
    }
  }
  // Binary ops take a scalar second operand as "other" (pow's "exponent").
  auto& attrs = *call.node.mutable_attrs();
  // A scalar *first* operand (`mul_.Scalar`'s composite calls
  // mul.out(scalar, tensor)): commutative ops swap it into "other"; the rest
  // run on the CPU.
  if (call.inputs.size() == 1 && attrs.contains("self") && call.input_names[0] == "other") {
    const bool unit_alpha = !attrs.contains("alpha") ||
                            (attrs["alpha"].has_i() && attrs["alpha"].i() == 1) ||
                            (attrs["alpha"].has_f() && attrs["alpha"].f() == 1.0);
    const bool commutative = call.op == "mul" || call.op == "maximum" || call.op == "minimum" ||
                             call.op == "eq" || call.op == "ne" ||
                             (call.op == "add" && unit_alpha);
    if (commutative) {
      attrs["other"] = attrs["self"];
      attrs.erase("self");
      call.input_names[0] = "self";
    } else {
      call.unsupported = "scalar first operand";
    }
  }
  if (call.inputs.size() == 1 && !attrs.contains("other") && attrs.contains("exponent")) {
    attrs["other"] = attrs["exponent"];
    attrs.erase("exponent");
  }
  if (IsSdpa(call)) {
    // The debug mask is a flash-attention artifact our kernel does not make.
    if (attrs.contains("return_debug_mask") && attrs["return_debug_mask"].b()) {
      call.unsupported = "return_debug_mask";
    }
    attrs.erase("return_debug_mask");
  }
  return call;
}

// In-place self or out=: the argument the op writes, if any.
std::optional<int> DestinationArg(const c10::FunctionSchema& schema) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].alias_info() != nullptr && args[i].alias_info()->isWrite()) {
      return static_cast<int>(i);
    }
  }
  return std::nullopt;
}

bool IsConvolutionBackward(const Call& call) { return call.op == "convolution_backward"; }

namespace {

// The overrideable convolutions have no meta kernel: their results are
// convolution's and convolution_backward's, whose meta kernels exist. Only
// the gradients output_mask asks for are results (the program's outputs).
std::optional<std::vector<at::Tensor>> InferConvolutionOutputs(
    const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  const c10::IValue* args = &stack[stack.size() - n];
  auto meta = [](const c10::IValue& v) -> std::optional<at::Tensor> {
    if (v.isNone() || !v.toTensor().defined()) return std::nullopt;
    const at::Tensor& t = v.toTensor();
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
  };
  try {
    if (op.schema().name() == "aten::convolution_overrideable") {
      return std::vector<at::Tensor>{at::convolution(
          *meta(args[0]), *meta(args[1]), meta(args[2]), args[3].toIntVector(),
          args[4].toIntVector(), args[5].toIntVector(), args[6].toBool(),
          args[7].toIntVector(), args[8].toInt())};
    }
    const at::Tensor weight = args[2].toTensor();
    const bool transposed = args[6].toBool();
    const int64_t groups = args[8].toInt();
    const std::vector<bool> mask = args[9].toBoolList().vec();
    const std::vector<int64_t> bias = {transposed ? weight.size(1) * groups : weight.size(0)};
    const at::OptionalIntArrayRef bias_sizes =
        mask[2] ? at::OptionalIntArrayRef(bias) : at::OptionalIntArrayRef(std::nullopt);
    auto grads = at::convolution_backward(
        *meta(args[0]), *meta(args[1]), *meta(args[2]), bias_sizes, args[3].toIntVector(),
        args[4].toIntVector(), args[5].toIntVector(), transposed, args[7].toIntVector(),
        groups, {mask[0], mask[1], mask[2]});
    std::vector<at::Tensor> outs;
    for (const at::Tensor& g : {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)}) {
      if (g.defined()) outs.push_back(g);
    }
    if (outs.empty()) return std::nullopt;
    return outs;
  } catch (const std::exception&) {
    return std::nullopt;  // The CPU gives the user its own error.
  }
}

}  // namespace

// The functional results' sizes and dtypes, by running the op on meta
// tensors. sdpa's only computed result is its output [..., L, Ev]; the rest of
// its tuple (logsumexp, ...) is what a backward would need, and rbln's sdpa
// runs only without grad (see RblnFusedSdpChoice).
std::optional<std::vector<at::Tensor>> InferOutputs(const c10::OperatorHandle& op,
                                                    const torch::jit::Stack& stack,
                                                    const Call& call) {
  if (call.op == "convolution" || IsConvolutionBackward(call)) {
    return InferConvolutionOutputs(op, stack);
  }
  if (IsSdpa(call)) {
    const at::Tensor& q = call.inputs[0];
    const at::Tensor& v = call.inputs[2];
    std::vector<int64_t> sizes(q.sizes().begin(), q.sizes().end());
    sizes.back() = v.size(-1);
    return std::vector<at::Tensor>{
        at::empty(sizes, q.options().device(at::kMeta))};
  }
  const size_t n = op.schema().arguments().size();
  torch::jit::Stack meta(stack.end() - n, stack.end());
  auto to_meta = [](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
  };
  for (c10::IValue& v : meta) {
    if (v.isTensorList()) {
      std::vector<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(to_meta(t));
      v = c10::IValue(list);
      continue;
    }
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (t.is_cpu() && t.dim() == 0) continue;  // Scalars stay as they are.
    v = to_meta(t);
  }
  try {
    op.callBoxed(meta);
  } catch (const std::exception&) {
    // No meta kernel (c10::Error), or a Python meta kernel (torch._refs)
    // refused the arguments with its own exception type and message (amax
    // over an empty dim, bool floor division): let the CPU decide, so the
    // caller gets the CPU kernel's error.
    return std::nullopt;
  }
  std::vector<at::Tensor> outs;
  for (const c10::IValue& v : meta) {
    if (!v.isTensor()) return std::nullopt;
    outs.push_back(v.toTensor());
  }
  if (outs.empty()) return std::nullopt;
  return outs;
}

}  // namespace rbln::torch_backend

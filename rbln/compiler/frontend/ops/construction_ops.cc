// Tensor construction ops that reach the compiler after PyTorch's core ATen
// decompositions (full, zeros, ones and their *_like/new_* forms are in
// data_movement_ops.cc):
//   empty(), empty_permuted(), empty_strided(), new_empty(x),
//   new_empty_strided(x): the output's shape and dtype; PyTorch leaves the
//     memory uninitialised, the program writes zeros (every program output
//     is contiguous, so the strides and physical layout only matter to
//     views, which the graph expresses separately). x's values are unused.
//   scalar_tensor() "s": a 0-d tensor holding s cast to the output dtype.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/elementwise_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"

namespace rbln::compiler {
namespace elementwise {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;

// One output filled with `value` (an attribute cast to the output dtype).
absl::Status EmitFill(GraphImporter& im, const ir::Node& node,
                      const ir::Attribute& value) {
  if (node.outputs_size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s has one output, got %d", node.op(), node.outputs_size()));
  }
  ir::Node fill = node;
  fill.clear_inputs();  // new_empty's self only lends its dtype and device
  const ir::DType out = OutDType(node);
  return Emit(im, fill, {}, [&](OpBuilder& b, Location l, ValueRange) {
    return ScalarOperand(im, b, l, value, out, /*round=*/true);
  });
}

absl::Status ConvertEmpty(GraphImporter& im, const ir::Node& node) {
  const int self_inputs = node.op().rfind("new_", 0) == 0 ? 1 : 0;
  if (absl::Status s = CheckArity(node, self_inputs, 1); !s.ok()) return s;
  ir::Attribute zero;
  zero.set_i(0);
  return EmitFill(im, node, zero);
}

absl::Status ConvertScalarTensor(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 0, 1); !s.ok()) return s;
  const ir::Attribute* value = FindAttr(node, "s");
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        "op scalar_tensor needs the attr s (its value)");
  }
  if (node.outputs(0).type().shape_size() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op scalar_tensor: output %%%s must be 0-d", node.outputs(0).name()));
  }
  return EmitFill(im, node, *value);
}

void Register(OpConverterTable& table) {
  for (const char* op : {"empty", "empty_permuted", "empty_strided",
                         "new_empty", "new_empty_strided"}) {
    table[op] = &ConvertEmpty;
  }
  table["scalar_tensor"] = &ConvertScalarTensor;
}

}  // namespace
}  // namespace elementwise

void RegisterConstructionOps(OpConverterTable& table) {
  elementwise::Register(table);
}

}  // namespace rbln::compiler

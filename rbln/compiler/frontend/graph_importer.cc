#include "rbln/compiler/frontend/graph_importer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::OpBuilder;
using ::mlir::Location;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;

}  // namespace

absl::Status CheckOpsImplemented(const ir::Graph& graph,
                                 const OpConverterTable& converters) {
  // Every unsupported op is reported at once, as PyTorch lists them.
  // Each op once, in order of first use, quoted like a Python list of names.
  std::vector<std::string> missing;
  absl::flat_hash_set<std::string> listed;
  for (const ir::Node& node : graph.nodes()) {
    if (!converters.contains(node.op()) && listed.insert(node.op()).second) {
      missing.push_back(absl::StrFormat("'%s'", node.op()));
    }
  }
  if (!missing.empty()) {
    return absl::UnimplementedError(
        absl::StrFormat("The following operators are not implemented: [%s]",
                        absl::StrJoin(missing, ", ")));
  }
  return absl::OkStatus();
}

bool IsFloat(ir::DType t) {
  return t == ir::FLOAT16 || t == ir::BFLOAT16 || t == ir::FLOAT32;
}

bool IsNarrowInt(ir::DType t) {
  return t == ir::INT8 || t == ir::INT16 || t == ir::UINT8;
}

bool IsIntegral(ir::DType t) {
  return t == ir::INT32 || t == ir::INT64 || IsNarrowInt(t);
}

double FloatAttr(const ir::Node& node, const std::string& name, double dflt) {
  auto it = node.attrs().find(name);
  if (it == node.attrs().end()) return dflt;
  if (it->second.value_case() == ir::Attribute::kI) return it->second.i();
  return it->second.f();
}

int64_t IntAttr(const ir::Node& node, const std::string& name, int64_t dflt) {
  auto it = node.attrs().find(name);
  if (it == node.attrs().end()) return dflt;
  switch (it->second.value_case()) {
    case ir::Attribute::kF:
      return static_cast<int64_t>(it->second.f());
    case ir::Attribute::kB:
      return it->second.b() ? 1 : 0;
    default:
      return it->second.i();
  }
}

bool BoolAttr(const ir::Node& node, const std::string& name, bool dflt) {
  auto it = node.attrs().find(name);
  if (it == node.attrs().end()) return dflt;
  if (it->second.value_case() == ir::Attribute::kI) return it->second.i() != 0;
  return it->second.b();
}

bool HasAttr(const ir::Node& node, const std::string& name) {
  return node.attrs().contains(name);
}

absl::StatusOr<std::vector<int64_t>> IntListAttr(const ir::Node& node,
                                                 const std::string& name) {
  std::vector<int64_t> values;
  auto it = node.attrs().find(name);
  if (it == node.attrs().end()) return values;
  if (it->second.value_case() != ir::Attribute::kS) {
    values.push_back(IntAttr(node, name, 0));
    return values;
  }
  for (absl::string_view part :
       absl::StrSplit(it->second.s(), ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: attr %s must be an int or comma-separated ints like "
          "\"2,3,-1\", got '%s'",
          node.op(), name, it->second.s()));
    }
    values.push_back(v);
  }
  return values;
}

Shape ShapeOf(const ir::TensorType& t) {
  return Shape(t.shape().begin(), t.shape().end());
}

Shape ShapeOf(mlir::Value ranked_tensor) {
  return ranked_tensor.getType().cast<mlir::RankedTensorType>().getShape().vec();
}

absl::Status CheckArity(const ir::Node& node, int inputs, int outputs) {
  if (node.inputs_size() != inputs || node.outputs_size() != outputs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes %d input(s) and %d output(s), got %d and %d", node.op(),
        inputs, outputs, node.inputs_size(), node.outputs_size()));
  }
  return absl::OkStatus();
}

Type GraphImporter::StorageType(ir::DType t) const {
  switch (t) {
    case ir::FLOAT16:
      return builder_.getF16Type();
    case ir::BFLOAT16:
      return builder_.getI16Type();
    case ir::FLOAT32:
      return builder_.getF32Type();
    case ir::INT32:
      return builder_.getI32Type();
    case ir::INT64:
      return builder_.getI64Type();
    case ir::BOOL:
      return builder_.getI8Type();  // PyTorch stores bool as one byte.
    case ir::INT8:
    case ir::UINT8:
      return builder_.getI8Type();
    case ir::INT16:
      return builder_.getI16Type();
    default:
      return Type();
  }
}

// Half types compute in f32 (opmath); the narrow integers in i32, where every
// uint8 value is non-negative, so the signed ops (division, comparison,
// min/max, int->float) give unsigned results, and truncation back to the
// storage width wraps as PyTorch's integer arithmetic does.
Type GraphImporter::ComputeType(ir::DType t) const {
  if (IsFloat(t)) return builder_.getF32Type();
  if (IsNarrowInt(t)) return builder_.getI32Type();
  return StorageType(t);
}

mlir::RankedTensorType GraphImporter::TensorTypeOf(
    const ir::TensorType& t) const {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  return mlir::RankedTensorType::get(shape, StorageType(t.dtype()));
}

Value GraphImporter::Bf16ToF32(OpBuilder& b, Value bits) const {
  Location l = loc();
  Value wide = b.create<mlir::arith::ExtUIOp>(l, b.getI32Type(), bits);
  Value sixteen = b.create<mlir::arith::ConstantIntOp>(l, 16, 32);
  Value shifted = b.create<mlir::arith::ShLIOp>(l, wide, sixteen);
  return b.create<mlir::arith::BitcastOp>(l, b.getF32Type(), shifted);
}

// Round to nearest even, NaN -> 0x7FC0: c10::BFloat16's rounding.
Value GraphImporter::F32ToBf16(OpBuilder& b, Value f) const {
  Location l = loc();
  auto i32 = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 32);
  };
  Value u = b.create<mlir::arith::BitcastOp>(l, b.getI32Type(), f);
  Value lsb = b.create<mlir::arith::AndIOp>(
      l, b.create<mlir::arith::ShRUIOp>(l, u, i32(16)), i32(1));
  Value bias = b.create<mlir::arith::AddIOp>(l, i32(0x7fff), lsb);
  Value rounded = b.create<mlir::arith::ShRUIOp>(
      l, b.create<mlir::arith::AddIOp>(l, u, bias), i32(16));
  Value is_nan = b.create<mlir::arith::CmpFOp>(l, mlir::arith::CmpFPredicate::UNO, f, f);
  Value bits = b.create<mlir::arith::SelectOp>(l, is_nan, i32(0x7fc0), rounded);
  return b.create<mlir::arith::TruncIOp>(l, b.getI16Type(), bits);
}

Value GraphImporter::ToCompute(OpBuilder& b, Value v, ir::DType t) const {
  switch (t) {
    case ir::FLOAT16:
      return b.create<mlir::arith::ExtFOp>(loc(), b.getF32Type(), v);
    case ir::BFLOAT16:
      return Bf16ToF32(b, v);
    case ir::INT8:
    case ir::INT16:
      return b.create<mlir::arith::ExtSIOp>(loc(), b.getI32Type(), v);
    case ir::UINT8:
      return b.create<mlir::arith::ExtUIOp>(loc(), b.getI32Type(), v);
    default:
      return v;
  }
}

Value GraphImporter::FromCompute(OpBuilder& b, Value v, ir::DType t) const {
  switch (t) {
    case ir::FLOAT16:
      return b.create<mlir::arith::TruncFOp>(loc(), b.getF16Type(), v);
    case ir::BFLOAT16:
      return F32ToBf16(b, v);
    case ir::INT8:
    case ir::INT16:
    case ir::UINT8:
      return b.create<mlir::arith::TruncIOp>(loc(), StorageType(t), v);
    default:
      return v;
  }
}

Value GraphImporter::CastCompute(OpBuilder& b, Value v, ir::DType from,
                                 ir::DType to) const {
  Type target = ComputeType(to);
  if (v.getType() == target) return v;
  Location l = loc();
  const bool from_float = IsFloat(from), to_float = IsFloat(to);
  if (!from_float && to_float) {
    if (from == ir::BOOL) return b.create<mlir::arith::UIToFPOp>(l, target, v);
    return b.create<mlir::arith::SIToFPOp>(l, target, v);
  }
  if (from_float && !to_float) return b.create<mlir::arith::FPToSIOp>(l, target, v);
  // Integer width change (both float compute types are f32).
  const unsigned from_w = v.getType().getIntOrFloatBitWidth();
  const unsigned to_w = target.getIntOrFloatBitWidth();
  if (to_w > from_w) {
    if (from == ir::BOOL) return b.create<mlir::arith::ExtUIOp>(l, target, v);
    return b.create<mlir::arith::ExtSIOp>(l, target, v);
  }
  return b.create<mlir::arith::TruncIOp>(l, target, v);
}

Value GraphImporter::ComputeConstant(OpBuilder& b, double value,
                                     ir::DType t) const {
  Type type = ComputeType(t);
  if (IsFloat(t)) {
    return b.create<mlir::arith::ConstantOp>(
        loc(), b.getF32FloatAttr(static_cast<float>(value)));
  }
  return b.create<mlir::arith::ConstantOp>(
      loc(), b.getIntegerAttr(type, static_cast<int64_t>(value)));
}

absl::Status GraphImporter::EmitNode(const ir::Node& node) {
  auto it = converters_.find(node.op());
  if (it == converters_.end()) {
    return absl::UnimplementedError(absl::StrFormat(
        "The following operators are not implemented: [%s]", node.op()));
  }
  return it->second(*this, node);
}

void GraphImporter::DeclareReportFunction(const char* name, int num_args) {
  if (!declared_report_functions_.insert(name).second) return;
  OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToStart(module_.getBody());
  auto decl = builder_.create<mlir::func::FuncOp>(
      loc(), name,
      builder_.getFunctionType(
          llvm::SmallVector<Type>(num_args, builder_.getI64Type()), {}));
  decl.setPrivate();
}

Value GraphImporter::CheckedIndex(OpBuilder& b, Value index, int64_t bound,
                                  bool wrap_negative) {
  Location l = loc();
  // func.func private @rbln_report_index_error(i64, i64, i64)
  DeclareReportFunction(kReportIndexErrorSymbol, 3);
  auto i64 = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
  };
  Value v = index;
  if (v.getType().getIntOrFloatBitWidth() < 64) {
    v = b.create<mlir::arith::ExtSIOp>(l, b.getI64Type(), v);
  }
  Value below = b.create<mlir::arith::CmpIOp>(
      l, mlir::arith::CmpIPredicate::slt, v, i64(wrap_negative ? -bound : 0));
  Value above = b.create<mlir::arith::CmpIOp>(
      l, mlir::arith::CmpIPredicate::sge, v, i64(bound));
  Value bad = b.create<mlir::arith::OrIOp>(l, below, above);
  const int64_t site = current_node_;
  b.create<mlir::scf::IfOp>(l, bad, [&](OpBuilder& then, Location tl) {
    then.create<mlir::func::CallOp>(
        tl, kReportIndexErrorSymbol, mlir::TypeRange{},
        ValueRange{i64(site), v, i64(wrap_negative ? -bound : bound)});
    then.create<mlir::scf::YieldOp>(tl);
  });
  if (wrap_negative) {
    Value negative = b.create<mlir::arith::CmpIOp>(
        l, mlir::arith::CmpIPredicate::slt, v, i64(0));
    v = b.create<mlir::arith::SelectOp>(
        l, negative, b.create<mlir::arith::AddIOp>(l, v, i64(bound)), v);
    below = b.create<mlir::arith::CmpIOp>(l, mlir::arith::CmpIPredicate::slt,
                                          v, i64(0));
  }
  Value clamped = b.create<mlir::arith::SelectOp>(
      l, below, i64(0),
      b.create<mlir::arith::SelectOp>(l, above, i64(bound - 1), v));
  return b.create<mlir::arith::IndexCastOp>(l, b.getIndexType(), clamped);
}

Value GraphImporter::CheckedDivisor(OpBuilder& b, Value divisor) {
  Location l = loc();
  // func.func private @rbln_report_zero_division(i64)
  DeclareReportFunction(kReportZeroDivisionSymbol, 1);
  Type t = divisor.getType();
  Value zero = b.create<mlir::arith::ConstantOp>(l, b.getIntegerAttr(t, 0));
  Value is_zero = b.create<mlir::arith::CmpIOp>(
      l, mlir::arith::CmpIPredicate::eq, divisor, zero);
  const int64_t site = current_node_;
  b.create<mlir::scf::IfOp>(l, is_zero, [&](OpBuilder& then, Location tl) {
    Value site_value = then.create<mlir::arith::ConstantIntOp>(tl, site, 64);
    then.create<mlir::func::CallOp>(tl, kReportZeroDivisionSymbol,
                                    mlir::TypeRange{}, ValueRange{site_value});
    then.create<mlir::scf::YieldOp>(tl);
  });
  Value one = b.create<mlir::arith::ConstantOp>(l, b.getIntegerAttr(t, 1));
  return b.create<mlir::arith::SelectOp>(l, is_zero, one, divisor);
}

absl::StatusOr<Value> GraphImporter::Elementwise(const ir::Node& node,
                                                 const ScalarBody& body) {
  return Elementwise(
      node,
      std::vector<ir::DType>(node.inputs_size(), node.outputs(0).type().dtype()),
      body);
}

absl::StatusOr<Value> GraphImporter::Elementwise(
    const ir::Node& node, const std::vector<ir::DType>& operand_dtypes,
    const ScalarBody& body) {
  if (operand_dtypes.size() != static_cast<size_t>(node.inputs_size())) {
    return absl::InternalError(absl::StrFormat(
        "op %s: %d operand dtypes for %d inputs", node.op(),
        operand_dtypes.size(), node.inputs_size()));
  }
  const ir::TensorType& out_type = node.outputs(0).type();
  const int rank = out_type.shape_size();
  std::vector<mlir::AffineMap> maps;
  std::vector<Value> inputs;
  std::vector<ir::DType> in_dtypes;
  for (const std::string& name : node.inputs()) {
    const ir::TensorType& t = TypeOf(name);
    const int in_rank = t.shape_size();
    if (in_rank > rank) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: input %%%s has rank %d, more than the output's %d", node.op(),
          name, in_rank, rank));
    }
    std::vector<mlir::AffineExpr> exprs;
    for (int i = 0; i < in_rank; ++i) {
      const int j = i + rank - in_rank;
      const int64_t in_dim = t.shape(i), out_dim = out_type.shape(j);
      if (in_dim == out_dim) {
        exprs.push_back(mlir::getAffineDimExpr(j, context_));
      } else if (in_dim == 1) {
        exprs.push_back(mlir::getAffineConstantExpr(0, context_));
      } else {
        return absl::InvalidArgumentError(absl::StrFormat(
            "op %s: input %%%s of shape %s does not broadcast to %s", node.op(),
            name, ir::TypeToText(t), ir::TypeToText(out_type)));
      }
    }
    maps.push_back(mlir::AffineMap::get(rank, 0, exprs, context_));
    inputs.push_back(ValueOf(name));
    in_dtypes.push_back(t.dtype());
  }
  maps.push_back(builder_.getMultiDimIdentityMap(rank));
  std::vector<mlir::utils::IteratorType> iterators(
      rank, mlir::utils::IteratorType::parallel);
  mlir::RankedTensorType result_type = TensorTypeOf(out_type);
  Value init = builder_.create<mlir::tensor::EmptyOp>(
      loc(), result_type.getShape(), result_type.getElementType());
  const ir::DType out_dtype = out_type.dtype();
  auto generic = builder_.create<mlir::linalg::GenericOp>(
      loc(), mlir::TypeRange{result_type}, inputs, ValueRange{init}, maps,
      iterators, [&](OpBuilder& b, Location l, ValueRange args) {
        std::vector<Value> computed;
        for (size_t i = 0; i < in_dtypes.size(); ++i) {
          const ir::DType in = in_dtypes[i], operand = operand_dtypes[i];
          Value v = CastCompute(b, ToCompute(b, args[i], in), in, operand);
          if (IsIntegral(in) &&
              (operand == ir::FLOAT16 || operand == ir::BFLOAT16)) {
            v = ToCompute(b, FromCompute(b, v, operand), operand);
          }
          computed.push_back(v);
        }
        Value r = body(b, l, computed);
        b.create<mlir::linalg::YieldOp>(l, FromCompute(b, r, out_dtype));
      });
  return generic.getResult(0);
}

absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> GraphImporter::Import() {
  if (absl::Status s = ir::Validate(graph_); !s.ok()) return s;

  if (absl::Status s = CheckOpsImplemented(graph_, converters_); !s.ok()) {
    return s;
  }

  std::vector<Type> arg_types;
  for (const ir::Value& v : graph_.inputs()) {
    if (!StorageType(v.type().dtype())) {
      return absl::InvalidArgumentError("unknown dtype of input %" + v.name());
    }
    arg_types.push_back(TensorTypeOf(v.type()));
  }
  // Output types are known once nodes are converted; collect them first.
  absl::flat_hash_map<std::string, ir::TensorType> defined;
  for (const ir::Value& v : graph_.inputs()) defined[v.name()] = v.type();
  for (const ir::Node& node : graph_.nodes()) {
    for (const ir::Value& v : node.outputs()) defined[v.name()] = v.type();
  }
  std::vector<Type> result_types;
  for (const std::string& out : graph_.outputs()) {
    result_types.push_back(TensorTypeOf(defined.at(out)));
    arg_types.push_back(result_types.back());
  }
  // Updates (graph.proto) are results too, written into their inputs'
  // arguments (kUpdatedByResultAttr; the output binding pass), with no argument of their own.
  std::vector<int64_t> updated_inputs;
  for (const ir::Update& u : graph_.updates()) {
    for (int i = 0; i < graph_.inputs_size(); ++i) {
      if (graph_.inputs(i).name() == u.input()) updated_inputs.push_back(i);
    }
    result_types.push_back(TensorTypeOf(defined.at(u.input())));
  }

  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc());
  module_ = *module;
  builder_.setInsertionPointToEnd(module->getBody());
  auto func = builder_.create<mlir::func::FuncOp>(
      loc(), kKernelName, builder_.getFunctionType(arg_types, result_types));
  func->setAttr("llvm.emit_c_interface", builder_.getUnitAttr());
  const int num_inputs = graph_.inputs_size();
  // Inputs are read-only unless the graph updates them (set below): one-shot
  // bufferization takes an unmarked function argument as writable and would
  // reuse an input's buffer for a result computed in place (a sort's values,
  // a scatter's destination), changing the caller's tensor.
  for (int i = 0; i < num_inputs; ++i) {
    func.setArgAttr(i, "bufferization.writable", builder_.getBoolAttr(false));
  }
  for (int i = 0; i < graph_.outputs_size(); ++i) {
    func.setArgAttr(num_inputs + i, "bufferization.writable",
                    builder_.getBoolAttr(true));
  }
  mlir::Block* entry = func.addEntryBlock();
  builder_.setInsertionPointToStart(entry);
  for (int i = 0; i < num_inputs; ++i) {
    Define(graph_.inputs(i), entry->getArgument(i));
  }
  for (int i = 0; i < graph_.nodes_size(); ++i) {
    const ir::Node& node = graph_.nodes(i);
    current_node_ = i;
    if (absl::Status s = converters_.at(node.op())(*this, node); !s.ok()) {
      return s;
    }
  }
  current_node_ = -1;
  // Each output must come from its own op so that it can write into its
  // output buffer: copy graph inputs and repeated outputs.
  std::vector<Value> results;
  absl::flat_hash_set<std::string> returned;
  for (const std::string& out : graph_.outputs()) {
    Value v = ValueOf(out);
    if (mlir::isa<mlir::BlockArgument>(v) || !returned.insert(out).second) {
      ir::Node copy;
      copy.set_op("copy");
      copy.add_inputs(out);
      *copy.add_outputs() = ir::Value();
      copy.mutable_outputs(0)->set_name(out);
      *copy.mutable_outputs(0)->mutable_type() = TypeOf(out);
      absl::StatusOr<Value> copied = Elementwise(
          copy, [](OpBuilder&, Location, ValueRange x) { return x[0]; });
      if (!copied.ok()) return copied.status();
      v = *copied;
    }
    results.push_back(v);
  }
  // Each update: its value, which BindOutputs computes in the input's
  // argument in place where that is safe; a value that is an input or
  // another result as well is copied into the input (it must be an op of
  // its own).
  for (int j = 0; j < graph_.updates_size(); ++j) {
    const int i = static_cast<int>(updated_inputs[j]);
    Value arg = entry->getArgument(i);
    const std::string& name = graph_.updates(j).value();
    Value v = ValueOf(name);
    // An input updated with its own value (a no-op the converters left, e.g.
    // a clone) is returned as is: bufferization drops it.
    if (v != arg && (mlir::isa<mlir::BlockArgument>(v) || !returned.insert(name).second)) {
      v = builder_.create<mlir::linalg::CopyOp>(loc(), ValueRange{v}, ValueRange{arg})
              .getResult(0);
    }
    results.push_back(v);
    func.setArgAttr(i, "bufferization.writable", builder_.getBoolAttr(true));
    func.setArgAttr(i, kUpdatedByResultAttr,
                    builder_.getI64IntegerAttr(graph_.outputs_size() + j));
  }
  builder_.create<mlir::func::ReturnOp>(loc(), results);
  if (mlir::failed(mlir::verify(*module))) {
    return absl::InternalError(absl::StrFormat(
        "frontend produced an invalid module for graph %s", graph_.name()));
  }
  return module;
}

}  // namespace rbln::compiler

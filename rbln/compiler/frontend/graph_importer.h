// The graph importer: turns graph IR into one `func.func @kernel` of linalg
// on tensors (see frontend.h for the calling convention). Op converters, one
// file per op family under ops/, use its helpers to emit their ops.
#ifndef RBLN_COMPILER_FRONTEND_GRAPH_IMPORTER_H_
#define RBLN_COMPILER_FRONTEND_GRAPH_IMPORTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler {

bool IsFloat(ir::DType t);
// int8, int16, uint8: stored narrow, computed in i32 (ComputeType).
bool IsNarrowInt(ir::DType t);
// Every integer dtype but bool.
bool IsIntegral(ir::DType t);

class GraphImporter;
// Converts one node (its outputs Define()d); registered per op name.
using OpConverter = absl::Status (*)(GraphImporter&, const ir::Node&);
using OpConverterTable = absl::flat_hash_map<std::string, OpConverter>;

// Unimplemented, naming every op of `graph` without a converter in
// `converters` once ("The following operators are not implemented: [...]").
absl::Status CheckOpsImplemented(const ir::Graph& graph,
                                 const OpConverterTable& converters);

// Emits the kernel for one graph. Values are tensors of the storage type;
// scalar computation in linalg bodies uses the compute type (f32 for floats).
class GraphImporter {
 public:
  // `converters` (the frontend's table, frontend.cc) outlives the importer.
  GraphImporter(const ir::Graph& graph, mlir::MLIRContext* context,
                const OpConverterTable& converters)
      : graph_(graph),
        context_(context),
        converters_(converters),
        builder_(context) {}

  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> Import();

  // --- Used by op converters. ---
  mlir::OpBuilder& builder() { return builder_; }
  mlir::MLIRContext* context() const { return context_; }
  // The module being built (for declarations of called functions).
  mlir::ModuleOp module() const { return module_; }
  mlir::Location loc() const { return builder_.getUnknownLoc(); }
  const ir::TensorType& TypeOf(const std::string& name) const {
    return types_.at(name);
  }
  mlir::Value ValueOf(const std::string& name) const { return values_.at(name); }
  void Define(const ir::Value& v, mlir::Value tensor) {
    values_[v.name()] = tensor;
    types_[v.name()] = v.type();
  }

  mlir::Type StorageType(ir::DType t) const;
  mlir::Type ComputeType(ir::DType t) const;
  mlir::RankedTensorType TensorTypeOf(const ir::TensorType& t) const;

  // storage scalar -> compute scalar of `t`.
  mlir::Value ToCompute(mlir::OpBuilder& b, mlir::Value v, ir::DType t) const;
  // compute scalar of `t` -> storage scalar of `t`.
  mlir::Value FromCompute(mlir::OpBuilder& b, mlir::Value v, ir::DType t) const;
  // compute scalar of `from` -> compute scalar of `to` (type promotion).
  mlir::Value CastCompute(mlir::OpBuilder& b, mlir::Value v, ir::DType from, ir::DType to) const;
  mlir::Value ComputeConstant(mlir::OpBuilder& b, double value, ir::DType t) const;

  // A gather index (an i32/i64 scalar) checked against [0, bound) at run
  // time: out of range calls kReportIndexErrorSymbol with the current node's
  // position and goes on with the index clamped into range, so the kernel
  // never reads out of bounds (SPEC P8). Returns an `index` value.
  // `bound` must be positive. With `wrap_negative` (advanced indexing, put)
  // [-bound, 0) counts from the end, as in PyTorch, and the report says so
  // with a negative bound.
  mlir::Value CheckedIndex(mlir::OpBuilder& b, mlir::Value index,
                           int64_t bound, bool wrap_negative = false);
  // An integer divisor checked for zero at run time: zero calls
  // kReportZeroDivisionSymbol with the current node's position (ATen raises
  // ZeroDivisionError there) and is replaced by 1, so the kernel never
  // traps. Returns the divisor to divide by.
  mlir::Value CheckedDivisor(mlir::OpBuilder& b, mlir::Value divisor);
  // Converts `node` with the registered converter of its op: composite ops
  // (attention) emit their steps as internal nodes with their own names.
  absl::Status EmitNode(const ir::Node& node);

  // The position of the node being converted in the graph.
  int current_node() const { return current_node_; }

  // A linalg.generic over the output's shape, broadcasting inputs NumPy-style.
  // `body` gets the inputs in the output's compute type and returns the
  // result in that type.
  using ScalarBody =
      std::function<mlir::Value(mlir::OpBuilder&, mlir::Location, mlir::ValueRange computed)>;
  absl::StatusOr<mlir::Value> Elementwise(const ir::Node& node,
                                    const ScalarBody& body);
  // Same, but input i reaches `body` in the compute type of
  // `operand_dtypes[i]` (comparisons compare in the inputs' promoted type,
  // masks are tested as they are); `body` still returns the output's compute
  // type. Integer inputs converted to a half type are rounded to it first, as
  // PyTorch casts them to the common dtype before computing.
  absl::StatusOr<mlir::Value> Elementwise(
      const ir::Node& node, const std::vector<ir::DType>& operand_dtypes,
      const ScalarBody& body);

 private:
  mlir::Value Bf16ToF32(mlir::OpBuilder& b, mlir::Value bits) const;
  mlir::Value F32ToBf16(mlir::OpBuilder& b, mlir::Value f) const;
  // Declares `func.func private @name(i64 x num_args)` once per module.
  void DeclareReportFunction(const char* name, int num_args);

  const ir::Graph& graph_;
  mlir::MLIRContext* context_;
  const OpConverterTable& converters_;
  mlir::ModuleOp module_;
  absl::flat_hash_set<std::string> declared_report_functions_;
  int current_node_ = -1;
  mutable mlir::OpBuilder builder_;  // Type getters are non-const in MLIR.
  absl::flat_hash_map<std::string, mlir::Value> values_;
  absl::flat_hash_map<std::string, ir::TensorType> types_;
};

// Converts one node; registered per op name.
// Helpers shared by converters.
using Shape = std::vector<int64_t>;
Shape ShapeOf(const ir::TensorType& t);
Shape ShapeOf(mlir::Value ranked_tensor);
double FloatAttr(const ir::Node& node, const std::string& name, double dflt);
int64_t IntAttr(const ir::Node& node, const std::string& name, int64_t dflt);
bool BoolAttr(const ir::Node& node, const std::string& name, bool dflt);
// An int list attribute: a string of comma-separated ints ("2,3,-1", "" for
// an empty list) or one int.
absl::StatusOr<std::vector<int64_t>> IntListAttr(const ir::Node& node,
                                                 const std::string& name);
bool HasAttr(const ir::Node& node, const std::string& name);
absl::Status CheckArity(const ir::Node& node, int inputs, int outputs);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_GRAPH_IMPORTER_H_

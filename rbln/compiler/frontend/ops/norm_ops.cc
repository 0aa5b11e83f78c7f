// Batch and group normalization (layer_norm and rms_norm are in
// reduction_ops.cc).
//
// Statistics are two-pass reductions (the mean, then the mean of squared
// deviations: the biased variance) in f32, batch norm's in ATen's acc_type
// (f64 for float32 input, as its CPU kernel); outputs are (x - mean) * invstd *
// weight + bias in f32, rounded once to the output dtype. (ATen's CPU
// kernels fold the affine part into x * scale + (bias - mean * scale),
// which cancels catastrophically when invstd is large: a constant group
// with eps=1e-12 gives bias plus noise of |mean| * 1e6 * 2^-24 there, not
// bias; PyTorch's decompositions subtract the mean first, as here.)
//
// Batch norm, every ATen form a graph carries:
//   _native_batch_norm_legit_functional(x, weight?, bias?, running_mean,
//     running_var) "training", "momentum", "eps"
//     -> (out, save_mean, save_invstd, running_mean', running_var')
//   _native_batch_norm_legit_no_training(x, weight?, bias?, running_mean,
//     running_var) "momentum", "eps" -> (out, save_mean[0], save_invstd[0])
//   _native_batch_norm_legit(x, weight?, bias?) "training", "momentum",
//     "eps" (the no_stats overload) -> (out, save_mean, save_invstd)
//   native_batch_norm(x, weight?, bias?, running_mean?, running_var?)
//     "training", "momentum", "eps" -> (out, save_mean, save_invstd)
//   _batch_norm_with_update_functional(x, weight?, bias?, running_mean,
//     running_var) "momentum", "eps" -> (out, save_mean, save_invstd,
//     running_mean', running_var') (ATen's empty uint8 reserve is not a
//     graph value)
// Training normalizes with the batch statistics over every dim but 1, and
// the new running stats are (1 - momentum) * running + momentum * batch
// statistic (the variance unbiased); evaluation normalizes with the running
// stats, leaves them as they are and returns empty save_mean/save_invstd.
// An absent optional input is named by its "has_<name>" attribute false
// (fx_to_ir); otherwise inputs fill the optional slots in order.
//
// native_group_norm(x[N, C, *], weight?, bias?) "N", "C", "HxW", "group",
//   "eps" -> (out, mean[N, group], rstd[N, group]).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;
using namespace nn;  // NOLINT: the NN op builders.

// The optional inputs of a node, by schema name: each present unless its
// "has_<name>" attribute is false, filled from the inputs after x in order.
absl::StatusOr<std::vector<const std::string*>> OptionalInputs(
    const ir::Node& node, const std::vector<std::string>& names) {
  std::vector<const std::string*> found(names.size(), nullptr);
  int next = 1;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!BoolAttr(node, "has_" + names[i], true)) continue;
    if (next < node.inputs_size()) found[i] = &node.inputs(next++);
  }
  if (next != node.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %d inputs do not fit (x, %s) with the absent ones named by "
        "has_<name> attributes",
        node.op(), node.inputs_size(), absl::StrJoin(names, ", ")));
  }
  return found;
}

Value ReadCompute(GraphImporter& im, OpBuilder& b, Value v,
                  const std::string* name) {
  return im.ToCompute(b, v, im.TypeOf(*name).dtype());
}

// (x - mean) * invstd [* weight] [+ bias] in f32, from a body's arguments
// (x, mean, invstd, weight?, bias?).
Value Normalized(GraphImporter& im, OpBuilder& b, Location l, ValueRange a,
                 ir::DType t, const std::string* weight,
                 const std::string* bias) {
  Value v = b.create<arith::MulFOp>(
      l, b.create<arith::SubFOp>(l, im.ToCompute(b, a[0], t), a[1]), a[2]);
  int next = 3;
  if (weight) {
    v = b.create<arith::MulFOp>(l, v, ReadCompute(im, b, a[next++], weight));
  }
  if (bias) {
    v = b.create<arith::AddFOp>(l, v, ReadCompute(im, b, a[next++], bias));
  }
  return v;
}

absl::Status CheckChannelVector(GraphImporter& im, const ir::Node& node,
                                const std::string* input, int64_t channels) {
  if (input == nullptr) return absl::OkStatus();
  if (absl::Status s = CheckFloatTensor(im, node, *input, "input"); !s.ok()) {
    return s;
  }
  if (ShapeOf(im.TypeOf(*input)) != Shape{channels}) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: %%%s is %s, expected one value per channel ([%d])", node.op(),
        *input, ir::TypeToText(im.TypeOf(*input)), channels));
  }
  return absl::OkStatus();
}

// --- Batch norm. -------------------------------------------------------------

enum class BatchNormForm { kFunctional, kNoTraining, kNoStats, kNative,
                           kWithUpdate };

BatchNormForm FormOf(const std::string& op) {
  if (op == "_native_batch_norm_legit_functional") {
    return BatchNormForm::kFunctional;
  }
  if (op == "_native_batch_norm_legit_no_training") {
    return BatchNormForm::kNoTraining;
  }
  if (op == "_batch_norm_with_update_functional") {
    return BatchNormForm::kWithUpdate;
  }
  if (op == "native_batch_norm") return BatchNormForm::kNative;
  return BatchNormForm::kNoStats;
}

absl::Status ConvertBatchNorm(GraphImporter& im, const ir::Node& node) {
  const BatchNormForm form = FormOf(node.op());
  std::vector<std::string> names = {"weight", "bias"};
  if (form != BatchNormForm::kNoStats) {
    names.insert(names.end(), {"running_mean", "running_var"});
  }
  if (node.inputs_size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op %s needs an input", node.op()));
  }
  absl::StatusOr<std::vector<const std::string*>> optional =
      OptionalInputs(node, names);
  if (!optional.ok()) return optional.status();
  const std::string* weight = (*optional)[0];
  const std::string* bias = (*optional)[1];
  const std::string* running_mean =
      optional->size() > 2 ? (*optional)[2] : nullptr;
  const std::string* running_var =
      optional->size() > 3 ? (*optional)[3] : nullptr;
  const std::string& x = node.inputs(0);
  if (absl::Status s = CheckFloatTensor(im, node, x, "input"); !s.ok()) {
    return s;
  }
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape xs = ShapeOf(im.TypeOf(x));
  if (xs.size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: the input must have at least 2 dims [N, C, ...], got [%s]",
        node.op(), absl::StrJoin(xs, ", ")));
  }
  const int rank = xs.size();
  const int64_t channels = xs[1];
  for (const std::string* in : *optional) {
    if (absl::Status s = CheckChannelVector(im, node, in, channels); !s.ok()) {
      return s;
    }
  }
  if ((running_mean == nullptr) != (running_var == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: running_mean and running_var must both be given or both be "
        "absent",
        node.op()));
  }
  bool training;
  switch (form) {
    case BatchNormForm::kNoTraining:
      training = false;
      break;
    case BatchNormForm::kWithUpdate:
      training = true;
      break;
    default:
      training = BoolAttr(node, "training", false);
  }
  if (!training && running_mean == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: running_mean must be defined in evaluation mode", node.op()));
  }
  const bool updates_stats =
      form == BatchNormForm::kFunctional || form == BatchNormForm::kWithUpdate;
  const int num_outputs = updates_stats ? 5 : 3;
  if (node.outputs_size() != num_outputs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s has %d outputs, got %d", node.op(), num_outputs,
        node.outputs_size()));
  }
  if (absl::Status s = CheckOutput(node, 0, xs, t); !s.ok()) return s;
  const Shape stat_shape = training ? Shape{channels} : Shape{0};
  for (int i = 1; i < 3; ++i) {
    if (ShapeOf(node.outputs(i).type()) != stat_shape ||
        !IsFloat(node.outputs(i).type().dtype())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: output %%%s is %s, expected a float tensor of shape [%s]",
          node.op(), node.outputs(i).name(),
          ir::TypeToText(node.outputs(i).type()),
          absl::StrJoin(stat_shape, ", ")));
    }
  }
  for (int i = 3; i < num_outputs; ++i) {
    const std::string* stat = i == 3 ? running_mean : running_var;
    if (stat == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: the running stats are inputs of this form", node.op()));
    }
    if (absl::Status s = CheckOutput(node, i, {channels},
                                     im.TypeOf(*stat).dtype());
        !s.ok()) {
      return s;
    }
  }
  const double eps = FloatAttr(node, "eps", 1e-5);
  const double momentum = FloatAttr(node, "momentum", 0.1);
  int64_t count = xs[0];
  for (int d = 2; d < rank; ++d) count *= xs[d];
  if (training && count <= 1 && running_mean != nullptr) {
    // ATen's batch_norm checks this before computing (an unbiased variance
    // of one value is undefined).
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: Expected more than 1 value per channel when training, got "
        "input size [%s]",
        node.op(), absl::StrJoin(xs, ", ")));
  }

  const Type f32 = im.builder().getF32Type();
  const AffineMap id = IdentityMap(im, rank);
  const AffineMap channel = DimsMap(im, rank, {1});
  std::vector<IteratorType> reduce(rank, IteratorType::reduction);
  reduce[1] = IteratorType::parallel;
  Value xv = im.ValueOf(x);
  // mean and invstd per channel (f32), from the batch or the running stats.
  // Batch statistics accumulate in ATen's acc_type: f64 for float32 input
  // (values near the float32 limit sum past it), f32 for half types.
  const Type acc = t == ir::FLOAT32 ? im.builder().getF64Type() : f32;
  auto acc_const = [acc](OpBuilder& b, Location l, double v) -> Value {
    return b.create<arith::ConstantOp>(l, b.getFloatAttr(acc, v));
  };
  auto widen = [&](OpBuilder& b, Location l, Value v) -> Value {
    return acc == f32 ? v : b.create<arith::ExtFOp>(l, acc, v);
  };
  auto narrow = [&](OpBuilder& b, Location l, Value v) -> Value {
    return acc == f32 ? v : b.create<arith::TruncFOp>(l, f32, v);
  };
  Value mean, invstd, batch_mean, var_sum;
  if (training) {
    Value sum = Generic(im, xv, Filled(im, {channels}, acc, 0.0),
                        {id, channel}, reduce,
                        [&](OpBuilder& b, Location l, ValueRange a) {
                          return llvm::SmallVector<Value>{
                              b.create<arith::AddFOp>(
                                  l, a[1], widen(b, l, im.ToCompute(b, a[0], t)))};
                        })[0];
    batch_mean = Parallel(im, sum, {IdentityMap(im, 1)}, {channels}, acc,
                          [&](OpBuilder& b, Location l, ValueRange a) {
                            return b.create<arith::DivFOp>(
                                l, a[0], acc_const(b, l, count));
                          });
    var_sum = Generic(im, ValueRange{xv, batch_mean},
                      Filled(im, {channels}, acc, 0.0), {id, channel, channel},
                      reduce, [&](OpBuilder& b, Location l, ValueRange a) {
                        Value d = b.create<arith::SubFOp>(
                            l, widen(b, l, im.ToCompute(b, a[0], t)), a[1]);
                        return llvm::SmallVector<Value>{b.create<arith::AddFOp>(
                            l, a[2], b.create<arith::MulFOp>(l, d, d))};
                      })[0];
    mean = Parallel(im, batch_mean, {IdentityMap(im, 1)}, {channels}, f32,
                    [&](OpBuilder& b, Location l, ValueRange a) {
                      return narrow(b, l, a[0]);
                    });
    invstd = Parallel(im, var_sum, {IdentityMap(im, 1)}, {channels}, f32,
                      [&](OpBuilder& b, Location l, ValueRange a) {
                        Value var = b.create<arith::DivFOp>(
                            l, a[0], acc_const(b, l, count));
                        return narrow(
                            b, l,
                            b.create<arith::DivFOp>(
                                l, acc_const(b, l, 1.0),
                                b.create<mlir::math::SqrtOp>(
                                    l, b.create<arith::AddFOp>(
                                           l, var, acc_const(b, l, eps)))));
                      });
  } else {
    mean = ToComputeTensor(im, im.ValueOf(*running_mean),
                           im.TypeOf(*running_mean).dtype());
    const ir::DType var_t = im.TypeOf(*running_var).dtype();
    invstd = Parallel(im, im.ValueOf(*running_var), {IdentityMap(im, 1)},
                      {channels}, f32,
                      [&](OpBuilder& b, Location l, ValueRange a) {
                        return b.create<arith::DivFOp>(
                            l, F32Const(b, l, 1.0),
                            b.create<mlir::math::SqrtOp>(
                                l, b.create<arith::AddFOp>(
                                       l, im.ToCompute(b, a[0], var_t),
                                       F32Const(b, l, eps))));
                      });
  }
  // y = (x - mean) * invstd * w + b.
  std::vector<Value> inputs = {xv, mean, invstd};
  std::vector<AffineMap> maps = {id, channel, channel};
  if (weight) {
    inputs.push_back(im.ValueOf(*weight));
    maps.push_back(channel);
  }
  if (bias) {
    inputs.push_back(im.ValueOf(*bias));
    maps.push_back(channel);
  }
  im.Define(node.outputs(0),
            Parallel(im, inputs, maps, xs, im.StorageType(t),
                     [&](OpBuilder& b, Location l, ValueRange a) {
                       return im.FromCompute(
                           b, Normalized(im, b, l, a, t, weight, bias), t);
                     }));
  if (training) {
    im.Define(node.outputs(1),
              ToStorageTensor(im, mean, node.outputs(1).type().dtype()));
    im.Define(node.outputs(2),
              ToStorageTensor(im, invstd, node.outputs(2).type().dtype()));
  } else {
    for (int i = 1; i < 3; ++i) {
      im.Define(node.outputs(i),
                Empty(im, {0}, im.StorageType(node.outputs(i).type().dtype())));
    }
  }
  for (int i = 3; i < num_outputs; ++i) {
    const std::string* stat = i == 3 ? running_mean : running_var;
    const ir::DType st = im.TypeOf(*stat).dtype();
    if (!training) {
      // Unchanged (a copy: each output is its own buffer).
      im.Define(node.outputs(i),
                Parallel(im, im.ValueOf(*stat), {IdentityMap(im, 1)},
                         {channels}, im.StorageType(st),
                         [](OpBuilder&, Location, ValueRange a) {
                           return a[0];
                         }));
      continue;
    }
    // (1 - momentum) * running + momentum * batch (unbiased variance), in
    // the accumulator type.
    Value batch = i == 3 ? batch_mean : var_sum;
    const double scale = i == 3 ? 1.0 : 1.0 / (count - 1);
    im.Define(node.outputs(i),
              Parallel(im, {im.ValueOf(*stat), batch},
                       {IdentityMap(im, 1), IdentityMap(im, 1)}, {channels},
                       im.StorageType(st),
                       [&](OpBuilder& b, Location l, ValueRange a) {
                         Value old = b.create<arith::MulFOp>(
                             l, widen(b, l, im.ToCompute(b, a[0], st)),
                             acc_const(b, l, 1.0 - momentum));
                         Value fresh = b.create<arith::MulFOp>(
                             l, a[1], acc_const(b, l, momentum * scale));
                         return im.FromCompute(
                             b, narrow(b, l, b.create<arith::AddFOp>(l, old, fresh)), st);
                       }));
  }
  return absl::OkStatus();
}

// --- Group norm. -------------------------------------------------------------

absl::Status ConvertGroupNorm(GraphImporter& im, const ir::Node& node) {
  absl::StatusOr<std::vector<const std::string*>> optional =
      OptionalInputs(node, {"weight", "bias"});
  if (!optional.ok()) return optional.status();
  if (node.outputs_size() != 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s has 3 outputs (out, mean, rstd), got %d", node.op(),
        node.outputs_size()));
  }
  const std::string* weight = (*optional)[0];
  const std::string* bias = (*optional)[1];
  const std::string& x = node.inputs(0);
  if (absl::Status s = CheckFloatTensor(im, node, x, "input"); !s.ok()) {
    return s;
  }
  const ir::DType t = im.TypeOf(x).dtype();
  const Shape xs = ShapeOf(im.TypeOf(x));
  const int64_t n = IntAttr(node, "N", xs.empty() ? 0 : xs[0]);
  const int64_t c = IntAttr(node, "C", xs.size() < 2 ? 0 : xs[1]);
  const int64_t hw = IntAttr(node, "HxW", NumElements(xs) /
                                              std::max<int64_t>(n * c, 1));
  const int64_t groups = IntAttr(node, "group", 1);
  if (xs.size() < 2 || xs[0] != n || xs[1] != c || n * c * hw != NumElements(xs)
      || groups < 1 || c % groups != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: input [%s] does not match N=%d, C=%d, HxW=%d with %d groups "
        "(C must be divisible by the number of groups)",
        node.op(), absl::StrJoin(xs, ", "), n, c, hw, groups));
  }
  for (const std::string* in : *optional) {
    if (absl::Status s = CheckChannelVector(im, node, in, c); !s.ok()) return s;
  }
  if (absl::Status s = CheckOutput(node, 0, xs, t); !s.ok()) return s;
  for (int i = 1; i < 3; ++i) {
    if (absl::Status s = CheckOutput(node, i, {n, groups},
                                     node.outputs(i).type().dtype());
        !s.ok()) {
      return s;
    }
    if (!IsFloat(node.outputs(i).type().dtype())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: output %%%s must be a float tensor", node.op(),
          node.outputs(i).name()));
    }
  }
  const double eps = FloatAttr(node, "eps", 1e-5);
  const int64_t per_group = c / groups;
  const Type f32 = im.builder().getF32Type();
  // [N, G, C/G, HxW]: statistics over the last two dims.
  const Shape grouped = {n, groups, per_group, hw};
  Value xg = ExpandDim(im, CollapseDims(im, im.ValueOf(x), 0, xs.size()), 0,
                       grouped);
  const AffineMap id = IdentityMap(im, 4);
  const AffineMap stat = DimsMap(im, 4, {0, 1});
  const std::vector<IteratorType> reduce = {
      IteratorType::parallel, IteratorType::parallel, IteratorType::reduction,
      IteratorType::reduction};
  const double count = static_cast<double>(per_group * hw);
  Value sum = Generic(im, xg, Filled(im, {n, groups}, f32, 0.0), {id, stat},
                      reduce, [&](OpBuilder& b, Location l, ValueRange a) {
                        return llvm::SmallVector<Value>{b.create<arith::AddFOp>(
                            l, a[1], im.ToCompute(b, a[0], t))};
                      })[0];
  Value mean = Parallel(im, sum, {IdentityMap(im, 2)}, {n, groups}, f32,
                        [&](OpBuilder& b, Location l, ValueRange a) {
                          // An empty group divides 0 by 0 as ATen does.
                          return b.create<arith::DivFOp>(
                              l, a[0], F32Const(b, l, count));
                        });
  Value var_sum = Generic(im, ValueRange{xg, mean},
                          Filled(im, {n, groups}, f32, 0.0), {id, stat, stat},
                          reduce, [&](OpBuilder& b, Location l, ValueRange a) {
                            Value d = b.create<arith::SubFOp>(
                                l, im.ToCompute(b, a[0], t), a[1]);
                            return llvm::SmallVector<Value>{
                                b.create<arith::AddFOp>(
                                    l, a[2], b.create<arith::MulFOp>(l, d, d))};
                          })[0];
  Value rstd = Parallel(im, var_sum, {IdentityMap(im, 2)}, {n, groups}, f32,
                        [&](OpBuilder& b, Location l, ValueRange a) {
                          Value var = b.create<arith::DivFOp>(
                              l, a[0], F32Const(b, l, count));
                          return b.create<arith::DivFOp>(
                              l, F32Const(b, l, 1.0),
                              b.create<mlir::math::SqrtOp>(
                                  l, b.create<arith::AddFOp>(
                                         l, var, F32Const(b, l, eps))));
                        });
  // y[n, g, c, s] = (x - mean) * rstd * w[g*C/G + c] + b[...].
  auto dim = [&](int i) { return mlir::getAffineDimExpr(i, im.context()); };
  const AffineMap per_channel =
      AffineMap::get(4, 0, {dim(1) * per_group + dim(2)}, im.context());
  std::vector<Value> inputs = {xg, mean, rstd};
  std::vector<AffineMap> maps = {id, stat, stat};
  if (weight) {
    inputs.push_back(im.ValueOf(*weight));
    maps.push_back(per_channel);
  }
  if (bias) {
    inputs.push_back(im.ValueOf(*bias));
    maps.push_back(per_channel);
  }
  Value y = Parallel(
      im, inputs, maps, grouped, im.StorageType(t),
      [&](OpBuilder& b, Location l, ValueRange a) {
        return im.FromCompute(b, Normalized(im, b, l, a, t, weight, bias), t);
      });
  im.Define(node.outputs(0),
            ExpandDim(im, CollapseDims(im, y, 0, 4), 0, xs));
  im.Define(node.outputs(1),
            ToStorageTensor(im, mean, node.outputs(1).type().dtype()));
  im.Define(node.outputs(2),
            ToStorageTensor(im, rstd, node.outputs(2).type().dtype()));
  return absl::OkStatus();
}

}  // namespace

void RegisterNormOps(OpConverterTable& table) {
  for (const char* op :
       {"_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
        "native_batch_norm", "_batch_norm_with_update_functional"}) {
    table[op] = &ConvertBatchNorm;
  }
  table["native_group_norm"] = &ConvertGroupNorm;
}

}  // namespace rbln::compiler

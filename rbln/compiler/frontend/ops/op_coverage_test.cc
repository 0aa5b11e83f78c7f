// spec: J6 (unsupported ops and dtypes fail with "The following operators
// are not implemented: [...]")
//
// The op x dtype coverage audit of docs/compiler-op-coverage.md: every op
// that issue #4 lists, as a one-op graph compiled and run once per dtype with
// the output dtype PyTorch gives. The table this test generates must equal the
// doc's generated section, so the doc stays true; on a mismatch the test
// prints the new section (and writes it to $RBLN_OP_COVERAGE_OUT if set).
// Values are checked by the family tests named in the table, not here.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

constexpr ir::DType kDTypes[] = {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32,
                                 ir::INT32,   ir::INT64,    ir::BOOL};

const char* Name(ir::DType t) { return ir::TorchDTypeName(t); }

bool IsFloatType(ir::DType t) {
  return t == ir::FLOAT16 || t == ir::BFLOAT16 || t == ir::FLOAT32;
}

// A graph and inputs to run it on.
struct Probe {
  ir::Graph graph;
  std::vector<HostTensor> inputs;
};

HostTensor Input(ir::DType t, Shape shape, uint32_t seed = 1) {
  return Random(t, std::move(shape), seed, t == ir::BOOL ? 0.0 : -3.0, 3.0);
}

// `op` over inputs of dtype `t` and `shapes`, output `out`.
Probe Simple(const std::string& op, ir::DType t,
             const std::vector<Shape>& shapes, ir::DType out_dtype,
             const Shape& out_shape, const Attrs& attrs = {}) {
  Probe p;
  std::vector<ir::TensorType> types;
  for (size_t i = 0; i < shapes.size(); ++i) {
    p.inputs.push_back(Input(t, shapes[i], i + 1));
    types.push_back(p.inputs.back().type());
  }
  p.graph = OneOpGraph(op, types, {Type(out_dtype, out_shape)}, attrs);
  return p;
}

// Which dtypes PyTorch's CPU kernels accept (torch 2.13, checked by hand).
// kIntegral: integers and bool; kInteger: integers only; kNoHalf: all but
// float16/bfloat16 (special.zeta).
enum class Torch {
  kAll,
  kNoBool,
  kFloat,
  kIntegral,
  kInteger,
  kNoHalf,
  kFloatInt64,
  kFloat32Int64
};

bool TorchAccepts(Torch torch, ir::DType t) {
  switch (torch) {
    case Torch::kAll:
      return true;
    case Torch::kNoBool:
      return t != ir::BOOL;
    case Torch::kIntegral:
      return !IsFloatType(t);
    case Torch::kInteger:
      return t == ir::INT32 || t == ir::INT64;
    case Torch::kNoHalf:
      return t != ir::FLOAT16 && t != ir::BFLOAT16;
    case Torch::kFloatInt64:
      return IsFloatType(t) || t == ir::INT64;
    case Torch::kFloat32Int64:
      return t == ir::FLOAT32 || t == ir::INT64;
    default:
      return IsFloatType(t);
  }
}

struct Row {
  std::string family;
  std::string op;  // as the doc shows it
  Torch torch;
  std::string tests;  // where its values are checked
  std::function<Probe(ir::DType)> probe;
};

const Shape kS = {2, 3};

// Binary ops: out is the inputs' dtype, or `out` when given.
Row Binary(const std::string& op, Torch torch, const std::string& tests,
           std::function<ir::DType(ir::DType)> out = nullptr,
           const Attrs& attrs = {}) {
  return {"element-wise binary", op, torch, tests, [=](ir::DType t) {
            return Simple(op, t, {kS, kS}, out ? out(t) : t, kS, attrs);
          }};
}

ir::DType ToBool(ir::DType) { return ir::BOOL; }
// Int and bool inputs give float32 (PyTorch's default dtype).
ir::DType FloatResult(ir::DType t) {
  return IsFloatType(t) ? t : ir::FLOAT32;
}

Row Unary(const std::string& label, const std::string& op, Torch torch,
          const std::string& tests,
          std::function<ir::DType(ir::DType)> out = nullptr,
          const Attrs& attrs = {}) {
  return {"unary", label, torch, tests, [=](ir::DType t) {
            return Simple(op, t, {kS}, out ? out(t) : t, kS, attrs);
          }};
}

const char kEw[] = "elementwise_ops_test";
const char kUnary[] = "unary_math_ops_test";
const char kBinary[] = "binary_math_ops_test";
const char kAct[] = "activation_ops_test";
const char kCons[] = "construction_ops_test";
const char kRed[] = "reduction_ops_test";
const char kMm[] = "matmul_ops_test";
const char kDm[] = "data_movement_ops_test";
const char kAttn[] = "attention_ops_test";
const char kConv[] = "convolution_ops_test";
const char kPool[] = "pooling_ops_test";
const char kNorm[] = "norm_ops_test";
const char kSample[] = "sampling_ops_test";

// An NN op over inputs of dtype `t` (int64 where `index_inputs` says so) with
// outputs of dtype t (or int64 for the ones `index_outputs` names).
Row Nn(const std::string& label, const std::string& op, Torch torch,
       const std::string& tests, std::vector<Shape> inputs,
       std::vector<Shape> outputs, const Attrs& attrs,
       std::vector<int> index_inputs = {}, std::vector<int> index_outputs = {}) {
  auto is = [](const std::vector<int>& v, int i) {
    return std::find(v.begin(), v.end(), i) != v.end();
  };
  return {"nn", label, torch, tests, [=](ir::DType t) {
            Probe p;
            std::vector<ir::TensorType> in_types, out_types;
            for (size_t i = 0; i < inputs.size(); ++i) {
              p.inputs.push_back(is(index_inputs, i)
                                     ? Tensor(ir::INT64, inputs[i],
                                              std::vector<double>(
                                                  NumElements(inputs[i]), 0))
                                     : Input(t, inputs[i], i + 1));
              in_types.push_back(p.inputs.back().type());
            }
            for (size_t i = 0; i < outputs.size(); ++i) {
              out_types.push_back(
                  Type(is(index_outputs, i) ? ir::INT64 : t, outputs[i]));
            }
            p.graph = OneOpGraph(op, in_types, out_types, attrs);
            return p;
          }};
}

const char kGs[] = "gather_scatter_ops_test";
const char kAdv[] = "advanced_index_ops_test";
const char kLay[] = "layout_ops_test";
const char kVs[] = "view_scatter_ops_test";
const char kBag[] = "embedding_bag_ops_test";

// An op over x (dtype t, [2, 3]) and `extra` inputs, with output `out`.
Row Indexing(const std::string& family, const std::string& label,
             const std::string& op, Torch torch, const std::string& tests,
             std::vector<std::function<HostTensor(ir::DType)>> extra,
             std::function<ir::TensorType(ir::DType)> out, const Attrs& attrs = {}) {
  return {family, label, torch, tests, [=](ir::DType t) {
            Probe p;
            p.inputs = {Input(t, kS, 1)};
            for (const auto& make : extra) p.inputs.push_back(make(t));
            std::vector<ir::TensorType> types;
            for (const HostTensor& in : p.inputs) types.push_back(in.type());
            p.graph = OneOpGraph(op, types, {out(t)}, attrs);
            return p;
          }};
}

const char kMoment[] = "moment_ops_test";
const char kVecNorm[] = "vector_norm_ops_test";
const char kScan[] = "scan_ops_test";
const char kSort[] = "sort_ops_test";
const char kSearch[] = "search_ops_test";
const char kHist[] = "histogram_ops_test";
const char kLinalg[] = "linalg_ops_test";
const char kSegment[] = "segment_ops_test";

ir::DType IntegersToInt64(ir::DType t) {
  return IsFloatType(t) ? t : ir::INT64;
}

// `op` over inputs of dtype `t` (or the given dtypes) with several outputs.
Probe Multi(const std::string& op, const std::vector<HostTensor>& inputs,
            const std::vector<ir::TensorType>& outputs,
            const Attrs& attrs = {}) {
  Probe p;
  p.inputs = inputs;
  std::vector<ir::TensorType> types;
  for (const HostTensor& in : inputs) types.push_back(in.type());
  p.graph = OneOpGraph(op, types, outputs, attrs);
  return p;
}

std::function<HostTensor(ir::DType)> Index(Shape shape, std::vector<double> values) {
  return [=](ir::DType) { return Tensor(ir::INT64, shape, values); };
}
std::function<HostTensor(ir::DType)> Same(Shape shape) {
  return [=](ir::DType t) { return Input(t, shape, 2); };
}
std::function<HostTensor(ir::DType)> Mask(Shape shape) {
  return [=](ir::DType) { return Input(ir::BOOL, shape, 3); };
}
std::function<ir::TensorType(ir::DType)> Out(Shape shape) {
  return [=](ir::DType t) { return Type(t, shape); };
}

std::vector<Row> Rows() {
  std::vector<Row> rows = {
      Binary("add", Torch::kAll, kEw),
      Binary("sub", Torch::kNoBool, kEw),
      Binary("mul", Torch::kAll, kEw),
      Binary("div", Torch::kAll, kEw, &FloatResult),
      Binary("pow", Torch::kNoBool, kEw),
      Binary("maximum", Torch::kAll, kEw),
      Binary("minimum", Torch::kAll, kEw),
  };
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                         "logical_or"}) {
    rows.push_back(Binary(op, Torch::kAll, kEw, &ToBool));
  }
  rows.push_back({"element-wise binary", "where", Torch::kAll, kEw,
                  [](ir::DType t) {
                    Probe p;
                    p.inputs = {Input(ir::BOOL, kS, 1), Input(t, kS, 2),
                                Input(t, kS, 3)};
                    p.graph = OneOpGraph(
                        "where",
                        {p.inputs[0].type(), p.inputs[1].type(),
                         p.inputs[2].type()},
                        {Type(t, kS)});
                    return p;
                  }});
  rows.push_back({"element-wise binary", "masked_fill", Torch::kAll, kEw,
                  [](ir::DType t) {
                    Probe p;
                    p.inputs = {Input(t, kS, 1), Input(ir::BOOL, kS, 2)};
                    p.graph = OneOpGraph(
                        "masked_fill", {p.inputs[0].type(), p.inputs[1].type()},
                        {Type(t, kS)}, {{"value", IntA(1)}});
                    return p;
                  }});
  for (const char* op : {"abs", "neg", "ceil", "floor"}) {
    rows.push_back(Unary(op, op, Torch::kNoBool, kEw));
  }
  for (const char* op : {"log", "exp", "sqrt", "rsqrt", "sigmoid", "tanh"}) {
    rows.push_back(Unary(op, op, Torch::kAll, kEw, &FloatResult));
  }
  rows.push_back(Unary("silu", "silu", Torch::kFloat, kEw));
  rows.push_back(Unary("relu", "relu", Torch::kNoBool, kEw));
  rows.push_back(Unary("gelu (erf)", "gelu", Torch::kFloat, kEw));
  rows.push_back(Unary("gelu (tanh)", "gelu", Torch::kFloat, kEw, nullptr,
                       {{"approximate", StrA("tanh")}}));
  rows.push_back(
      Unary("logical_not", "logical_not", Torch::kAll, kEw, &ToBool));
  // clamp(bool, 0, 1) is int64 in PyTorch (the int bounds promote).
  rows.push_back(Unary(
      "clamp", "clamp", Torch::kAll, kEw,
      [](ir::DType t) { return t == ir::BOOL ? ir::INT64 : t; },
      {{"min", IntA(0)}, {"max", IntA(1)}}));
  rows.push_back({"cast", "to_dtype (-> float16)", Torch::kAll, kEw,
                  [](ir::DType t) {
                    return Simple("to_dtype", t, {kS}, ir::FLOAT16, kS);
                  }});
  rows.push_back({"cast", "to_dtype (float16 ->)", Torch::kAll, kEw,
                  [](ir::DType t) {
                    return Simple("to_dtype", ir::FLOAT16, {kS}, t, kS);
                  }});

  // clamp with tensor bounds, one-sided clamps, copy into a destination,
  // addcdiv (elementwise_ops.cc).
  rows.push_back({"element-wise binary", "clamp (tensor bounds)", Torch::kNoBool,
                  kEw, [](ir::DType t) {
                    return Simple("clamp", t, {kS, kS, kS}, t, kS);
                  }});
  for (const char* op : {"clamp_min", "clamp_max"}) {
    rows.push_back(Binary(op, Torch::kAll, kEw));
  }
  rows.push_back(Binary("copy (dst, src)", Torch::kAll, kEw));
  rows.back().probe = [](ir::DType t) {
    return Simple("copy", t, {kS, {3}}, t, kS);
  };
  rows.push_back({"element-wise binary", "addcdiv", Torch::kFloat, kEw,
                  [](ir::DType t) {
                    return Simple("addcdiv", t, {kS, kS, kS}, t, kS,
                                  {{"value", FloatA(0.5)}});
                  }});

  // Unary math (unary_math_ops.cc).
  for (const char* op :
       {"sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
        "acosh", "atanh", "erf", "erfc", "erfinv", "exp2", "expm1", "log1p",
        "log2", "log10", "lgamma", "digamma", "i0", "special_i0e",
        "special_i1", "special_i1e", "reciprocal", "angle"}) {
    rows.push_back(Unary(op, op, Torch::kAll, kUnary, &FloatResult));
  }
  rows.push_back(Unary("polygamma (n = 2)", "polygamma", Torch::kAll, kUnary,
                       &FloatResult, {{"n", IntA(2)}}));
  for (const char* op : {"sign", "sgn"}) {
    rows.push_back(Unary(op, op, Torch::kAll, kUnary));
  }
  for (const char* op : {"trunc", "round"}) {
    rows.push_back(Unary(op, op, Torch::kNoBool, kUnary));
  }
  rows.push_back(Unary("round (decimals)", "round", Torch::kFloat, kUnary,
                       nullptr, {{"decimals", IntA(2)}}));
  rows.push_back(Unary("frac", "frac", Torch::kFloat, kUnary));
  for (const char* op : {"isnan", "isinf", "isfinite", "isposinf", "isneginf",
                         "signbit"}) {
    rows.push_back(Unary(op, op, Torch::kAll, kUnary, &ToBool));
  }

  // Binary math (binary_math_ops.cc).
  for (const char* op : {"remainder", "fmod"}) {
    rows.push_back(Binary(op, Torch::kNoBool, kBinary));
  }
  for (const char* op : {"atan2", "copysign", "ldexp"}) {
    rows.push_back(Binary(op, Torch::kAll, kBinary, &FloatResult));
  }
  rows.push_back(
      Binary("special_zeta", Torch::kNoHalf, kBinary, &FloatResult));
  for (const char* op : {"fmax", "fmin"}) {
    rows.push_back(Binary(op, Torch::kAll, kBinary));
  }
  for (const char* op : {"hypot", "nextafter", "igamma", "igammac"}) {
    rows.push_back(Binary(op, Torch::kFloat, kBinary));
  }
  rows.push_back({"element-wise binary", "frexp", Torch::kFloat, kBinary,
                  [](ir::DType t) {
                    Probe p = Simple("frexp", t, {kS}, t, kS);
                    ir::Value* e = p.graph.mutable_nodes(0)->add_outputs();
                    e->set_name("exponent");
                    *e->mutable_type() = Type(ir::INT32, kS);
                    p.graph.add_outputs("exponent");
                    return p;
                  }});
  for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
    rows.push_back(Binary(op, Torch::kIntegral, kBinary));
  }
  rows.push_back(
      Unary("bitwise_not", "bitwise_not", Torch::kIntegral, kBinary));
  for (const char* op : {"bitwise_left_shift", "bitwise_right_shift"}) {
    rows.push_back(Binary(op, Torch::kInteger, kBinary));
  }
  rows.push_back(Binary("logical_xor", Torch::kAll, kBinary, &ToBool));

  // Activations (activation_ops.cc).
  rows.push_back(Unary("hardtanh", "hardtanh", Torch::kNoBool, kAct));
  rows.push_back(Unary("elu", "elu", Torch::kFloat, kAct));
  rows.push_back(Unary("leaky_relu", "leaky_relu", Torch::kFloat, kAct));

  // Construction (construction_ops.cc).
  for (const char* op : {"empty", "empty_permuted", "empty_strided"}) {
    rows.push_back({"construction", op, Torch::kAll, kCons, [op](ir::DType t) {
                      Probe p;
                      p.graph = OneOpGraph(op, {}, {Type(t, kS)});
                      return p;
                    }});
  }
  for (const char* op : {"new_empty", "new_empty_strided"}) {
    rows.push_back({"construction", op, Torch::kAll, kCons, [op](ir::DType t) {
                      return Simple(op, t, {{4}}, t, kS);
                    }});
  }
  rows.push_back({"construction", "scalar_tensor", Torch::kAll, kCons,
                  [](ir::DType t) {
                    Probe p;
                    p.graph = OneOpGraph("scalar_tensor", {}, {Type(t, {})},
                                         {{"s", FloatA(1.5)}});
                    return p;
                  }});

  auto reduction = [](const std::string& label, const std::string& op,
                      Torch torch, std::function<ir::DType(ir::DType)> out,
                      Shape out_shape, const Attrs& attrs) -> Row {
    return {"reduction", label, torch, kRed, [=](ir::DType t) {
              return Simple(op, t, {kS}, out ? out(t) : t, out_shape, attrs);
            }};
  };
  rows.push_back(reduction(
      "sum", "sum", Torch::kAll,
      [](ir::DType t) { return IsFloatType(t) ? t : ir::INT64; }, {}, {}));
  rows.push_back(reduction("mean", "mean", Torch::kFloat, nullptr, {}, {}));
  rows.push_back(reduction("max", "max", Torch::kAll, nullptr, {}, {}));
  rows.push_back(reduction("min", "min", Torch::kAll, nullptr, {}, {}));
  rows.push_back(
      reduction("amax", "amax", Torch::kAll, nullptr, {3}, {{"dim", IntA(0)}}));
  rows.push_back(reduction(
      "argmax", "argmax", Torch::kNoBool,
      [](ir::DType) { return ir::INT64; }, {}, {}));
  rows.push_back(reduction("softmax", "softmax", Torch::kFloat, nullptr, kS,
                           {{"dim", IntA(-1)}}));
  rows.push_back(reduction("log_softmax", "log_softmax", Torch::kFloat,
                           nullptr, kS, {{"dim", IntA(-1)}}));
  rows.push_back(reduction("layer_norm", "layer_norm", Torch::kFloat, nullptr,
                           kS, {{"normalized_shape", StrA("3")}}));
  rows.push_back(reduction("rms_norm", "rms_norm", Torch::kFloat, nullptr, kS,
                           {{"normalized_shape", StrA("3")}}));
  rows.push_back({"reduction", "prod", Torch::kAll, kRed, [](ir::DType t) {
                    return Simple("prod", t, {kS}, IntegersToInt64(t), {});
                  }});
  for (const char* op : {"any", "all"}) {
    rows.push_back(reduction(op, op, Torch::kAll, &ToBool, {3},
                             {{"dim", IntA(0)}}));
  }
  rows.push_back({"moments", "var", Torch::kFloat, kMoment, [](ir::DType t) {
                    return Simple("var", t, {kS}, t, {2}, {{"dim", IntA(1)}});
                  }});
  rows.push_back(
      {"moments", "var_mean", Torch::kFloat, kMoment, [](ir::DType t) {
         return Multi("var_mean", {Input(t, kS)}, {Type(t, {}), Type(t, {})});
       }});
  rows.push_back({"vector norm", "linalg_vector_norm", Torch::kFloat, kVecNorm,
                  [](ir::DType t) {
                    return Simple("linalg_vector_norm", t, {kS}, t, {},
                                  {{"ord", FloatA(3)}});
                  }});
  rows.push_back({"vector norm", "dist", Torch::kFloat, kVecNorm,
                  [](ir::DType t) {
                    return Simple("dist", t, {kS, {3}}, t, {});
                  }});
  for (const char* op : {"cumsum", "cumprod"}) {
    rows.push_back({"scan", op, Torch::kAll, kScan, [op](ir::DType t) {
                      return Simple(op, t, {kS}, IntegersToInt64(t), kS,
                                    {{"dim", IntA(1)}});
                    }});
  }
  for (const char* op : {"cummax", "cummin"}) {
    rows.push_back({"scan", op, Torch::kAll, kScan, [op](ir::DType t) {
                      return Multi(op, {Input(t, kS)},
                                   {Type(t, kS), Type(ir::INT64, kS)},
                                   {{"dim", IntA(0)}});
                    }});
  }
  rows.push_back({"scan", "logcumsumexp", Torch::kFloat, kScan,
                  [](ir::DType t) {
                    return Simple("logcumsumexp", t, {kS}, t, kS,
                                  {{"dim", IntA(-1)}});
                  }});
  for (bool stable : {false, true}) {
    rows.push_back({"sort", stable ? "sort (stable)" : "sort", Torch::kAll,
                    kSort, [stable](ir::DType t) {
                      return Multi("sort", {Input(t, kS)},
                                   {Type(t, kS), Type(ir::INT64, kS)},
                                   {{"stable", BoolA(stable)}});
                    }});
  }
  rows.push_back({"sort", "topk", Torch::kNoBool, kSort, [](ir::DType t) {
                    return Multi("topk", {Input(t, kS)},
                                 {Type(t, {2, 2}), Type(ir::INT64, {2, 2})},
                                 {{"k", IntA(2)}});
                  }});
  rows.push_back({"sort", "kthvalue", Torch::kNoBool, kSort, [](ir::DType t) {
                    return Multi("kthvalue", {Input(t, kS)},
                                 {Type(t, {2}), Type(ir::INT64, {2})},
                                 {{"k", IntA(2)}});
                  }});
  for (const char* op : {"median", "nanmedian"}) {
    rows.push_back({"sort", std::string(op) + " (dim)", Torch::kNoBool, kSort,
                    [op](ir::DType t) {
                      return Multi(op, {Input(t, kS)},
                                   {Type(t, {3}), Type(ir::INT64, {3})},
                                   {{"dim", IntA(0)}});
                    }});
  }
  rows.push_back({"sort", "mode", Torch::kAll, kSort, [](ir::DType t) {
                    return Multi("mode", {Input(t, kS)},
                                 {Type(t, {2}), Type(ir::INT64, {2})});
                  }});
  rows.push_back({"search", "bucketize", Torch::kNoBool, kSearch,
                  [](ir::DType t) {
                    return Multi("bucketize",
                                 {Input(t, kS), Tensor(t, {3}, {-1, 0, 2})},
                                 {Type(ir::INT64, kS)});
                  }});
  rows.push_back({"search", "searchsorted", Torch::kNoBool, kSearch,
                  [](ir::DType t) {
                    return Multi("searchsorted",
                                 {Tensor(t, {3}, {-1, 0, 2}), Input(t, kS)},
                                 {Type(ir::INT64, kS)});
                  }});
  rows.push_back({"histogram", "histc", Torch::kFloat, kHist, [](ir::DType t) {
                    return Simple("histc", t, {kS}, t, {4},
                                  {{"bins", IntA(4)}});
                  }});
  rows.push_back({"linear algebra", "addmv", Torch::kNoBool, kLinalg,
                  [](ir::DType t) {
                    return Simple("addmv", t, {{2}, {2, 3}, {3}}, t, {2});
                  }});
  rows.push_back({"linear algebra", "addbmm", Torch::kNoBool, kLinalg,
                  [](ir::DType t) {
                    return Simple("addbmm", t, {{2, 4}, {2, 2, 3}, {2, 3, 4}},
                                  t, {2, 4});
                  }});
  rows.push_back({"linear algebra", "_trilinear (bilinear)", Torch::kNoBool,
                  kLinalg, [](ir::DType t) {
                    return Simple("_trilinear", t, {{2, 3}, {4, 3, 5}, {2, 5}},
                                  t, {2, 4},
                                  {{"expand1", StrA("1,3")},
                                   {"expand2", StrA("0")},
                                   {"expand3", StrA("1,2")},
                                   {"sumdim", StrA("2,3")}});
                  }});
  rows.push_back({"segment", "segment_reduce", Torch::kFloat, kSegment,
                  [](ir::DType t) {
                    return Multi("segment_reduce",
                                 {Input(t, {4, 3}), Tensor(ir::INT64, {2}, {1, 3})},
                                 {Type(t, {2, 3})}, {{"reduce", StrA("sum")}});
                  }});

  auto matmul = [](const std::string& label, const std::string& op,
                   std::vector<Shape> shapes, Shape out) -> Row {
    return {"matmul", label, Torch::kNoBool, kMm, [=](ir::DType t) {
              return Simple(op, t, shapes, t, out);
            }};
  };
  rows.push_back(matmul("mm", "mm", {{2, 3}, {3, 4}}, {2, 4}));
  rows.push_back(matmul("bmm", "bmm", {{2, 2, 3}, {2, 3, 4}}, {2, 2, 4}));
  rows.push_back(
      matmul("addmm", "addmm", {{2, 4}, {2, 3}, {3, 4}}, {2, 4}));
  rows.push_back(matmul("linear", "linear", {{2, 3}, {4, 3}, {4}}, {2, 4}));
  rows.push_back(matmul("matmul (batch broadcast)", "matmul",
                        {{2, 1, 2, 3}, {4, 3, 2}}, {2, 4, 2, 2}));
  for (bool causal : {false, true}) {
    rows.push_back(
        {"attention",
         causal ? "scaled_dot_product_attention (causal)"
                : "scaled_dot_product_attention",
         Torch::kFloat, kAttn, [causal](ir::DType t) {
           const Shape s = {1, 2, 4, 8};
           return Simple("scaled_dot_product_attention", t, {s, s, s}, t, s,
                         {{"is_causal", BoolA(causal)}});
         }});
  }

  auto move = [](const std::string& label, const std::string& op,
                 std::vector<Shape> shapes, Shape out,
                 const Attrs& attrs) -> Row {
    return {"data movement", label, Torch::kAll, kDm, [=](ir::DType t) {
              return Simple(op, t, shapes, t, out, attrs);
            }};
  };
  rows.push_back(move("view", "view", {kS}, {3, 2}, {{"size", StrA("3,2")}}));
  rows.push_back(move("reshape", "reshape", {kS}, {6}, {{"shape", StrA("6")}}));
  rows.push_back(
      move("permute", "permute", {kS}, {3, 2}, {{"dims", StrA("1,0")}}));
  rows.push_back(move("transpose", "transpose", {kS}, {3, 2},
                      {{"dim0", IntA(0)}, {"dim1", IntA(1)}}));
  rows.push_back(
      move("expand", "expand", {{1, 3}}, kS, {{"size", StrA("2,3")}}));
  rows.push_back(move("slice", "slice", {kS}, {2, 2},
                      {{"dim", IntA(1)}, {"start", IntA(1)}}));
  rows.push_back(move("narrow", "narrow", {kS}, {2, 2},
                      {{"dim", IntA(1)}, {"start", IntA(0)},
                       {"length", IntA(2)}}));
  rows.push_back(move("select", "select", {kS}, {3},
                      {{"dim", IntA(0)}, {"index", IntA(1)}}));
  rows.push_back(move("cat", "cat", {kS, kS}, {4, 3}, {{"dim", IntA(0)}}));
  rows.push_back(
      move("squeeze", "squeeze", {{2, 1, 3}}, kS, {{"dim", IntA(1)}}));
  rows.push_back(
      move("unsqueeze", "unsqueeze", {kS}, {2, 1, 3}, {{"dim", IntA(1)}}));
  rows.push_back(move("repeat_interleave", "repeat_interleave", {kS}, {4, 3},
                      {{"repeats", IntA(2)}, {"dim", IntA(0)}}));
  auto indexed = [](const std::string& op, Shape x, Shape out,
                    bool with_source, const Attrs& attrs) -> Row {
    return {"data movement", op, Torch::kAll, kDm, [=](ir::DType t) {
              Probe p;
              p.inputs = {Input(t, x, 1), Tensor(ir::INT64, {1}, {1})};
              if (with_source) p.inputs.push_back(Input(t, {1, 3}, 2));
              std::vector<ir::TensorType> types;
              for (const HostTensor& in : p.inputs) types.push_back(in.type());
              p.graph = OneOpGraph(op, types, {Type(t, out)}, attrs);
              return p;
            }};
  };
  rows.push_back(
      indexed("index_select", kS, {1, 3}, false, {{"dim", IntA(0)}}));
  rows.push_back(indexed("index_copy", kS, kS, true, {{"dim", IntA(0)}}));
  rows.push_back(indexed("embedding", {5, 3}, {1, 3}, false, {}));
  rows.push_back({"data movement", "arange", Torch::kNoBool, kDm,
                  [](ir::DType t) {
                    Probe p;
                    p.graph = OneOpGraph("arange", {}, {Type(t, {5})},
                                         {{"end", IntA(5)}});
                    return p;
                  }});
  rows.push_back(move("fill", "fill", {kS}, kS, {{"value", IntA(1)}}));
  rows.push_back(move("clone", "clone", {kS}, kS, {}));

  // NN ops: [N, C, H, W] = [1, 2, 4, 4].
  const Shape x4 = {1, 2, 4, 4};
  rows.push_back(Nn("convolution", "convolution", Torch::kNoBool, kConv,
                    {x4, {3, 2, 3, 3}, {3}}, {{1, 3, 2, 2}}, {}));
  rows.push_back(Nn("convolution (3-d, groups)", "convolution", Torch::kNoBool,
                    kConv, {{1, 2, 3, 3, 3}, {2, 1, 2, 2, 2}},
                    {{1, 2, 2, 2, 2}}, {{"groups", IntA(2)}}));
  rows.push_back(Nn("convolution (transposed)", "convolution",
                    Torch::kFloatInt64, kConv, {x4, {2, 3, 2, 2}},
                    {{1, 3, 8, 8}},
                    {{"transposed", BoolA(true)}, {"stride", StrA("2")}}));
  rows.push_back(Nn("convolution_backward", "convolution_backward",
                    Torch::kFloat, kConv,
                    {{1, 3, 2, 2}, x4, {3, 2, 3, 3}}, {x4, {3, 2, 3, 3}, {3}},
                    {}));
  const Attrs pool2 = {{"kernel_size", StrA("2")}};
  rows.push_back(Nn("max_pool2d_with_indices", "max_pool2d_with_indices",
                    Torch::kNoBool, kPool, {x4}, {{1, 2, 2, 2}, {1, 2, 2, 2}},
                    pool2, {}, {1}));
  rows.push_back(Nn("max_pool3d_with_indices", "max_pool3d_with_indices",
                    Torch::kNoBool, kPool, {{1, 2, 2, 2, 2}},
                    {{1, 2, 1, 1, 1}, {1, 2, 1, 1, 1}}, pool2, {}, {1}));
  rows.push_back(Nn("max_pool2d_with_indices_backward",
                    "max_pool2d_with_indices_backward", Torch::kFloat, kPool,
                    {{1, 2, 2, 2}, x4, {1, 2, 2, 2}}, {x4}, pool2, {2}));
  rows.push_back(Nn("avg_pool2d", "avg_pool2d", Torch::kFloatInt64, kPool,
                    {x4}, {{1, 2, 2, 2}}, pool2));
  rows.push_back(Nn("avg_pool3d", "avg_pool3d", Torch::kFloat32Int64, kPool,
                    {{1, 2, 2, 2, 2}}, {{1, 2, 1, 1, 1}}, pool2));
  rows.push_back(Nn("avg_pool2d_backward", "avg_pool2d_backward",
                    Torch::kFloatInt64, kPool, {{1, 2, 2, 2}, x4}, {x4},
                    pool2));
  const Attrs out2 = {{"output_size", StrA("3,2")}};
  rows.push_back(Nn("_adaptive_avg_pool2d", "_adaptive_avg_pool2d",
                    Torch::kFloat, kPool, {x4}, {{1, 2, 3, 2}}, out2));
  rows.push_back(Nn("_adaptive_avg_pool3d", "_adaptive_avg_pool3d",
                    Torch::kFloat, kPool, {{1, 2, 2, 2, 2}}, {{1, 2, 1, 1, 1}},
                    {{"output_size", StrA("1")}}));
  rows.push_back(Nn("_adaptive_avg_pool2d_backward",
                    "_adaptive_avg_pool2d_backward", Torch::kFloat, kPool,
                    {{1, 2, 3, 2}, x4}, {x4}, {}));
  rows.push_back(Nn("adaptive_max_pool2d", "adaptive_max_pool2d",
                    Torch::kFloat, kPool, {x4}, {{1, 2, 3, 2}, {1, 2, 3, 2}},
                    out2, {}, {1}));
  rows.push_back(Nn("_native_batch_norm_legit_functional",
                    "_native_batch_norm_legit_functional", Torch::kFloat,
                    kNorm, {x4, {2}, {2}, {2}, {2}},
                    {x4, {2}, {2}, {2}, {2}}, {{"training", BoolA(true)}}));
  rows.push_back(Nn("_native_batch_norm_legit_no_training",
                    "_native_batch_norm_legit_no_training", Torch::kFloat,
                    kNorm, {x4, {2}, {2}, {2}, {2}}, {x4, {0}, {0}}, {}));
  rows.push_back(Nn("native_group_norm", "native_group_norm", Torch::kFloat,
                    kNorm, {x4, {2}, {2}}, {x4, {1, 2}, {1, 2}},
                    {{"N", IntA(1)},
                     {"C", IntA(2)},
                     {"HxW", IntA(16)},
                     {"group", IntA(2)}}));
  rows.push_back(Nn("grid_sampler_2d", "grid_sampler_2d", Torch::kFloat,
                    kSample, {x4, {1, 3, 3, 2}}, {{1, 2, 3, 3}}, {}));
  rows.push_back(Nn("grid_sampler_3d", "grid_sampler_3d", Torch::kFloat,
                    kSample, {{1, 2, 2, 2, 2}, {1, 2, 2, 2, 3}},
                    {{1, 2, 2, 2, 2}}, {}));
  rows.push_back(Nn("upsample_nearest2d", "upsample_nearest2d", Torch::kFloat,
                    kSample, {x4}, {{1, 2, 8, 8}}, {}));
  rows.push_back(Nn("upsample_bilinear2d", "upsample_bilinear2d",
                    Torch::kFloat, kSample, {x4}, {{1, 2, 8, 8}}, {}));
  // Gathers and scatters along one dim (issue #15).
  const std::string gs = "gather/scatter";
  const auto row_index = Index({1, 3}, {1, 0, 1});
  const auto dim0 = Attrs{{"dim", IntA(0)}};
  rows.push_back(Indexing(gs, "gather", "gather", Torch::kAll, kGs, {row_index},
                          Out({1, 3}), dim0));
  rows.push_back(Indexing(gs, "scatter", "scatter", Torch::kAll, kGs,
                          {row_index, Same({1, 3})}, Out(kS), dim0));
  rows.push_back(Indexing(gs, "scatter (value)", "scatter", Torch::kAll, kGs, {row_index},
                          Out(kS), {{"dim", IntA(0)}, {"value", FloatA(2.5)}}));
  for (const char* reduce : {"add", "multiply"}) {
    rows.push_back(Indexing(gs, absl::StrCat("scatter (reduce=", reduce, ")"), "scatter",
                            Torch::kAll, kGs, {row_index, Same({1, 3})}, Out(kS),
                            {{"dim", IntA(0)}, {"reduce", StrA(reduce)}}));
  }
  rows.push_back(Indexing(gs, "scatter_add", "scatter_add", Torch::kAll, kGs,
                          {row_index, Same({1, 3})}, Out(kS), dim0));
  for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"}) {
    rows.push_back(Indexing(
        gs, absl::StrCat("scatter_reduce (", reduce, ")"), "scatter_reduce",
        std::string(reduce) == "mean" ? Torch::kNoBool : Torch::kAll, kGs,
        {row_index, Same({1, 3})}, Out(kS),
        {{"dim", IntA(0)}, {"reduce", StrA(reduce)}, {"include_self", BoolA(false)}}));
  }
  const auto vector_index = Index({2}, {1, 1});
  rows.push_back(Indexing(gs, "index_add", "index_add", Torch::kAll, kGs,
                          {vector_index, Same({2, 3})}, Out(kS), dim0));
  for (const char* reduce : {"prod", "mean", "amax", "amin"}) {
    rows.push_back(Indexing(
        gs, absl::StrCat("index_reduce (", reduce, ")"), "index_reduce",
        std::string(reduce) == "mean" ? Torch::kNoBool : Torch::kAll, kGs,
        {vector_index, Same({2, 3})}, Out(kS), {{"dim", IntA(0)}, {"reduce", StrA(reduce)}}));
  }
  rows.push_back(Indexing(gs, "put (accumulate)", "put", Torch::kAll, kGs,
                          {Index({2}, {-1, 4}), Same({2})}, Out(kS),
                          {{"accumulate", BoolA(true)}}));

  // Advanced indexing.
  const std::string adv = "advanced indexing";
  rows.push_back(Indexing(adv, "index (x[:, i])", "index", Torch::kAll, kAdv,
                          {Index({2}, {2, -3})}, Out({2, 2}), {{"indices", StrA("0,1")}}));
  rows.push_back(Indexing(adv, "index_put (accumulate)", "index_put", Torch::kAll, kAdv,
                          {Index({2}, {1, 1}), Same({3})}, Out(kS),
                          {{"indices", StrA("1")}, {"accumulate", BoolA(true)}}));
  rows.push_back(Indexing(adv, "index_put (bool mask)", "index_put", Torch::kAll, kAdv,
                          {Mask({2}), Same({3})}, Out(kS), {{"indices", StrA("1")}}));
  rows.push_back(Indexing(adv, "masked_scatter", "masked_scatter", Torch::kAll, kAdv,
                          {Mask({3}), Same({2, 3})}, Out(kS)));
  rows.push_back(Indexing(adv, "nonzero_static", "nonzero_static", Torch::kAll, kAdv, {},
                          [](ir::DType) { return Type(ir::INT64, {4, 2}); },
                          {{"size", IntA(4)}}));

  // Rearranging by index arithmetic.
  const std::string lay = "layout";
  rows.push_back(Indexing(lay, "flip", "flip", Torch::kAll, kLay, {}, Out(kS),
                          {{"dims", StrA("0,1")}}));
  rows.push_back(Indexing(lay, "repeat", "repeat", Torch::kAll, kLay, {}, Out({2, 2, 6}),
                          {{"repeats", StrA("2,1,2")}}));
  rows.push_back(Indexing(lay, "unfold", "unfold", Torch::kAll, kLay, {}, Out({2, 2, 2}),
                          {{"dimension", IntA(1)}, {"size", IntA(2)}, {"step", IntA(1)}}));
  rows.push_back(Indexing(lay, "constant_pad_nd", "constant_pad_nd", Torch::kAll, kLay, {},
                          Out({1, 6}), {{"pad", StrA("2,1,0,-1")}, {"value", IntA(1)}}));

  // Views as copies and view scatters.
  const std::string vs = "views and view scatters";
  rows.push_back(Indexing(vs, "diagonal", "diagonal", Torch::kAll, kVs, {}, Out({2}),
                          {{"offset", IntA(1)}}));
  rows.push_back(Indexing(vs, "diagonal_scatter", "diagonal_scatter", Torch::kAll, kVs,
                          {Same({2})}, Out(kS), {{"offset", IntA(1)}}));
  rows.push_back(Indexing(vs, "slice_scatter", "slice_scatter", Torch::kAll, kVs,
                          {Same({2, 2})}, Out(kS),
                          {{"dim", IntA(1)}, {"start", IntA(0)}, {"step", IntA(2)}}));
  rows.push_back(Indexing(vs, "select_scatter", "select_scatter", Torch::kAll, kVs,
                          {Same({3})}, Out(kS), {{"dim", IntA(0)}, {"index", IntA(1)}}));
  const Attrs strided = {{"size", StrA("2,2")}, {"stride", StrA("1,2")},
                         {"storage_offset", IntA(1)}};
  rows.push_back(Indexing(vs, "as_strided", "as_strided", Torch::kAll, kVs, {},
                          Out({2, 2}), strided));
  rows.push_back(Indexing(vs, "as_strided_scatter", "as_strided_scatter", Torch::kAll, kVs,
                          {Same({2, 2})}, Out(kS), strided));
  rows.push_back(Indexing(vs, "view_copy (and the other *_copy views)", "view_copy",
                          Torch::kAll, kVs, {}, Out({3, 2}), {{"size", StrA("3,2")}}));
  rows.push_back({vs, "unbind_copy", Torch::kAll, kVs, [](ir::DType t) {
                    Probe p;
                    p.inputs = {Input(t, kS, 1)};
                    p.graph = OneOpGraph("unbind_copy", {p.inputs[0].type()},
                                         {Type(t, {3}), Type(t, {3})});
                    return p;
                  }});

  // Embedding bags.
  for (int mode : {0, 1, 2}) {
    rows.push_back({"embedding bag",
                    absl::StrCat("_embedding_bag (", mode == 0 ? "sum" : mode == 1 ? "mean" : "max",
                                 ")"),
                    Torch::kFloat, kBag, [mode](ir::DType t) {
                      Probe p;
                      p.inputs = {Input(t, {4, 3}, 1), Tensor(ir::INT64, {3}, {0, 3, 1}),
                                  Tensor(ir::INT64, {2}, {0, 1})};
                      p.graph = OneOpGraph(
                          "_embedding_bag_forward_only",
                          {p.inputs[0].type(), p.inputs[1].type(), p.inputs[2].type()},
                          {Type(t, {2, 3}), Type(ir::INT64, {3}), Type(ir::INT64, {2}),
                           Type(ir::INT64, mode == 2 ? Shape{2, 3} : Shape{0})},
                          {{"mode", IntA(mode)}});
                      return p;
                    }});
  }
  rows.push_back(Indexing("embedding bag", "embedding_renorm", "embedding_renorm",
                          Torch::kFloat, kBag, {Index({2}, {0, 1})}, Out(kS),
                          {{"max_norm", FloatA(1.0)}, {"norm_type", FloatA(2.0)}}));
  return rows;
}

// Every probe's compile-and-run status, per row and dtype (both tests read
// them; each cell compiles once per test binary).
const std::vector<std::vector<absl::Status>>& Results() {
  static const auto* results = [] {
    auto* r = new std::vector<std::vector<absl::Status>>();
    for (const Row& row : Rows()) {
      r->emplace_back();
      for (ir::DType t : kDTypes) {
        Probe p = row.probe(t);
        r->back().push_back(CompileAndRun(p.graph, p.inputs).status());
      }
    }
    return r;
  }();
  return *results;
}

// Returns the doc's generated section.
std::string GenerateSection() {
  std::ostringstream table;
  std::vector<std::string> notes;
  table << "| family | op |";
  for (ir::DType t : kDTypes) table << " " << Name(t) << " |";
  table << " values checked by |\n|---|---|";
  for (size_t i = 0; i < std::size(kDTypes); ++i) table << "---|";
  table << "---|\n";
  const std::vector<Row> rows = Rows();
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    table << "| " << row.family << " | " << row.op << " |";
    for (size_t d = 0; d < std::size(kDTypes); ++d) {
      const ir::DType t = kDTypes[d];
      const absl::Status& status = Results()[r][d];
      const bool torch = TorchAccepts(row.torch, t);
      std::string cell;
      if (status.ok()) {
        cell = torch ? "yes" : "accepted (PyTorch raises)";
      } else {
        notes.push_back(absl::StrCat(
            row.op, " on ", Name(t), ": `",
            absl::StrReplaceAll(status.message(), {{"|", "\\|"}}), "`"));
        cell = absl::StrCat(torch ? "**no**" : "n/a (PyTorch raises)", " [",
                            notes.size(), "]");
      }
      table << " " << cell << " |";
    }
    table << " " << row.tests << " |\n";
  }
  table << "\nErrors, exactly as the compiler reports them:\n\n";
  for (size_t i = 0; i < notes.size(); ++i) {
    table << i + 1 << ". " << notes[i] << "\n";
  }
  return table.str();
}

constexpr char kBegin[] =
    "<!-- BEGIN GENERATED by //rbln/compiler/frontend/ops:op_coverage_test "
    "-->\n";
constexpr char kEnd[] = "<!-- END GENERATED -->";

TEST(OpCoverageTest, DocMatchesTheCompiler) {
  const std::string generated = GenerateSection();
  if (const char* path = std::getenv("RBLN_OP_COVERAGE_OUT")) {
    std::ofstream(path) << generated;
  }
  std::ifstream in("docs/compiler-op-coverage.md");
  ASSERT_TRUE(in.good()) << "docs/compiler-op-coverage.md is not a data dep";
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const size_t begin = text.find(kBegin);
  const size_t end = text.find(kEnd);
  ASSERT_NE(begin, std::string::npos) << "no BEGIN GENERATED marker";
  ASSERT_NE(end, std::string::npos) << "no END GENERATED marker";
  const std::string section =
      text.substr(begin + sizeof(kBegin) - 1, end - begin - sizeof(kBegin) + 1);
  EXPECT_EQ(section, generated)
      << "docs/compiler-op-coverage.md is out of date; its generated "
         "section should be:\n"
      << generated;
}

// Every cell PyTorch accepts compiles and runs: the audit found no gap that
// is still open (a new **no** cell fails here even if the doc is updated).
TEST(OpCoverageTest, EveryDTypePyTorchAcceptsIsSupported) {
  const std::vector<Row> rows = Rows();
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t d = 0; d < std::size(kDTypes); ++d) {
      if (!TorchAccepts(rows[r].torch, kDTypes[d])) continue;
      EXPECT_TRUE(Results()[r][d].ok())
          << rows[r].op << " on " << Name(kDTypes[d]) << ": "
          << Results()[r][d];
    }
  }
}

}  // namespace
}  // namespace rbln::compiler::testing

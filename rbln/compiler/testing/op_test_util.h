// Helpers for the op tests: one-op graphs, host tensors in every dtype,
// running compiled programs and comparing with double-precision references.
#ifndef RBLN_COMPILER_TESTING_OP_TEST_UTIL_H_
#define RBLN_COMPILER_TESTING_OP_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "mlir/IR/MLIRContext.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/test_graphs.h"
#include "rbln/core/dtype.h"

namespace rbln::compiler::testing {

using Shape = std::vector<int64_t>;

inline int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// `v` as stored in `dtype` (round to nearest even; ints truncate).
inline double RoundTo(ir::DType dtype, double v) {
  switch (dtype) {
    case ir::FLOAT32:
      return static_cast<float>(v);
    case ir::FLOAT16:
      return static_cast<float>(static_cast<_Float16>(v));
    case ir::BFLOAT16:
      return Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
    case ir::INT32:
      return static_cast<int32_t>(v);
    default:
      return static_cast<int64_t>(v);
  }
}

// The unit roundoff of `dtype` (half an ulp at 1).
inline double UnitRoundoff(ir::DType dtype) {
  switch (dtype) {
    case ir::FLOAT16:
      return std::ldexp(1.0, -11);
    case ir::BFLOAT16:
      return std::ldexp(1.0, -8);
    case ir::FLOAT32:
      return std::ldexp(1.0, -24);
    default:
      return 0;
  }
}

struct HostTensor {
  ir::DType dtype = ir::FLOAT32;
  Shape shape;
  std::vector<double> values;  // each exactly representable in dtype

  ir::TensorType type() const { return Type(dtype, shape); }
};

// Deterministic values in [lo, hi), rounded to `dtype`.
inline HostTensor Random(ir::DType dtype, Shape shape, uint32_t seed,
                         double lo = -2.0, double hi = 2.0) {
  HostTensor t{dtype, std::move(shape), {}};
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (int64_t i = 0; i < NumElements(t.shape); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) / 9007199254740992.0;
    double v = lo + (hi - lo) * u;
    if (dtype == ir::INT32 || dtype == ir::INT64) v = std::floor(v);
    t.values.push_back(RoundTo(dtype, v));
  }
  return t;
}

inline HostTensor Tensor(ir::DType dtype, Shape shape,
                         std::vector<double> values) {
  for (double& v : values) v = RoundTo(dtype, v);
  return HostTensor{dtype, std::move(shape), std::move(values)};
}

// Bytes of one element: core's size (a dtype the enum does not name reads
// as bool, 1 byte, through ToRuntimeDType).
inline size_t ElementSize(ir::DType dtype) {
  return static_cast<size_t>(rbln::DTypeSize(ir::ToRuntimeDType(dtype)));
}

inline std::vector<uint8_t> Encode(const HostTensor& t) {
  const size_t size = ElementSize(t.dtype);
  std::vector<uint8_t> bytes(std::max<size_t>(1, t.values.size() * size));
  for (size_t i = 0; i < t.values.size(); ++i) {
    uint8_t* p = bytes.data() + i * size;
    const double v = t.values[i];
    switch (t.dtype) {
      case ir::FLOAT32: {
        float f = v;
        std::memcpy(p, &f, 4);
        break;
      }
      case ir::FLOAT16: {
        _Float16 h = static_cast<_Float16>(v);
        std::memcpy(p, &h, 2);
        break;
      }
      case ir::BFLOAT16: {
        uint16_t b = FloatToBf16(static_cast<float>(v));
        std::memcpy(p, &b, 2);
        break;
      }
      case ir::INT32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case ir::INT64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case ir::INT16: {
        int16_t x = static_cast<int16_t>(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case ir::INT8:
        *p = static_cast<uint8_t>(static_cast<int8_t>(v));
        break;
      case ir::UINT8:
        *p = static_cast<uint8_t>(v);
        break;
      default:
        *p = v != 0;
    }
  }
  return bytes;
}

inline std::vector<double> Decode(ir::DType dtype,
                                  const std::vector<uint8_t>& bytes,
                                  int64_t n) {
  std::vector<double> out;
  const size_t size = ElementSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = bytes.data() + i * size;
    switch (dtype) {
      case ir::FLOAT32: {
        float f;
        std::memcpy(&f, p, 4);
        out.push_back(f);
        break;
      }
      case ir::FLOAT16: {
        _Float16 h;
        std::memcpy(&h, p, 2);
        out.push_back(static_cast<float>(h));
        break;
      }
      case ir::BFLOAT16: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        out.push_back(Bf16ToFloat(b));
        break;
      }
      case ir::INT32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        out.push_back(x);
        break;
      }
      case ir::INT64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        out.push_back(static_cast<double>(x));
        break;
      }
      case ir::INT16: {
        int16_t x;
        std::memcpy(&x, p, 2);
        out.push_back(x);
        break;
      }
      case ir::INT8:
        out.push_back(static_cast<int8_t>(*p));
        break;
      default:
        out.push_back(*p);
    }
  }
  return out;
}

// --- Graphs. -----------------------------------------------------------------

inline ir::Attribute IntA(int64_t v) {
  ir::Attribute a;
  a.set_i(v);
  return a;
}
inline ir::Attribute FloatA(double v) {
  ir::Attribute a;
  a.set_f(v);
  return a;
}
inline ir::Attribute StrA(const std::string& v) {
  ir::Attribute a;
  a.set_s(v);
  return a;
}
inline ir::Attribute BoolA(bool v) {
  ir::Attribute a;
  a.set_b(v);
  return a;
}
using Attrs = std::map<std::string, ir::Attribute>;

// One node `op` over inputs %in0.. with outputs %out0..
inline ir::Graph OneOpGraph(const std::string& op,
                            const std::vector<ir::TensorType>& inputs,
                            const std::vector<ir::TensorType>& outputs,
                            const Attrs& attrs = {}) {
  ir::Graph g;
  g.set_name(op);
  ir::Node* n = g.add_nodes();
  n->set_op(op);
  for (size_t i = 0; i < inputs.size(); ++i) {
    AddInput(g, "in" + std::to_string(i), inputs[i]);
    n->add_inputs("in" + std::to_string(i));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    ir::Value* v = n->add_outputs();
    v->set_name("out" + std::to_string(i));
    *v->mutable_type() = outputs[i];
    g.add_outputs(v->name());
  }
  for (const auto& [name, attr] : attrs) (*n->mutable_attrs())[name] = attr;
  return g;
}

// --- Running. ----------------------------------------------------------------

inline std::vector<int64_t> ContiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

inline DType RuntimeDType(ir::DType t) { return ir::ToRuntimeDType(t); }

// Runs `program` on `inputs`; outputs start as `output_fill`.
inline absl::StatusOr<std::vector<HostTensor>> RunProgram(
    const CompiledProgram& program, const std::vector<HostTensor>& inputs,
    double output_fill = 0.0) {
  std::vector<HostTensor> outputs;
  const std::vector<ir::TensorType>& types = program.arg_types();
  for (size_t i = inputs.size(); i < types.size(); ++i) {
    Shape shape(types[i].shape().begin(), types[i].shape().end());
    outputs.push_back(
        HostTensor{types[i].dtype(), shape,
                   std::vector<double>(NumElements(shape), output_fill)});
  }
  std::vector<std::vector<uint8_t>> buffers;
  for (const HostTensor& t : inputs) buffers.push_back(Encode(t));
  for (const HostTensor& t : outputs) buffers.push_back(Encode(t));
  std::vector<runtime::BufferView> args;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const HostTensor& t =
        i < inputs.size() ? inputs[i] : outputs[i - inputs.size()];
    args.push_back({buffers[i].data(), RuntimeDType(t.dtype), t.shape,
                    ContiguousStrides(t.shape)});
  }
  if (absl::Status s = program.Execute(args); !s.ok()) return s;
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].values = Decode(outputs[i].dtype, buffers[inputs.size() + i],
                               NumElements(outputs[i].shape));
  }
  return outputs;
}

// Compiles with the full pipeline (the process's compiler) and runs.
inline absl::StatusOr<std::vector<HostTensor>> CompileAndRun(
    const ir::Graph& graph, const std::vector<HostTensor>& inputs) {
  static auto* compiler = new Compiler();
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> program =
      compiler->Compile(graph);
  if (!program.ok()) return program.status();
  return RunProgram(**program, inputs);
}

// Compiles with explicit `stages` in a fresh context.
inline absl::StatusOr<std::unique_ptr<CompiledProgram>> CompileWith(
    const ir::Graph& graph, const std::vector<Stage>& stages,
    mlir::MLIRContext* context) {
  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
      ImportGraph(graph, context);
  if (!module.ok()) return module.status();
  if (absl::Status s = RunStages(**module, stages, graph.name()); !s.ok()) {
    return s;
  }
  return CompiledProgram::Create(**module, graph);
}

// --- Comparing. --------------------------------------------------------------

// |got - want| <= tol[i] elementwise; NaN matches NaN and infinities match
// exactly.
inline void ExpectClose(const HostTensor& got, const std::vector<double>& want,
                        const std::vector<double>& tol,
                        const std::string& what) {
  ASSERT_EQ(got.values.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 5; ++i) {
    const double g = got.values[i], w = want[i];
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else if (std::isinf(w)) {
      ok = g == w;
    } else {
      ok = std::fabs(g - w) <= tol[i];
    }
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << " [" << i << "]: got " << g << ", want " << w
                    << " (tolerance " << tol[i] << ")";
    }
  }
}

inline void ExpectExact(const HostTensor& got, const std::vector<double>& want,
                        const std::string& what) {
  ExpectClose(got, want, std::vector<double>(want.size(), 0.0), what);
}

inline std::string ShapeText(const Shape& s) {
  return "[" + absl::StrJoin(s, ",") + "]";
}

inline std::string DTypeText(ir::DType t) { return ir::DType_Name(t); }

inline bool IsFloatDType(ir::DType t) {
  return t == ir::FLOAT16 || t == ir::BFLOAT16 || t == ir::FLOAT32;
}

// Row-major multi-index of element `flat` of `shape`, and back.
inline std::vector<int64_t> Unflatten(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

inline int64_t Flatten(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// Ops of type OpT in `m` (at any depth).
template <typename OpT>
int Count(mlir::ModuleOp m) {
  int n = 0;
  m.walk([&](OpT) { ++n; });
  return n;
}

// The first output of a one-op graph compiled and run; a failure fails the
// test with the graph's text (and returns an empty tensor).
inline HostTensor RunOne(const ir::Graph& g, const std::vector<HostTensor>& inputs) {
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, inputs);
  EXPECT_TRUE(out.ok()) << out.status() << "\n" << ir::ToText(g);
  if (!out.ok()) return HostTensor{};
  return (*out)[0];
}

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_TESTING_OP_TEST_UTIL_H_

// Small graphs and reference helpers shared by the compiler's tests.
#ifndef RBLN_COMPILER_TEST_GRAPHS_H_
#define RBLN_COMPILER_TEST_GRAPHS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler::testing {

inline ir::TensorType Type(ir::DType dtype, std::vector<int64_t> shape) {
  ir::TensorType t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

inline void AddInput(ir::Graph& g, const std::string& name,
                     const ir::TensorType& t) {
  ir::Value* v = g.add_inputs();
  v->set_name(name);
  *v->mutable_type() = t;
}

inline void AddNode(ir::Graph& g, const std::string& op,
                    std::initializer_list<std::string> inputs,
                    const std::string& out, const ir::TensorType& t,
                    double alpha = 1.0) {
  ir::Node* n = g.add_nodes();
  n->set_op(op);
  for (const std::string& in : inputs) n->add_inputs(in);
  ir::Value* v = n->add_outputs();
  v->set_name(out);
  *v->mutable_type() = t;
  // As the producers write a Python scalar: an integral alpha is an int
  // (valid on every dtype), a fractional one a float.
  if (alpha != 1.0) {
    ir::Attribute& a = (*n->mutable_attrs())["alpha"];
    if (alpha == std::trunc(alpha)) {
      a.set_i(static_cast<int64_t>(alpha));
    } else {
      a.set_f(alpha);
    }
  }
}

// out = a + alpha * b, all of type `t` (or b of `b_type` when given).
inline ir::Graph AddGraph(const ir::TensorType& t, double alpha = 1.0) {
  ir::Graph g;
  g.set_name("add");
  AddInput(g, "a", t);
  AddInput(g, "b", t);
  AddNode(g, "add", {"a", "b"}, "out", t, alpha);
  g.add_outputs("out");
  return g;
}

// out = (a + b) + c: two element-wise ops that fusion turns into one.
inline ir::Graph AddChainGraph(const ir::TensorType& t) {
  ir::Graph g;
  g.set_name("add_chain");
  AddInput(g, "a", t);
  AddInput(g, "b", t);
  AddInput(g, "c", t);
  AddNode(g, "add", {"a", "b"}, "t0", t);
  AddNode(g, "add", {"t0", "c"}, "out", t);
  g.add_outputs("out");
  return g;
}

// bfloat16 <-> float with c10::BFloat16's rounding (nearest even).
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (f != f) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
inline float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_TEST_GRAPHS_H_

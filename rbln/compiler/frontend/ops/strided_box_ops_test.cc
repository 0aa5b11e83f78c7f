// strided_view and fill_strided against a host reference (the box's
// elements enumerated by their coordinates), for the views eager ops see;
// fill_strided in place (input and output the same buffer, as the torch
// layer runs it) and out of place.
// spec: G1 (fill_/zero_ of device-resident storages on the device),
// spec: G3, H7 (view inputs read from their base inside the program)
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

struct Box {
  Shape sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// The reference: `x` with every element of the box set to `value`.
std::vector<double> Reference(const HostTensor& x, const Box& box, double value) {
  std::vector<double> out = x.values;
  std::vector<int64_t> k(box.sizes.size(), 0);
  for (int64_t n = 0; n < NumElements(box.sizes); ++n) {
    int64_t at = box.offset;
    for (size_t d = 0; d < k.size(); ++d) at += k[d] * box.strides[d];
    out[at] = value;
    for (int d = static_cast<int>(k.size()) - 1; d >= 0; --d) {
      if (++k[d] < box.sizes[d]) break;
      k[d] = 0;
    }
  }
  return out;
}

ir::Graph FillGraph(ir::DType dtype, int64_t n, const Box& box, ir::Attribute value) {
  return OneOpGraph("fill_strided", {Type(dtype, {n})}, {Type(dtype, {n})},
                    {{"value", value},
                     {"sizes", StrA(absl::StrJoin(box.sizes, ","))},
                     {"strides", StrA(absl::StrJoin(box.strides, ","))},
                     {"offset", IntA(box.offset)}});
}

// Runs `program` with one buffer as input and output (the eager in-place
// call).
std::vector<double> RunInPlace(const CompiledProgram& program, const HostTensor& x) {
  std::vector<uint8_t> bytes = Encode(x);
  const runtime::BufferView view{bytes.data(), RuntimeDType(x.dtype), x.shape,
                                 ContiguousStrides(x.shape)};
  const std::vector<runtime::BufferView> args = {view, view};
  EXPECT_TRUE(program.Execute(args).ok());
  return Decode(x.dtype, bytes, NumElements(x.shape));
}

TEST(StridedFillOpTest, FillsViewBoxesInPlaceAndOutOfPlace) {
  // Boxes of a [4, 8] storage (32 elements) as PyTorch views give them.
  const std::vector<std::pair<std::string, Box>> boxes = {
      {"x", {{4, 8}, {8, 1}, 0}},
      {"x[:, ::2]", {{4, 4}, {8, 2}, 0}},
      {"x.t()", {{8, 4}, {1, 8}, 0}},
      {"x[1:3, 2:7]", {{2, 5}, {8, 1}, 10}},
      {"x[:, 3]", {{4}, {8}, 3}},
      {"x[2]", {{8}, {1}, 16}},
      {"x[::3, 1::3]", {{2, 3}, {24, 3}, 1}},
      {"x.view(2,2,8)[:, 1].unsqueeze(1)", {{2, 1, 8}, {16, 99, 1}, 8}},
      {"x[:, :0]", {{4, 0}, {8, 1}, 0}},
  };
  static auto* compiler = new Compiler();
  for (ir::DType dtype : {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32}) {
    for (const auto& [name, box] : boxes) {
      for (double value : {3.0, -0.0, 1.0 / 3.0, static_cast<double>(INFINITY)}) {
        SCOPED_TRACE(absl::StrCat(DTypeText(dtype), " ", name, " value ", value));
        const HostTensor x = Random(dtype, {32}, 7);
        const ir::Graph g = FillGraph(dtype, 32, box, FloatA(value));
        absl::StatusOr<std::shared_ptr<const CompiledProgram>> program =
            compiler->Compile(g);
        ASSERT_TRUE(program.ok()) << program.status();
        const std::vector<double> want = Reference(x, box, RoundTo(dtype, value));
        absl::StatusOr<std::vector<HostTensor>> out = RunProgram(**program, {x});
        ASSERT_TRUE(out.ok()) << out.status();
        ExpectExact((*out)[0], want, name);
        HostTensor in_place = x;
        in_place.values = RunInPlace(**program, x);
        ExpectExact(in_place, want, name);
      }
    }
  }
}

// The box's elements in row-major order of its coordinates.
std::vector<double> Gather(const HostTensor& x, const Box& box) {
  std::vector<double> out;
  std::vector<int64_t> k(box.sizes.size(), 0);
  for (int64_t n = 0; n < NumElements(box.sizes); ++n) {
    int64_t at = box.offset;
    for (size_t d = 0; d < k.size(); ++d) at += k[d] * box.strides[d];
    out.push_back(x.values[at]);
    for (int d = static_cast<int>(k.size()) - 1; d >= 0; --d) {
      if (++k[d] < box.sizes[d]) break;
      k[d] = 0;
    }
  }
  return out;
}

ir::Graph ViewGraph(ir::DType dtype, int64_t n, const Box& box) {
  return OneOpGraph("strided_view", {Type(dtype, {n})}, {Type(dtype, box.sizes)},
                    {{"sizes", StrA(absl::StrJoin(box.sizes, ","))},
                     {"strides", StrA(absl::StrJoin(box.strides, ","))},
                     {"offset", IntA(box.offset)}});
}

TEST(StridedViewOpTest, ReadsViewsOfAFlatBase) {
  // Views of a [4, 8] base (32 elements), including overlapping ones.
  const std::vector<std::pair<std::string, Box>> views = {
      {"x.t()", {{8, 4}, {1, 8}, 0}},
      {"x.permute(2, 0, 1) of [2, 2, 8]", {{8, 2, 2}, {1, 16, 8}, 0}},
      {"x[:, ::2]", {{4, 4}, {8, 2}, 0}},
      {"x[1:3, 2:7]", {{2, 5}, {8, 1}, 10}},
      {"x[2]", {{8}, {1}, 16}},
      {"x[2, 5]", {{}, {}, 21}},
      {"x[0].expand(3, 8)", {{3, 8}, {0, 1}, 0}},
      {"x[:, :0]", {{4, 0}, {8, 1}, 0}},
  };
  for (ir::DType dtype : {ir::FLOAT16, ir::BFLOAT16, ir::FLOAT32, ir::INT64, ir::BOOL}) {
    for (const auto& [name, box] : views) {
      SCOPED_TRACE(absl::StrCat(DTypeText(dtype), " ", name));
      const HostTensor x = dtype == ir::BOOL ? Random(dtype, {32}, 5, 0.0, 2.0)
                                             : Random(dtype, {32}, 5);
      absl::StatusOr<std::vector<HostTensor>> out =
          CompileAndRun(ViewGraph(dtype, 32, box), {x});
      ASSERT_TRUE(out.ok()) << out.status();
      ExpectExact((*out)[0], Gather(x, box), name);
    }
  }
}

TEST(StridedViewOpTest, FusesIntoTheConsumingOp) {
  // The eager graph of `x.t() + y`: the view replayed from the base, then
  // the op.
  const Box box{{8, 4}, {1, 8}, 0};
  ir::Graph g;
  g.set_name("add");
  AddInput(g, "self.base", Type(ir::FLOAT16, {32}));
  AddInput(g, "other", Type(ir::FLOAT16, {8, 4}));
  ir::Node* view = g.add_nodes();
  view->set_op("strided_view");
  view->add_inputs("self.base");
  ir::Value* self = view->add_outputs();
  self->set_name("self");
  *self->mutable_type() = Type(ir::FLOAT16, {8, 4});
  (*view->mutable_attrs())["sizes"] = StrA("8,4");
  (*view->mutable_attrs())["strides"] = StrA("1,8");
  ir::Node* add = g.add_nodes();
  add->set_op("add");
  add->add_inputs("self");
  add->add_inputs("other");
  ir::Value* result = add->add_outputs();
  result->set_name("result");
  *result->mutable_type() = Type(ir::FLOAT16, {8, 4});
  g.add_outputs("result");
  const HostTensor x = Random(ir::FLOAT16, {32}, 1);
  const HostTensor y = Random(ir::FLOAT16, {8, 4}, 2);
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {x, y});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> want = Gather(x, box);
  for (size_t i = 0; i < want.size(); ++i) want[i] = RoundTo(ir::FLOAT16, want[i] + y.values[i]);
  ExpectExact((*out)[0], want, "x.t() + y");
}

TEST(StridedViewOpTest, RejectsViewsOutsideTheBase) {
  const HostTensor x = Random(ir::FLOAT16, {16}, 1);
  absl::StatusOr<std::vector<HostTensor>> out =
      CompileAndRun(ViewGraph(ir::FLOAT16, 16, {{4, 4}, {4, 1}, 1}), {x});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("reaches element 16 of a 16-element buffer"),
            std::string::npos)
      << out.status();
}

TEST(StridedFillOpTest, IntegerAndBoolValues) {
  const Box box{{3}, {2}, 1};
  const HostTensor x = Random(ir::FLOAT16, {8}, 3);
  HostTensor got = (*CompileAndRun(FillGraph(ir::FLOAT16, 8, box, IntA(5)), {x}))[0];
  ExpectExact(got, Reference(x, box, 5.0), "int value");
  got = (*CompileAndRun(FillGraph(ir::FLOAT16, 8, box, BoolA(true)), {x}))[0];
  ExpectExact(got, Reference(x, box, 1.0), "bool value");
}

TEST(StridedFillOpTest, RejectsBoxesOutsideTheBufferOrOverlappingThemselves) {
  const HostTensor x = Random(ir::FLOAT16, {16}, 1);
  struct Bad {
    Box box;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {{{4, 4}, {4, 1}, 1}, "reaches element 16 of a 16-element buffer"},
      {{{4, 4}, {1, 2}, 0}, "overlaps itself"},
      {{{4}, {0}, 0}, "overlaps itself"},
      {{{2}, {1}, -1}, "offset must be non-negative"},
  };
  for (const Bad& b : bad) {
    absl::StatusOr<std::vector<HostTensor>> out =
        CompileAndRun(FillGraph(ir::FLOAT16, 16, b.box, FloatA(1)), {x});
    ASSERT_FALSE(out.ok()) << b.message;
    EXPECT_NE(out.status().message().find(b.message), std::string::npos) << out.status();
  }
  // Input and output must be one flat buffer type.
  const ir::Graph g = OneOpGraph("fill_strided", {Type(ir::FLOAT16, {4, 4})},
                                 {Type(ir::FLOAT16, {4, 4})},
                                 {{"value", FloatA(1)}, {"sizes", StrA("4")},
                                  {"strides", StrA("1")}});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {Random(ir::FLOAT16, {4, 4}, 1)});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("must be a flat buffer"), std::string::npos)
      << out.status();
}

}  // namespace
}  // namespace rbln::compiler::testing

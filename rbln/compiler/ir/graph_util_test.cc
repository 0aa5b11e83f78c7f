#include "rbln/compiler/ir/graph_util.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln::compiler::ir {
namespace {

using ::testing::HasSubstr;

Graph AddGraph() {
  Graph g;
  g.set_name("add");
  for (const char* name : {"a", "b"}) {
    Value* v = g.add_inputs();
    v->set_name(name);
    v->mutable_type()->set_dtype(FLOAT16);
    v->mutable_type()->add_shape(2);
    v->mutable_type()->add_shape(3);
  }
  Node* n = g.add_nodes();
  n->set_op("add");
  n->add_inputs("a");
  n->add_inputs("b");
  Value* out = n->add_outputs();
  out->set_name("out");
  *out->mutable_type() = g.inputs(0).type();
  (*n->mutable_attrs())["alpha"].set_f(1.0);
  (*n->mutable_attrs())["beta"].set_i(2);
  g.add_outputs("out");
  return g;
}

TEST(GraphUtilTest, ValidGraphPasses) { EXPECT_TRUE(Validate(AddGraph()).ok()); }

TEST(GraphUtilTest, UndefinedInputIsReported) {
  Graph g = AddGraph();
  g.mutable_nodes(0)->set_inputs(1, "c");
  absl::Status s = Validate(g);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("undefined value %c"));
}

TEST(GraphUtilTest, DuplicateAndMissingOutput) {
  Graph g = AddGraph();
  g.mutable_nodes(0)->mutable_outputs(0)->set_name("a");
  EXPECT_THAT(Validate(g).message(), HasSubstr("defined twice"));
  g = AddGraph();
  g.clear_outputs();
  EXPECT_THAT(Validate(g).message(), HasSubstr("no outputs"));
}

TEST(GraphUtilTest, UpdatesWriteInputsOfTheirOwnType) {
  Graph g = AddGraph();
  Update* u = g.add_updates();
  u->set_input("a");
  u->set_value("out");
  EXPECT_TRUE(Validate(g).ok());
  g.clear_outputs();  // An update alone is a result.
  EXPECT_TRUE(Validate(g).ok());
  EXPECT_THAT(ToText(g), HasSubstr("  update %a = %out\n  return \n"));

  Graph twice = g;
  *twice.add_updates() = *u;
  EXPECT_THAT(Validate(twice).message(), HasSubstr("input %a is updated twice"));
  Graph not_input = g;
  not_input.mutable_updates(0)->set_input("out");
  EXPECT_THAT(Validate(not_input).message(), HasSubstr("%out, which is not a graph input"));
  Graph undefined = g;
  undefined.mutable_updates(0)->set_value("nope");
  EXPECT_THAT(Validate(undefined).message(), HasSubstr("undefined value %nope"));
  Graph other_type = g;
  other_type.mutable_inputs(0)->mutable_type()->set_dtype(FLOAT32);
  EXPECT_THAT(Validate(other_type).message(),
              HasSubstr("update of %a (f32[2,3]) with %out of another type (f16[2,3])"));
}

TEST(GraphUtilTest, FingerprintIsStableAndSensitive) {
  Graph a = AddGraph();
  Graph b = AddGraph();
  EXPECT_EQ(Fingerprint(a), Fingerprint(b));
  b.mutable_inputs(1)->mutable_type()->set_shape(1, 4);
  EXPECT_NE(Fingerprint(a), Fingerprint(b));
  Graph c = AddGraph();
  (*c.mutable_nodes(0)->mutable_attrs())["alpha"].set_f(2.0);
  EXPECT_NE(Fingerprint(a), Fingerprint(c));
  Graph d = AddGraph();
  d.add_updates()->set_input("a");
  d.mutable_updates(0)->set_value("out");
  EXPECT_NE(Fingerprint(a), Fingerprint(d));
}

TEST(GraphUtilTest, TextDump) {
  EXPECT_EQ(ToText(AddGraph()),
            "graph add(%a: f16[2,3], %b: f16[2,3]) {\n"
            "  %out: f16[2,3] = add(%a, %b) {alpha=1, beta=2}\n"
            "  return %out\n"
            "}\n");
}

}  // namespace
}  // namespace rbln::compiler::ir

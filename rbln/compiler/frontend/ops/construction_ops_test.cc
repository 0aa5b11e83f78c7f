// spec: J6
//
// empty* and scalar_tensor (construction_ops.cc): outputs of the requested
// shape and dtype (empty*: zeros, where PyTorch leaves memory uninitialised).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/elementwise_test_util.h"

namespace rbln::compiler::testing {
namespace {

using ::testing::HasSubstr;

TEST(ConstructionOpsTest, EmptyFormsGiveZerosOfTheOutputType) {
  for (ir::DType t : kAllDTypes) {
    for (const std::string op : {"empty", "empty_permuted", "empty_strided"}) {
      for (const Shape& shape : {Shape{2, 3}, Shape{}, Shape{0, 4}}) {
        auto out = CompileAndRun(OneOpGraph(op, {}, {Type(t, shape)}), {});
        ASSERT_TRUE(out.ok()) << op << ": " << out.status();
        ExpectExact((*out)[0], std::vector<double>(NumElements(shape), 0.0),
                    op);
      }
    }
    // new_empty(x): x lends its dtype and device, not its shape.
    for (const std::string op : {"new_empty", "new_empty_strided"}) {
      HostTensor x = Tensor(ir::FLOAT32, {5}, {1, 2, 3, 4, 5});
      auto out =
          CompileAndRun(OneOpGraph(op, {x.type()}, {Type(t, {2, 2})}), {x});
      ASSERT_TRUE(out.ok()) << op << ": " << out.status();
      ExpectExact((*out)[0], {0, 0, 0, 0}, op);
    }
  }
}

TEST(ConstructionOpsTest, ScalarTensorCastsItsValue) {
  const std::pair<ir::DType, double> cases[] = {
      {ir::FLOAT32, 0.1}, {ir::FLOAT16, 0.1}, {ir::BFLOAT16, 0.1},
      {ir::INT64, -7},    {ir::INT32, 3},     {ir::BOOL, 1},
  };
  for (const auto& [t, v] : cases) {
    auto out = CompileAndRun(
        OneOpGraph("scalar_tensor", {}, {Type(t, {})}, {{"s", FloatA(v)}}),
        {});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectExact((*out)[0], {RoundTo(t, v)}, ir::DType_Name(t));
  }
  EXPECT_THAT(
      RunStatus("scalar_tensor", {}, Type(ir::FLOAT32, {})).message(),
      HasSubstr("needs the attr s"));
  EXPECT_THAT(RunStatus("scalar_tensor", {}, Type(ir::FLOAT32, {2}),
                        {{"s", FloatA(1)}})
                  .message(),
              HasSubstr("must be 0-d"));
}

}  // namespace
}  // namespace rbln::compiler::testing

// int8, int16 and uint8 through the frontend: stored narrow, computed in i32
// (GraphImporter::ComputeType), so results wrap as PyTorch's integer ops do
// and uint8 compares, divides and converts as unsigned. Expected values are
// what torch 2.13 on the CPU gives (noted per case).
// spec: J1, J6

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::ElementsAreArray;
using namespace testing;  // NOLINT: the op test helpers.

std::vector<double> Values(const ir::Graph& g, const std::vector<HostTensor>& in) {
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, in);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0].values : std::vector<double>{};
}

TEST(NarrowIntOpsTest, Uint8AddWrapsAndComparesUnsigned) {
  const ir::TensorType u8 = Type(ir::UINT8, {4});
  const HostTensor a{ir::UINT8, {4}, {200, 255, 0, 128}};
  const HostTensor b{ir::UINT8, {4}, {100, 1, 1, 127}};
  // torch.tensor([200,255,0,128], dtype=torch.uint8) + [100,1,1,127]
  EXPECT_THAT(Values(OneOpGraph("add", {u8, u8}, {u8}), {a, b}),
              ElementsAreArray({44, 0, 1, 255}));
  EXPECT_THAT(Values(OneOpGraph("gt", {u8, u8}, {Type(ir::BOOL, {4})}), {a, b}),
              ElementsAreArray({1, 1, 0, 1}));
  EXPECT_THAT(Values(OneOpGraph("maximum", {u8, u8}, {u8}), {a, b}),
              ElementsAreArray({200, 255, 1, 128}));
  // a // b on uint8: 200 // 100 = 2, 255 // 1, 0 // 1, 128 // 127.
  EXPECT_THAT(Values(OneOpGraph("div", {u8, u8}, {u8},
                             {{"rounding_mode", StrA("floor")}}),
                  {a, b}),
              ElementsAreArray({2, 255, 0, 1}));
}

TEST(NarrowIntOpsTest, Int8AndInt16WrapSigned) {
  const ir::TensorType i8 = Type(ir::INT8, {3});
  const HostTensor a{ir::INT8, {3}, {127, -128, -7}};
  // torch.tensor([127,-128,-7], dtype=torch.int8) * 2 -> [-2, 0, -14]
  EXPECT_THAT(Values(OneOpGraph("mul", {i8}, {i8}, {{"other", IntA(2)}}), {a}),
              ElementsAreArray({-2, 0, -14}));
  EXPECT_THAT(Values(OneOpGraph("neg", {i8}, {i8}), {a}),
              ElementsAreArray({-127, -128, 7}));
  const ir::TensorType i16 = Type(ir::INT16, {2});
  const HostTensor c{ir::INT16, {2}, {32767, -32768}};
  EXPECT_THAT(Values(OneOpGraph("add", {i16}, {i16}, {{"other", IntA(1)}}), {c}),
              ElementsAreArray({-32768, -32767}));
}

TEST(NarrowIntOpsTest, CastsKeepSignedness) {
  const HostTensor u{ir::UINT8, {3}, {255, 128, 0}};
  const HostTensor s{ir::INT8, {3}, {-1, -128, 0}};
  const ir::TensorType f32 = Type(ir::FLOAT32, {3});
  EXPECT_THAT(Values(OneOpGraph("_to_copy", {Type(ir::UINT8, {3})}, {f32}), {u}),
              ElementsAreArray({255, 128, 0}));
  EXPECT_THAT(Values(OneOpGraph("_to_copy", {Type(ir::INT8, {3})}, {f32}), {s}),
              ElementsAreArray({-1, -128, 0}));
  // int8 -> uint8 reinterprets modulo 256; uint8 -> int64 zero-extends.
  EXPECT_THAT(Values(OneOpGraph("_to_copy", {Type(ir::INT8, {3})},
                             {Type(ir::UINT8, {3})}),
                  {s}),
              ElementsAreArray({255, 128, 0}));
  EXPECT_THAT(Values(OneOpGraph("_to_copy", {Type(ir::UINT8, {3})},
                             {Type(ir::INT64, {3})}),
                  {u}),
              ElementsAreArray({255, 128, 0}));
}

TEST(NarrowIntOpsTest, ScalarBoundsAreCastToTheDtype) {
  // torch.tensor([0, 50, 200], dtype=torch.uint8).clamp(-5, 100): ATen casts
  // -5 to uint8 (251) > max, so every element is 100.
  const ir::TensorType u8 = Type(ir::UINT8, {3});
  const HostTensor a{ir::UINT8, {3}, {0, 50, 200}};
  EXPECT_THAT(Values(OneOpGraph("clamp", {u8}, {u8},
                             {{"min", IntA(-5)}, {"max", IntA(100)}}),
                  {a}),
              ElementsAreArray({100, 100, 100}));
}

TEST(NarrowIntOpsTest, SumPromotesToInt64) {
  const HostTensor a{ir::UINT8, {4}, {255, 255, 255, 255}};
  EXPECT_THAT(Values(OneOpGraph("sum", {Type(ir::UINT8, {4})},
                             {Type(ir::INT64, {})}),
                  {a}),
              ElementsAreArray({1020}));
}

TEST(NarrowIntOpsTest, IndexReduceWithoutSelfStartsAtTheDtypesBounds) {
  // torch.tensor([9, 3], dtype=d).index_reduce(0, torch.tensor([0]),
  // torch.tensor([6], dtype=d), "amin" / "amax", include_self=False) is
  // [6, 3] for every d: the targeted entry starts at d's max / lowest (an
  // i32 bound stored narrow would be -1 / 0 and win the comparison).
  for (ir::DType d : {ir::INT8, ir::UINT8, ir::INT16}) {
    const HostTensor x{d, {2}, {9, 3}};
    const HostTensor index{ir::INT64, {1}, {0}};
    const HostTensor source{d, {1}, {6}};
    for (const char* reduce : {"amin", "amax"}) {
      ir::Graph g = OneOpGraph("index_reduce", {x.type(), index.type(), source.type()},
                               {x.type()},
                               {{"dim", IntA(0)},
                                {"reduce", StrA(reduce)},
                                {"include_self", BoolA(false)}});
      EXPECT_THAT(Values(g, {x, index, source}), ElementsAreArray({6, 3}))
          << ir::ToText(g);
    }
  }
}

TEST(NarrowIntOpsTest, AddbmmWraps) {
  // torch.tensor([[100]], dtype=torch.int8).addbmm(b1, b2) with b1 = b2 =
  // [[[10]], [[5]]] (batches 2, 1x1): 100 + 100 + 25 = 225 -> -31.
  const HostTensor self{ir::INT8, {1, 1}, {100}};
  const HostTensor b{ir::INT8, {2, 1, 1}, {10, 5}};
  ir::Graph g = OneOpGraph("addbmm", {self.type(), b.type(), b.type()}, {self.type()});
  EXPECT_THAT(Values(g, {self, b, b}), ElementsAreArray({-31}));
}

TEST(NarrowIntOpsTest, AnyAndAllOfUint8AreUint8) {
  // torch.tensor([[0, 3], [0, 0]], dtype=torch.uint8).any(1) is uint8 [1, 0];
  // .all(1) is [0, 0].
  const HostTensor x{ir::UINT8, {2, 2}, {0, 3, 0, 0}};
  const ir::TensorType out = Type(ir::UINT8, {2});
  EXPECT_THAT(Values(OneOpGraph("any", {x.type()}, {out}, {{"dim", IntA(1)}}), {x}),
              ElementsAreArray({1, 0}));
  EXPECT_THAT(Values(OneOpGraph("all", {x.type()}, {out}, {{"dim", IntA(1)}}), {x}),
              ElementsAreArray({0, 0}));
}

}  // namespace
}  // namespace rbln::compiler

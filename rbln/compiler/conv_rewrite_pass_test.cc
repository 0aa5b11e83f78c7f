// spec: P5, A2
// The convolution rewrite: which linalg convolutions become rbln_conv calls
// (blocked when large), and that oneDNN and the loops agree with a double
// reference on hand-written kernels (a padded-and-strided view as input, a
// view as output, accumulation into the output or a dropped zero fill).
#include "rbln/compiler/conv_rewrite_pass.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Parser/Parser.h"
#include "rbln/compiler/compiled_program.h"
#include "rbln/compiler/mlir_setup.h"
#include "rbln/compiler/onednn_conv.h"
#include "rbln/compiler/ops/op_test_util.h"
#include "rbln/compiler/partition_pass.h"
#include "rbln/compiler/pipelines.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.

Stage ConvStage() {
  RegisterConvRewritePass();
  return Stage{"conv", kConvRewritePassName, nullptr};
}

// %x [2, 3, 9, 13] read through a view starting at [0, 0, 1, 1]
// ([2, 3, 6, 12], strides 2 and dilations 2 -> [2, 4, 2, 4]) into a view of
// %y [2, 4, 3, 5] (accumulating); %a [4, 32, 18, 18] into a zero-filled %z
// [4, 32, 16, 16] with stride 1 (blocked: 9.4 M multiply-adds).
constexpr char kConvKernel[] = R"mlir(
func.func @kernel(%x: memref<2x3x9x13xf32>, %w: memref<4x3x2x3xf32>,
                  %a: memref<4x32x18x18xf32>, %v: memref<32x32x3x3xf32>,
                  %y: memref<2x4x3x5xf32>, %z: memref<4x32x16x16xf32>)
    attributes {llvm.emit_c_interface} {
  %sx = memref.subview %x[0, 0, 1, 1] [2, 3, 6, 12] [1, 1, 1, 1]
      : memref<2x3x9x13xf32>
        to memref<2x3x6x12xf32, strided<[351, 117, 13, 1], offset: 14>>
  %sy = memref.subview %y[0, 0, 1, 1] [2, 4, 2, 4] [1, 1, 1, 1]
      : memref<2x4x3x5xf32>
        to memref<2x4x2x4xf32, strided<[60, 15, 5, 1], offset: 6>>
  linalg.conv_2d_nchw_fchw
      {dilations = dense<2> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%sx, %w : memref<2x3x6x12xf32, strided<[351, 117, 13, 1], offset: 14>>,
                    memref<4x3x2x3xf32>)
      outs(%sy : memref<2x4x2x4xf32, strided<[60, 15, 5, 1], offset: 6>>)
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%z : memref<4x32x16x16xf32>)
  linalg.conv_2d_nchw_fchw
      {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%a, %v : memref<4x32x18x18xf32>, memref<32x32x3x3xf32>)
      outs(%z : memref<4x32x16x16xf32>)
  return
}
)mlir";

// out[n, f, oy0 + y, ox0 + x] += sum in[n, c, iy0 + y*s + i*d,
// ix0 + x*s + j*d] * w[f, c, i, j] over an [N, F, OH, OW] window.
void Convolve(const std::vector<double>& in, const Shape& is,
              const std::vector<double>& w, const Shape& ws, int64_t iy0,
              int64_t ix0, int64_t s, int64_t d, std::vector<double>& out,
              const Shape& os, int64_t oy0, int64_t ox0, int64_t oh,
              int64_t ow) {
  for (int64_t n = 0; n < os[0]; ++n) {
    for (int64_t f = 0; f < ws[0]; ++f) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          double sum = 0;
          for (int64_t c = 0; c < ws[1]; ++c) {
            for (int64_t i = 0; i < ws[2]; ++i) {
              for (int64_t j = 0; j < ws[3]; ++j) {
                sum += in[((n * is[1] + c) * is[2] + iy0 + y * s + i * d) *
                              is[3] +
                          ix0 + x * s + j * d] *
                       w[((f * ws[1] + c) * ws[2] + i) * ws[3] + j];
              }
            }
          }
          out[((n * os[1] + f) * os[2] + oy0 + y) * os[3] + ox0 + x] += sum;
        }
      }
    }
  }
}

int CountConvCalls(mlir::ModuleOp m) {
  int n = 0;
  m.walk([&](mlir::func::CallOp call) {
    if (call.getCallee() == kOnednnConvSymbol) ++n;
  });
  return n;
}

// The graph describing kConvKernel's arguments to CompiledProgram, and
// random inputs.
ir::Graph ConvGraph(std::vector<HostTensor>& inputs) {
  const ir::DType f = ir::FLOAT32;
  ir::Graph g;
  g.set_name("conv");
  const std::vector<Shape> in_shapes = {
      {2, 3, 9, 13}, {4, 3, 2, 3}, {4, 32, 18, 18}, {32, 32, 3, 3}};
  inputs.clear();
  for (size_t i = 0; i < in_shapes.size(); ++i) {
    AddInput(g, "in" + std::to_string(i), Type(f, in_shapes[i]));
    inputs.push_back(Random(f, in_shapes[i], 40 + i));
  }
  ir::Node* node = g.add_nodes();
  node->set_op("opaque");
  for (auto [name, shape] : std::vector<std::pair<std::string, Shape>>{
           {"y", {2, 4, 3, 5}}, {"z", {4, 32, 16, 16}}}) {
    ir::Value* v = node->add_outputs();
    v->set_name(name);
    *v->mutable_type() = Type(f, shape);
    g.add_outputs(name);
  }
  return g;
}

// kConvKernel through the rewrite (or not) and on `partitions` workers, run
// on `inputs` with outputs starting at 0.5.
std::vector<HostTensor> RunConvKernel(bool onednn, int partitions,
                                      const ir::Graph& g,
                                      const std::vector<HostTensor>& inputs) {
  auto context = CreateCompilerContext();
  auto module =
      mlir::parseSourceString<mlir::ModuleOp>(kConvKernel, context.get());
  EXPECT_TRUE(module);
  if (!module) return {};
  std::vector<Stage> stages;
  if (onednn) stages.push_back(ConvStage());
  if (partitions > 1) {
    stages.push_back(Stage{"partition", "", nullptr, [partitions] {
                             return CreatePartitionPass(
                                 {.partitions = partitions, .min_work = 0});
                           }});
  }
  stages.insert(stages.end(), LoweringStages().begin(), LoweringStages().end());
  absl::Status s = RunStages(*module, stages, "conv");
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  auto program = CompiledProgram::Create(*module, g);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return {};
  auto out = RunProgram(**program, inputs, /*output_fill=*/0.5);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  return *std::move(out);
}

TEST(ConvRewritePassTest, RewritesConvolutionsToBlockedCalls) {
  auto context = CreateCompilerContext();
  auto module =
      mlir::parseSourceString<mlir::ModuleOp>(kConvKernel, context.get());
  ASSERT_TRUE(module);
  ASSERT_TRUE(RunStages(*module, {ConvStage()}, "conv").ok());
  EXPECT_EQ(CountConvCalls(*module), 2);
  int linalg_ops = 0, blocked = 0;
  module->walk([&](mlir::Operation* op) {
    if (llvm::isa<mlir::linalg::LinalgOp>(op)) ++linalg_ops;
    if (llvm::isa<mlir::scf::ForOp>(op) &&
        op->hasAttr(kParallelIterationsAttr)) {
      ++blocked;
    }
  });
  EXPECT_EQ(linalg_ops, 0);  // both convolutions and the zero fill
  EXPECT_EQ(blocked, 1);     // the large one
}

TEST(ConvRewritePassTest, OnednnAndLoopsAgreeWithTheReference) {
  if (!LoadOnednn()) GTEST_SKIP() << "oneDNN is not installed";
  std::vector<HostTensor> inputs;
  const ir::Graph g = ConvGraph(inputs);
  const Shape ys = {2, 4, 3, 5}, zs = {4, 32, 16, 16};
  // y accumulates onto its initial 0.5, z is overwritten.
  std::vector<double> y(NumElements(ys), 0.5), z(NumElements(zs), 0.0);
  Convolve(inputs[0].values, inputs[0].shape, inputs[1].values,
           inputs[1].shape, 1, 1, 2, 2, y, ys, 1, 1, 2, 4);
  Convolve(inputs[2].values, inputs[2].shape, inputs[3].values,
           inputs[3].shape, 0, 0, 1, 1, z, zs, 0, 0, 16, 16);
  for (bool onednn : {true, false}) {
    std::vector<HostTensor> out = RunConvKernel(onednn, 1, g, inputs);
    ASSERT_EQ(out.size(), 2u);
    const std::string path = onednn ? "oneDNN" : "loops";
    // f32 accumulation of at most 288 products of values below 1.
    ExpectClose(out[0], y, std::vector<double>(y.size(), 2e-5), path + " y");
    ExpectClose(out[1], z, std::vector<double>(z.size(), 1e-4), path + " z");
  }
}

// The blocks of a call spread over the workers give the bits of one worker
// (SPEC A2).
TEST(ConvRewritePassTest, FourWorkersGiveTheBitsOfOne) {
  if (!LoadOnednn()) GTEST_SKIP() << "oneDNN is not installed";
  std::vector<HostTensor> inputs;
  const ir::Graph g = ConvGraph(inputs);
  std::vector<HostTensor> one = RunConvKernel(true, 1, g, inputs);
  std::vector<HostTensor> four = RunConvKernel(true, 4, g, inputs);
  ASSERT_EQ(one.size(), 2u);
  ASSERT_EQ(four.size(), 2u);
  for (int i = 0; i < 2; ++i) ExpectExact(four[i], one[i].values, "output");
}

// Convolutions the call cannot take stay for the loops.
TEST(ConvRewritePassTest, LeavesWhatOnednnCannotTakeToTheLoops) {
  constexpr char kKernel[] = R"mlir(
func.func @kernel(%x: memref<1x2x5x5xf16>, %w: memref<3x2x2x2xf16>,
                  %y: memref<1x3x4x4xf16>, %a: memref<1x2x5x5xf32>,
                  %v: memref<3x2x4x2xf32>, %z: memref<1x3x4x4xf32>) {
  linalg.conv_2d_nchw_fchw
      {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : memref<1x2x5x5xf16>, memref<3x2x2x2xf16>)
      outs(%y : memref<1x3x4x4xf16>)
  %sv = memref.subview %v[0, 0, 0, 0] [3, 2, 2, 2] [1, 1, 2, 1]
      : memref<3x2x4x2xf32>
        to memref<3x2x2x2xf32, strided<[16, 8, 4, 1]>>
  linalg.conv_2d_nchw_fchw
      {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%a, %sv : memref<1x2x5x5xf32>,
                    memref<3x2x2x2xf32, strided<[16, 8, 4, 1]>>)
      outs(%z : memref<1x3x4x4xf32>)
  return
}
)mlir";
  auto context = CreateCompilerContext();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kKernel, context.get());
  ASSERT_TRUE(module);
  ASSERT_TRUE(RunStages(*module, {ConvStage()}, "conv").ok());
  EXPECT_EQ(CountConvCalls(*module), 0);
  int convs = 0;
  module->walk([&](mlir::linalg::Conv2DNchwFchwOp) { ++convs; });
  EXPECT_EQ(convs, 2);
}

}  // namespace
}  // namespace rbln::compiler

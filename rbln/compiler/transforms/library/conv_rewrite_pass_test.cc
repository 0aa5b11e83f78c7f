// spec: P5, A2, P3
// The convolution rewrite: which linalg convolutions become rbln_conv calls
// (blocked when large), and that oneDNN and the loops agree with a double
// reference on hand-written kernels (a padded-and-strided view as input, a
// view as output, accumulation into the output or a dropped zero fill);
// in whole programs, bf16 operands read as stored, bf16 results stored by
// the call, and padded copies folded into the problem.
#include "rbln/compiler/transforms/library/passes.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Parser/Parser.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/kernels/onednn_conv.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/transforms/library/library_test_util.h"
#include "rbln/compiler/transforms/passes.h"

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
  absl::Status s = RunStages(*module, stages, "conv");
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  auto program = LowerToProgram(*module, g);
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

// --- Convolutions of a whole program (frontend, fusion, bufferization) ---

// out = conv(relu(conv(x, w1)), w2), both 3x3 with padding 1, in `dtype`.
ir::Graph TwoConvGraph(ir::DType dtype) {
  ir::Graph g;
  g.set_name("two_convs");
  AddInput(g, "x", Type(dtype, {1, 16, 10, 10}));
  AddInput(g, "w1", Type(dtype, {32, 16, 3, 3}));
  AddInput(g, "w2", Type(dtype, {16, 32, 3, 3}));
  const Attrs attrs = {{"stride", StrA("1,1")},
                       {"padding", StrA("1,1")},
                       {"dilation", StrA("1,1")},
                       {"output_padding", StrA("0,0")},
                       {"transposed", BoolA(false)},
                       {"groups", IntA(1)}};
  AddNode(g, "convolution", {"x", "w1"}, "y", Type(dtype, {1, 32, 10, 10}));
  AddNode(g, "relu", {"y"}, "h", Type(dtype, {1, 32, 10, 10}));
  AddNode(g, "convolution", {"h", "w2"}, "out", Type(dtype, {1, 16, 10, 10}));
  for (int i : {0, 2}) {
    for (const auto& [name, attr] : attrs) {
      (*g.mutable_nodes(i)->mutable_attrs())[name] = attr;
    }
  }
  g.add_outputs("out");
  return g;
}

// The problems of the rbln_conv calls in `m`, in order.
std::vector<ConvProblem> ConvProblems(mlir::ModuleOp m) {
  std::vector<ConvProblem> problems;
  m.walk([&](mlir::func::CallOp call) {
    if (call.getCallee() != kOnednnConvSymbol) return;
    auto cast = call.getOperand(0).getDefiningOp<mlir::arith::IndexCastOp>();
    auto pointer = cast ? cast.getIn()
                              .getDefiningOp<
                                  mlir::memref::ExtractAlignedPointerAsIndexOp>()
                        : nullptr;
    auto get = pointer ? pointer.getSource()
                             .getDefiningOp<mlir::memref::GetGlobalOp>()
                       : nullptr;
    auto global =
        get ? m.lookupSymbol<mlir::memref::GlobalOp>(get.getName()) : nullptr;
    ASSERT_TRUE(global && global.getInitialValue());
    std::vector<int64_t> words;
    for (const llvm::APInt& w :
         global.getInitialValue()->cast<mlir::DenseIntElementsAttr>()) {
      words.push_back(w.getSExtValue());
    }
    problems.push_back(ConvProblem::Decode(words.data()));
  });
  return problems;
}

// A bf16 program's convolutions read the bf16 input and kernel as they
// are stored and the unpadded input with the padding in the problem, and
// store bf16 for the relu and the output that only round their result: no
// f32 buffer, fill or copy is left. In f32 and f16 the padding is folded
// the same way, and f16 kernels are read as stored (the call widens them).
TEST(ConvRewritePassTest, ProgramConvolutionsReadBf16AndUnpaddedInputs) {
  for (ir::DType dtype : {ir::BFLOAT16, ir::FLOAT32, ir::FLOAT16}) {
    SCOPED_TRACE(DTypeText(dtype));
    auto context = CreateCompilerContext();
    auto module = ImportGraph(TwoConvGraph(dtype), context.get());
    ASSERT_TRUE(module.ok()) << module.status();
    std::vector<Stage> stages = FusionStages();
    stages.insert(stages.end(), BufferizationStages().begin(),
                  BufferizationStages().end());
    stages.push_back(ConvStage());
    ASSERT_TRUE(RunStages(**module, stages, "two_convs").ok());
    const std::vector<ConvProblem> problems = ConvProblems(**module);
    ASSERT_EQ(problems.size(), 2u);
    const bool bf16 = dtype == ir::BFLOAT16;
    for (const ConvProblem& p : problems) {
      SCOPED_TRACE(p.ToString());
      EXPECT_EQ(p.type, bf16 ? ConvOperandType::kBF16 : ConvOperandType::kF32);
      // f16: an f32 convolution that widens the f16 kernel itself.
      EXPECT_EQ(p.f16_kernel, dtype == ir::FLOAT16);
      EXPECT_EQ(p.epilogue.store, bf16 ? StoreType::kBF16 : StoreType::kF32);
      EXPECT_FALSE(p.accumulate);
      EXPECT_EQ(p.ih, 10);
      EXPECT_EQ(p.iw, 10);
      for (int64_t pad : {p.pad_top, p.pad_left, p.pad_bottom, p.pad_right}) {
        EXPECT_EQ(pad, 1);
      }
    }
    EXPECT_EQ(Count<mlir::linalg::FillOp>(**module), 0);
    EXPECT_EQ(Count<mlir::linalg::CopyOp>(**module), 0);
    EXPECT_EQ(Count<mlir::memref::CopyOp>(**module), 0);
    int f32_buffers = 0;
    (*module)->walk([&](mlir::memref::AllocOp alloc) {
      if (alloc.getType().getElementType().isF32()) ++f32_buffers;
    });
    // bf16: the relu reads the bits and stores bf16 only (f32: the first
    // result and the relu's, one buffer or two as bufferization reuses).
    if (bf16) {
      EXPECT_EQ(f32_buffers, 0);
    }
  }
}

// Against a double reference: the bf16 program's products are exact in
// f32, so it differs from the reference only in its f32 summation order
// and the bf16 roundings of the relu's input and the output.
TEST(ConvRewritePassTest, Bf16ProgramMatchesTheReference) {
  if (!LoadOnednn()) GTEST_SKIP() << "oneDNN is not installed";
  for (ir::DType dtype : {ir::BFLOAT16, ir::FLOAT32, ir::FLOAT16}) {
    SCOPED_TRACE(DTypeText(dtype));
    const HostTensor x = Random(dtype, {1, 16, 10, 10}, 7);
    const HostTensor w1 = Random(dtype, {32, 16, 3, 3}, 8);
    const HostTensor w2 = Random(dtype, {16, 32, 3, 3}, 9);
    absl::StatusOr<std::vector<HostTensor>> out =
        CompileAndRun(TwoConvGraph(dtype), {x, w1, w2});
    ASSERT_TRUE(out.ok()) << out.status();
    // Padded by one: conv[n, f, y, x] over c, i, j of
    // in[c, y + i - 1, x + j - 1] * w[f, c, i, j].
    auto conv = [](const std::vector<double>& in, int64_t channels,
                   const std::vector<double>& w, int64_t filters,
                   std::vector<double>& magnitude) {
      std::vector<double> o(filters * 100, 0.0);
      magnitude.assign(o.size(), 0.0);
      for (int64_t f = 0; f < filters; ++f) {
        for (int64_t y = 0; y < 10; ++y) {
          for (int64_t xx = 0; xx < 10; ++xx) {
            for (int64_t c = 0; c < channels; ++c) {
              for (int64_t i = 0; i < 3; ++i) {
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t yy = y + i - 1, xs = xx + j - 1;
                  if (yy < 0 || yy >= 10 || xs < 0 || xs >= 10) continue;
                  const double t = in[(c * 10 + yy) * 10 + xs] *
                                   w[((f * channels + c) * 3 + i) * 3 + j];
                  o[(f * 10 + y) * 10 + xx] += t;
                  magnitude[(f * 10 + y) * 10 + xx] += std::abs(t);
                }
              }
            }
          }
        }
      }
      return o;
    };
    std::vector<double> m1, m2;
    std::vector<double> h = conv(x.values, 16, w1.values, 32, m1);
    for (double& v : h) v = std::max(0.0, RoundTo(dtype, v));
    std::vector<double> want = conv(h, 32, w2.values, 16, m2);
    const double u = UnitRoundoff(dtype);
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      // The output's rounding, an ulp of each h, f32 summation.
      tol[i] = 2 * u * std::abs(want[i]) + 2 * u * m2[i] + 300 * 6e-8 * m2[i];
      want[i] = RoundTo(dtype, want[i]);
    }
    ExpectClose((*out)[0], want, tol, "out");
  }
}

// A bf16 kernel widened from a strided view (a slice of a larger weight):
// the call reads its contiguous bf16 twin, not the view.
TEST(ConvRewritePassTest, StridedBf16KernelIsReadFromItsTwin) {
  constexpr char kKernel[] = R"mlir(
#id = affine_map<(n, c, h, w) -> (n, c, h, w)>
func.func @kernel(%x: memref<1x2x5x5xi16>, %w: memref<3x2x2x4xi16>,
                  %y: memref<1x3x4x4xf32>) {
  %c16 = arith.constant 16 : i32
  %zero = arith.constant 0.0 : f32
  %sw = memref.subview %w[0, 0, 0, 0] [3, 2, 2, 2] [1, 1, 1, 1]
      : memref<3x2x2x4xi16> to memref<3x2x2x2xi16, strided<[16, 8, 4, 1]>>
  %a = memref.alloc() : memref<1x2x5x5xf32>
  linalg.generic {indexing_maps = [#id, #id],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : memref<1x2x5x5xi16>) outs(%a : memref<1x2x5x5xf32>) {
  ^bb0(%in: i16, %o: f32):
    %e = arith.extui %in : i16 to i32
    %s = arith.shli %e, %c16 : i32
    %v = arith.bitcast %s : i32 to f32
    linalg.yield %v : f32
  }
  %b = memref.alloc() : memref<3x2x2x2xf32>
  linalg.generic {indexing_maps = [#id, #id],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%sw : memref<3x2x2x2xi16, strided<[16, 8, 4, 1]>>)
      outs(%b : memref<3x2x2x2xf32>) {
  ^bb0(%in: i16, %o: f32):
    %e = arith.extui %in : i16 to i32
    %s = arith.shli %e, %c16 : i32
    %v = arith.bitcast %s : i32 to f32
    linalg.yield %v : f32
  }
  linalg.fill ins(%zero : f32) outs(%y : memref<1x3x4x4xf32>)
  linalg.conv_2d_nchw_fchw
      {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%a, %b : memref<1x2x5x5xf32>, memref<3x2x2x2xf32>)
      outs(%y : memref<1x3x4x4xf32>)
  memref.dealloc %a : memref<1x2x5x5xf32>
  memref.dealloc %b : memref<3x2x2x2xf32>
  return
}
)mlir";
  auto context = CreateCompilerContext();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kKernel, context.get());
  ASSERT_TRUE(module);
  ASSERT_TRUE(RunStages(*module, {ConvStage()}, "strided_kernel").ok());
  const std::vector<ConvProblem> problems = ConvProblems(*module);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].type, ConvOperandType::kBF16);
  // The kernel pointer: of an i16 buffer of the kernel's shape.
  mlir::Value kernel;
  module->walk([&](mlir::func::CallOp call) {
    auto cast = call.getOperand(2).getDefiningOp<mlir::arith::IndexCastOp>();
    auto pointer =
        cast ? cast.getIn()
                   .getDefiningOp<mlir::memref::ExtractAlignedPointerAsIndexOp>()
             : nullptr;
    if (pointer) kernel = pointer.getSource();
  });
  ASSERT_TRUE(kernel);
  EXPECT_TRUE(kernel.getDefiningOp<mlir::memref::AllocOp>());
  EXPECT_EQ(kernel.getType().cast<mlir::MemRefType>().getShape(),
            llvm::ArrayRef<int64_t>({3, 2, 2, 2}));
}

}  // namespace
}  // namespace rbln::compiler

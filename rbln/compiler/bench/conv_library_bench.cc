// oneDNN convolution as rbln_conv runs it (onednn_conv.h;
// docs/benchmarks.md, "Convolution library"): ResNet-18's 3x3 convolutions
// (batch 1, 224x224 images, stride 1, padding 1) with f32 and bf16
// operands, plain and with a fused bias + relu epilogue, on 1 thread (one
// block) and in 4 blocks on 4 threads, as the chiplet workers run them.
//
// Per variant: the best thread-CPU time of one call on 1 thread (robust to
// other load on the machine) and the median wall time, as GFLOP/s.
//
//   bazel run -c opt //rbln/compiler/bench:conv_library_bench -- [--reps 9]

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rbln/compiler/bench/library_bench_timing.h"
#include "rbln/compiler/kernels/onednn_conv.h"

namespace {

using rbln::compiler::ConvOperandType;
using rbln::compiler::ConvProblem;
using rbln::compiler::EltwiseFn;
using rbln::compiler::bench::Time;

ConvProblem ResNetConv(ConvOperandType type, int64_t channels, int64_t size) {
  ConvProblem p;
  p.type = type;
  p.accumulate = false;
  p.n = 1;
  p.ic = p.oc = channels;
  p.ih = p.iw = p.oh = p.ow = size;
  p.kh = p.kw = 3;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  const int64_t plane = size * size;
  for (int64_t* s : {p.src_strides, p.dst_strides}) {
    s[0] = channels * plane;
    s[1] = plane;
    s[2] = size;
    s[3] = 1;
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (!rbln::compiler::LoadOnednn()) {
    std::fprintf(stderr, "%s\n", rbln::compiler::OnednnVersion().c_str());
    return 1;
  }
  std::printf("%s\n", rbln::compiler::OnednnVersion().c_str());
  std::printf("%-40s %10s %10s %10s %s\n", "convolution", "1t cpu", "1t wall",
              "4 blocks", "(GFLOP/s; implementation)");
  for (auto [channels, size] : std::vector<std::pair<int64_t, int64_t>>{
           {64, 56}, {128, 28}, {256, 14}, {512, 7}}) {
    for (ConvOperandType type : {ConvOperandType::kF32, ConvOperandType::kBF16}) {
      for (bool epilogue : {false, true}) {
        ConvProblem p = ResNetConv(type, channels, size);
        if (epilogue) {
          p.epilogue.bias_row = 0;
          p.epilogue.ops = {{false, static_cast<int64_t>(EltwiseFn::kRelu)}};
        }
        const int64_t bytes = type == ConvOperandType::kBF16 ? 2 : 4;
        std::vector<char> src(channels * size * size * bytes, 0);
        std::vector<char> weights(channels * channels * 9 * bytes, 0);
        std::vector<float> dst(channels * size * size), sides(channels, 0.5f);
        for (size_t i = 0; i < src.size(); i += 2) src[i + 1] = 0x3f;
        for (size_t i = 0; i < weights.size(); i += 2) weights[i + 1] = 0x3c;
        const double flops = 2.0 * p.Work();
        auto one = Time(
            [&] {
              rbln::compiler::RunConvBlock(p, src.data(), weights.data(),
                                           dst.data(), sides.data(), 0, 1);
            },
            reps);
        auto four = Time(
            [&] {
              std::vector<std::thread> threads;
              for (int64_t block = 0; block < 4; ++block) {
                threads.emplace_back([&, block] {
                  rbln::compiler::RunConvBlock(p, src.data(), weights.data(),
                                               dst.data(), sides.data(), block,
                                               4);
                });
              }
              for (std::thread& t : threads) t.join();
            },
            reps);
        const std::string name =
            std::to_string(channels) + "x" + std::to_string(size) + "^2 " +
            (type == ConvOperandType::kBF16 ? "bf16" : "f32") +
            (epilogue ? " +bias+relu" : "");
        std::printf("%-40s %10.1f %10.1f %10.1f %s\n", name.c_str(),
                    flops / one.first / 1e9, flops / one.second / 1e9,
                    flops / four.second / 1e9,
                    rbln::compiler::ConvImplementation(p).c_str());
      }
    }
  }
  return 0;
}

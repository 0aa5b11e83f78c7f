// spec: P2
// grid_sampler_2d/3d in every interpolation and padding mode, with and
// without align_corners, against a double-precision transcription of ATen's
// CPU kernel (aten/src/ATen/native/GridSampler.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.

double Unnormalize(double c, int64_t size, bool align) {
  return align ? (c + 1) / 2 * (size - 1) : ((c + 1) * size - 1) / 2;
}
double Clip(double x, int64_t size) {
  return std::min<double>(size - 1, std::max(x, 0.0));
}
double Reflect(double in, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return 0;
  const double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  in = std::fabs(in - lo);
  const double extra = std::fmod(in, span);
  const int flips = static_cast<int>(std::floor(in / span));
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}
double Pad(double x, int64_t size, int padding, bool align) {
  if (padding == 1) return Clip(x, size);
  if (padding == 2) {
    x = align ? Reflect(x, 0, 2 * (size - 1)) : Reflect(x, -1, 2 * size - 1);
    return Clip(x, size);
  }
  return x;
}

struct Image {
  const HostTensor* x;
  int64_t n, c;
  Shape spatial;

  double At(const std::vector<int64_t>& pos) const {
    int64_t flat = n * x->shape[1] + c;
    for (size_t d = 0; d < pos.size(); ++d) {
      if (pos[d] < 0 || pos[d] >= spatial[d]) return 0;
      flat = flat * spatial[d] + pos[d];
    }
    return x->values[flat];
  }
};

double Cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
double Cubic2(double x, double a) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}
std::vector<double> CubicCoefficients(double t) {
  const double a = -0.75;
  return {Cubic2(t + 1, a), Cubic1(t, a), Cubic1(1 - t, a), Cubic2(2 - t, a)};
}

std::vector<double> Reference(const HostTensor& x, const HostTensor& grid,
                              int interpolation, int padding, bool align) {
  const int spatial = x.shape.size() - 2;
  const Shape in(x.shape.begin() + 2, x.shape.end());
  const Shape out(grid.shape.begin() + 1, grid.shape.end() - 1);
  const int64_t points = NumElements(out);
  std::vector<double> result;
  for (int64_t n = 0; n < x.shape[0]; ++n) {
    for (int64_t c = 0; c < x.shape[1]; ++c) {
      const Image img{&x, n, c, in};
      for (int64_t p = 0; p < points; ++p) {
        std::vector<double> coord(spatial);
        for (int d = 0; d < spatial; ++d) {
          const double g =
              grid.values[(n * points + p) * spatial + (spatial - 1 - d)];
          coord[d] = Unnormalize(g, in[d], align);
        }
        double v = 0;
        if (interpolation == 2) {
          const double iy = std::floor(coord[0]), ix = std::floor(coord[1]);
          const std::vector<double> cx = CubicCoefficients(coord[1] - ix);
          const std::vector<double> cy = CubicCoefficients(coord[0] - iy);
          for (int i = 0; i < 4; ++i) {
            double row = 0;
            const auto y = static_cast<int64_t>(
                Pad(iy - 1 + i, in[0], padding, align));
            for (int j = 0; j < 4; ++j) {
              const auto xx = static_cast<int64_t>(
                  Pad(ix - 1 + j, in[1], padding, align));
              row += img.At({y, xx}) * cx[j];
            }
            v += row * cy[i];
          }
        } else {
          for (int d = 0; d < spatial; ++d) {
            coord[d] = Pad(coord[d], in[d], padding, align);
          }
          if (interpolation == 1) {
            std::vector<int64_t> pos;
            for (double cd : coord) {
              pos.push_back(static_cast<int64_t>(std::nearbyint(cd)));
            }
            v = img.At(pos);
          } else {
            for (int corner = 0; corner < (1 << spatial); ++corner) {
              std::vector<int64_t> pos;
              double w = 1;
              for (int d = 0; d < spatial; ++d) {
                const bool high = corner & (1 << (spatial - 1 - d));
                const double lo = std::floor(coord[d]);
                pos.push_back(static_cast<int64_t>(lo) + (high ? 1 : 0));
                w *= high ? coord[d] - lo : lo + 1 - coord[d];
              }
              v += img.At(pos) * w;
            }
          }
        }
        result.push_back(v);
      }
    }
  }
  return result;
}

TEST(SamplingOpsTest, GridSamplerMatchesAten) {
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    for (int spatial : {2, 3}) {
      const Shape xs = spatial == 2 ? Shape{2, 3, 5, 6} : Shape{1, 2, 3, 4, 5};
      const Shape gs =
          spatial == 2 ? Shape{2, 4, 3, 2} : Shape{1, 2, 3, 2, 3};
      // Coordinates past the edges exercise the padding modes.
      const HostTensor x = Random(t, xs, 1, -2, 2);
      const HostTensor grid = Random(t, gs, 2, -1.6, 1.6);
      Shape out = {xs[0], xs[1]};
      out.insert(out.end(), gs.begin() + 1, gs.end() - 1);
      for (int interpolation = 0; interpolation < (spatial == 2 ? 3 : 2);
           ++interpolation) {
        for (int padding = 0; padding < 3; ++padding) {
          for (bool align : {false, true}) {
            const std::string op =
                spatial == 2 ? "grid_sampler_2d" : "grid_sampler_3d";
            const std::string what =
                absl::StrCat(op, " ", DTypeText(t), " mode ", interpolation,
                             " padding ", padding, align ? " align" : "");
            auto result = CompileAndRun(
                OneOpGraph(op, {x.type(), grid.type()}, {Type(t, out)},
                           {{"interpolation_mode", IntA(interpolation)},
                            {"padding_mode", IntA(padding)},
                            {"align_corners", BoolA(align)}}),
                {x, grid});
            ASSERT_TRUE(result.ok()) << what << ": " << result.status();
            const std::vector<double> want =
                Reference(x, grid, interpolation, padding, align);
            // f32 weights: a few f32 ulps of the inputs' scale, then one
            // rounding; nearest reads a value exactly.
            std::vector<double> tol;
            for (double w : want) {
              tol.push_back(UnitRoundoff(t) * std::fabs(w) * 1.01 + 2e-5);
            }
            ExpectClose((*result)[0], want, tol, what);
          }
        }
      }
    }
  }
}

// ATen's upsample_nearest2d / upsample_bilinear2d source indices.
float ScaleValue(double scale, int64_t in, int64_t out) {
  return scale > 0 ? static_cast<float>(1.0 / scale)
                   : static_cast<float>(in) / static_cast<float>(out);
}

int64_t NearestIndex(int64_t o, int64_t in, int64_t out, double scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  const float s = ScaleValue(scale, in, out);
  return std::min(static_cast<int64_t>(std::floor(o * s)), in - 1);
}

struct Linear {
  int64_t lo, hi;
  double w0, w1;
};

Linear LinearIndex(int64_t o, int64_t in, int64_t out, double scale,
                   bool align) {
  const float s = align ? (out > 1 ? static_cast<float>(in - 1) / (out - 1) : 0)
                        : ScaleValue(scale, in, out);
  const double real =
      align ? s * o : std::max(s * (o + 0.5) - 0.5, 0.0);
  const int64_t lo = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
  const double lambda = std::min(std::max(real - lo, 0.0), 1.0);
  return {lo, std::min(lo + 1, in - 1), 1 - lambda, lambda};
}

TEST(SamplingOpsTest, UpsampleMatchesAten) {
  struct Case {
    Shape out;
    std::vector<double> scales;  // empty: none
    bool align;
  };
  const Shape xs = {2, 3, 4, 5};
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    const HostTensor x = Random(t, xs, 3);
    for (const Case& c : std::vector<Case>{{{8, 10}, {}, false},
                                           {{7, 3}, {}, false},
                                           {{7, 3}, {}, true},
                                           {{6, 7}, {1.5, 1.5}, false},
                                           {{4, 5}, {}, true}}) {
      for (bool bilinear : {false, true}) {
        const std::string op =
            bilinear ? "upsample_bilinear2d" : "upsample_nearest2d";
        Attrs attrs = {{"align_corners", BoolA(c.align)}};
        if (!c.scales.empty()) {
          attrs["scale_factors"] = StrA(absl::StrCat(c.scales[0], ",", c.scales[1]));
        }
        const Shape out = {xs[0], xs[1], c.out[0], c.out[1]};
        const std::string what = absl::StrCat(op, " ", DTypeText(t), " -> ",
                                              c.out[0], "x", c.out[1],
                                              c.align ? " align" : "");
        auto result = CompileAndRun(
            OneOpGraph(op, {x.type()}, {Type(t, out)}, attrs), {x});
        ASSERT_TRUE(result.ok()) << what << ": " << result.status();
        std::vector<double> want;
        const double sh = c.scales.empty() ? 0 : c.scales[0];
        const double sw = c.scales.empty() ? 0 : c.scales[1];
        for (int64_t plane = 0; plane < xs[0] * xs[1]; ++plane) {
          auto at = [&](int64_t h, int64_t w) {
            return x.values[(plane * xs[2] + h) * xs[3] + w];
          };
          for (int64_t oh = 0; oh < c.out[0]; ++oh) {
            for (int64_t ow = 0; ow < c.out[1]; ++ow) {
              if (!bilinear) {
                want.push_back(at(NearestIndex(oh, xs[2], c.out[0], sh),
                                  NearestIndex(ow, xs[3], c.out[1], sw)));
                continue;
              }
              const Linear h = LinearIndex(oh, xs[2], c.out[0], sh, c.align);
              const Linear w = LinearIndex(ow, xs[3], c.out[1], sw, c.align);
              want.push_back(h.w0 * (w.w0 * at(h.lo, w.lo) + w.w1 * at(h.lo, w.hi)) +
                             h.w1 * (w.w0 * at(h.hi, w.lo) + w.w1 * at(h.hi, w.hi)));
            }
          }
        }
        std::vector<double> tol;
        for (double w : want) {
          tol.push_back(UnitRoundoff(t) * std::fabs(w) * 1.01 + 1e-5);
        }
        ExpectClose((*result)[0], want, tol, what);
      }
    }
  }
}

}  // namespace
}  // namespace rbln::compiler

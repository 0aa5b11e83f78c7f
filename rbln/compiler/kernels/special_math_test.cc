// spec: J6 (special functions of the compiled element-wise ops)
//
// The runtime special functions against reference values computed with
// mpmath at 40 digits (scipy for the igamma cases with a > 1e6, where
// mpmath's series does not converge) at float inputs, and their special
// values against torch 2.13's CPU results.
#include "rbln/compiler/kernels/special_math.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rbln::compiler {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  std::string function;
  std::vector<double> args;
  double want;
};

float Call(const Case& c) {
  const std::string& f = c.function;
  const float x = static_cast<float>(c.args.back());
  if (f == "digamma") return rbln_digammaf(x);
  if (f == "polygamma") {
    return rbln_polygammaf(static_cast<int64_t>(c.args[0]), x);
  }
  if (f == "zeta") return rbln_zetaf(static_cast<float>(c.args[0]), x);
  if (f == "erfinv") return rbln_erfinvf(x);
  if (f == "i0") return rbln_i0f(x);
  if (f == "i0e") return rbln_i0ef(x);
  if (f == "i1") return rbln_i1f(x);
  if (f == "i1e") return rbln_i1ef(x);
  if (f == "igamma") return rbln_igammaf(static_cast<float>(c.args[0]), x);
  if (f == "igammac") return rbln_igammacf(static_cast<float>(c.args[0]), x);
  ADD_FAILURE() << "unknown function " << f;
  return 0;
}

std::string Describe(const Case& c) {
  std::string text = c.function + "(";
  for (double a : c.args) text += std::to_string(a) + " ";
  return text + ")";
}

// Within 4 float ulps of the reference (the float result of a double
// computation rounds once, plus the error of the algorithm's last terms).
TEST(SpecialMathTest, MatchesReferenceValues) {
  const std::vector<Case> cases = {
      {"digamma", {1.0}, -0.5772156649015329},
      {"digamma", {0.5}, -1.9635100260214235},
      {"digamma", {2.5}, 0.7031566406452432},
      {"digamma", {10.0}, 2.251752589066721},
      {"digamma", {0.0010000000474974513}, -1000.5755244342832},
      {"digamma", {100.5}, 4.605174352581845},
      {"digamma", {-0.5}, 0.03648997397857652},
      {"digamma", {-2.5}, 1.103156640645243},
      {"digamma", {-100.25}, 7.754238959208646},
      {"digamma", {1000000.0}, 13.815510057964191},
      {"digamma", {0.07249999791383743}, -14.256994402416135},
      {"polygamma", {1, 0.25}, 17.19732915450711},
      {"polygamma", {1, 1.0}, 1.6449340668482264},
      {"polygamma", {1, 3.700000047683716}, 0.3100378531212356},
      {"polygamma", {1, -2.5}, 9.539246644989124},
      {"polygamma", {1, 1000.0}, 0.0010005001666666333},
      {"polygamma", {2, 0.5}, -16.82879664423432},
      {"polygamma", {2, 1.0}, -2.4041138063191885},
      {"polygamma", {2, 4.199999809265137}, -0.07176485782505893},
      {"polygamma", {2, -1.5}, -0.2362040516417274},
      {"polygamma", {3, 2.5}, 0.22390584881725206},
      {"polygamma", {4, 0.10000000149011612}, -2400015.4283891665},
      {"polygamma", {5, 12.0}, 0.00011820829051081491},
      {"zeta", {2.0, 1.0}, 1.6449340668482264},
      {"zeta", {3.0, 0.5}, 8.41439832211716},
      {"zeta", {2.5, 7.0}, 0.0400817579336607},
      {"zeta", {4.0, -1.5}, 32.432379369864606},
      {"zeta", {1.5, 2.0}, 1.6123753486854884},
      {"zeta", {10.0, 1.100000023841858}, 0.3861557784469859},
      {"zeta", {2.0, 10000.0}, 0.00010000500016666666},
      {"erfinv", {0.10000000149011612}, 0.08885599182530649},
      {"erfinv", {0.5}, 0.4769362762044699},
      {"erfinv", {-0.8999999761581421}, -1.1630870719457722},
      {"erfinv", {0.9990000128746033}, 2.3267563267961546},
      {"erfinv", {9.999999974752427e-07}, 8.862269232154821e-07},
      {"erfinv", {0.9999998807907104}, 3.7439211627767994},
      {"i0", {0.10000000149011612}, 1.0025015630086946},
      {"i0e", {0.10000000149011612}, 0.9071009244981153},
      {"i1", {0.10000000149011612}, 0.05006252679494666},
      {"i1e", {0.10000000149011612}, 0.04529844741799563},
      {"i0", {1.0}, 1.2660658777520084},
      {"i0e", {1.0}, 0.46575960759364043},
      {"i1", {1.0}, 0.565159103992485},
      {"i1e", {1.0}, 0.20791041534970844},
      {"i0", {7.5}, 268.16131151518937},
      {"i0e", {7.5}, 0.14831583007739552},
      {"i1", {7.5}, 249.58436542268814},
      {"i1e", {7.5}, 0.1380412115485542},
      {"i0", {29.899999618530273}, 708478064784.602},
      {"i0e", {29.899999618530273}, 0.07326921951743903},
      {"i1", {29.899999618530273}, 696528046984.5447},
      {"i1e", {29.899999618530273}, 0.07203337535944677},
      {"i0", {30.100000381469727}, 862433243511.9222},
      {"i0e", {30.100000381469727}, 0.07302329366435571},
      {"i1", {30.100000381469727}, 847983948436.8036},
      {"i1e", {30.100000381469727}, 0.07179985390777038},
      {"i0", {50.0}, 2.9325537838493362e+20},
      {"i0e", {50.0}, 0.05656162664745419},
      {"i1", {50.0}, 2.903078590103557e+20},
      {"i1e", {50.0}, 0.0559931238928954},
      {"i0", {85.0}, 3.563477630408124e+35},
      {"i0e", {85.0}, 0.04333542649242439},
      {"i1", {85.0}, 3.542453606440377e+35},
      {"i1e", {85.0}, 0.04307975348427788},
      {"i0", {-3.0}, 4.8807925858650245},
      {"i0e", {-3.0}, 0.2430003541618254},
      {"i1", {-3.0}, -3.9533702174026093},
      {"i1e", {-3.0}, -0.19682671329730086},
      {"igamma", {0.5, 0.20000000298023224}, 0.4729107462126934},
      {"igammac", {0.5, 0.20000000298023224}, 0.5270892537873066},
      {"igamma", {1.0, 2.0}, 0.8646647167633873},
      {"igammac", {1.0, 2.0}, 0.1353352832366127},
      {"igamma", {3.0, 2.5}, 0.45618688411667047},
      {"igammac", {3.0, 2.5}, 0.5438131158833295},
      {"igamma", {10.0, 12.0}, 0.7576078383294876},
      {"igammac", {10.0, 12.0}, 0.24239216167051233},
      {"igamma", {100.0, 90.0}, 0.15822098918643016},
      {"igammac", {100.0, 90.0}, 0.8417790108135699},
      {"igamma", {0.009999999776482582, 0.5}, 0.9943732439324422},
      {"igammac", {0.009999999776482582, 0.5}, 0.005626756067557822},
      {"igamma", {1000.0, 1005.0}, 0.5668609446660843},
      {"igammac", {1000.0, 1005.0}, 0.4331390553339157},
      {"igamma", {5.0, 60.0}, 1.0},
      {"igammac", {5.0, 60.0}, 5.060046065842574e-21},
      {"igamma", {20000000.0, 20010000.0}, 0.9873165775434684},
      {"igammac", {20000000.0, 20010000.0}, 0.012683422456531685},
      {"igamma", {30000000.0, 29900000.0}, 6.223219483830796e-75},
      {"igammac", {30000000.0, 29900000.0}, 1.0},
  };
  for (const Case& c : cases) {
    const float got = Call(c);
    const float want = static_cast<float>(c.want);
    if (std::isinf(want)) {
      EXPECT_EQ(got, want) << Describe(c);
      continue;
    }
    const float ulp =
        std::nextafter(std::fabs(want), std::numeric_limits<float>::infinity()) -
        std::fabs(want);
    EXPECT_NEAR(got, want, 4 * ulp + 1e-37) << Describe(c);
  }
}

TEST(SpecialMathTest, LgammaIsLibmsWithoutSignGam) {
  for (float x : {0.5f, 1.0f, 3.5f, 100.0f, -2.5f, 1e-20f}) {
    EXPECT_EQ(rbln_lgammaf(x), std::lgamma(x)) << x;
  }
  EXPECT_EQ(rbln_lgammaf(0.0f), kInf);
  EXPECT_EQ(rbln_lgammaf(-3.0f), kInf);
}

// Special values as torch 2.13's CPU kernels give them (several are
// artifacts of ATen's formulas, e.g. i0(inf) = NaN, zeta(s, inf) = NaN).
TEST(SpecialMathTest, SpecialValuesMatchATen) {
  EXPECT_EQ(rbln_digammaf(0.0f), -kInf);
  EXPECT_EQ(rbln_digammaf(-0.0f), kInf);
  EXPECT_TRUE(std::isnan(rbln_digammaf(-1.0f)));
  EXPECT_TRUE(std::isnan(rbln_digammaf(-kInf)));
  EXPECT_TRUE(std::isnan(rbln_digammaf(kNaN)));
  EXPECT_EQ(rbln_digammaf(kInf), kInf);
  EXPECT_NEAR(rbln_digammaf(-1e-8f), 1e8f, 1e2f);

  // ATen's float sin(pi x) near a pole: 412.75259, where the exact value is
  // 412.74422.
  EXPECT_NEAR(rbln_polygammaf(1, -7.950586795806885f), 412.75259f, 1e-3f);
  EXPECT_EQ(rbln_polygammaf(1, 0.0f), kInf);
  EXPECT_EQ(rbln_polygammaf(1, kInf), 0.0f);
  EXPECT_TRUE(std::isnan(rbln_polygammaf(1, -kInf)));
  EXPECT_EQ(rbln_polygammaf(2, 0.0f), -kInf);
  EXPECT_EQ(rbln_polygammaf(2, -1.0f), -kInf);
  EXPECT_EQ(rbln_polygammaf(3, -1.0f), kInf);
  EXPECT_EQ(rbln_polygammaf(2, -kInf), -kInf);
  EXPECT_TRUE(std::isnan(rbln_polygammaf(2, kInf)));
  EXPECT_TRUE(std::isnan(rbln_polygammaf(2, kNaN)));

  EXPECT_EQ(rbln_zetaf(1.0f, 1.0f), kInf);
  EXPECT_TRUE(std::isnan(rbln_zetaf(0.5f, 1.0f)));
  EXPECT_EQ(rbln_zetaf(2.0f, 0.0f), kInf);
  EXPECT_EQ(rbln_zetaf(2.0f, -1.0f), kInf);
  EXPECT_TRUE(std::isnan(rbln_zetaf(2.5f, -1.5f)));
  EXPECT_EQ(rbln_zetaf(3.0f, 1e-20f), kInf);
  EXPECT_EQ(rbln_zetaf(kInf, 1.0f), 1.0f);
  EXPECT_TRUE(std::isnan(rbln_zetaf(2.0f, kInf)));
  EXPECT_EQ(rbln_zetaf(3.0f, -kInf), kInf);

  EXPECT_EQ(rbln_erfinvf(1.0f), kInf);
  EXPECT_EQ(rbln_erfinvf(-1.0f), -kInf);
  EXPECT_TRUE(std::isnan(rbln_erfinvf(1.5f)));
  EXPECT_TRUE(std::signbit(rbln_erfinvf(-0.0f)));
  EXPECT_NEAR(rbln_erfinvf(1e-30f), 8.862269e-31f, 1e-36f);

  EXPECT_TRUE(std::isnan(rbln_i0f(kInf)));
  EXPECT_TRUE(std::isnan(rbln_i0f(-kInf)));
  EXPECT_EQ(rbln_i0f(1e30f), kInf);
  EXPECT_EQ(rbln_i0f(0.0f), 1.0f);
  EXPECT_EQ(rbln_i0ef(kInf), 0.0f);
  EXPECT_TRUE(std::isnan(rbln_i1f(kInf)));
  EXPECT_EQ(rbln_i1f(-100.5f), -kInf);
  EXPECT_EQ(rbln_i1f(-0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(rbln_i1ef(-kInf)));
  EXPECT_EQ(rbln_i1ef(kInf), 0.0f);

  // (a, x) -> P.
  constexpr float kInfF = std::numeric_limits<float>::infinity();
  const float kCases[][3] = {
      {0, 0, kNaN},     {0, 1, 1},        {1, 0, 0},         {-1, 1, kNaN},
      {1, -1, kNaN},    {kInfF, 1, 0},     {kInfF, kInfF, kNaN}, {1, kInfF, 1},
      {2, kNaN, kNaN},  {kNaN, 1, kNaN},  {0, kInfF, 1},      {3e38f, 3e38f, 0.5f},
  };
  for (const auto& [a, x, p] : kCases) {
    const float got = rbln_igammaf(a, x), got_c = rbln_igammacf(a, x);
    if (std::isnan(p)) {
      EXPECT_TRUE(std::isnan(got)) << a << " " << x;
      EXPECT_TRUE(std::isnan(got_c)) << a << " " << x;
    } else {
      EXPECT_NEAR(got, p, 1e-6) << a << " " << x;
      EXPECT_NEAR(got_c, 1 - p, 1e-6) << a << " " << x;
    }
  }
}

// A big a and x = a: P(a, a) = 1/2 + 1/(3 sqrt(2 pi a)) + O(1/a); the
// series (a <= 1e7) and Temme's expansion (beyond) agree across the switch.
TEST(SpecialMathTest, IgammaIsContinuousAtTheTemmeSwitch) {
  for (float a : {9.99e6f, 1.001e7f}) {
    const double want = 0.5 + 1 / (3 * std::sqrt(2 * M_PI * a));
    EXPECT_NEAR(rbln_igammaf(a, a), want, 1e-6) << a;
  }
}

}  // namespace
}  // namespace rbln::compiler

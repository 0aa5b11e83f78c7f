#include "rbln/compiler/kernels/special_math.h"

#include <math.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace rbln::compiler {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = 3.14159265358979323846;
constexpr double kEpsilon = 1e-17;  // below double's unit roundoff

// B_2k / (2k)!, k = 1..13: the coefficients of the Euler-Maclaurin tails
// (Bernoulli numbers over factorials, DLMF 24.2).
constexpr double kBernoulliOverFactorial[] = {
    1.0 / 12,
    -1.0 / 720,
    1.0 / 30240,
    -1.0 / 1209600,
    1.0 / 47900160,
    -691.0 / 1307674368000,
    1.0 / 74724249600,
    -3617.0 / 10670622842880000,
    43867.0 / 5109094217170944000,
    -174611.0 / 802857662698291200000.0,
    77683.0 / 14101100039391805440000.0,
    -236364091.0 / 1693824136731743669452800000.0,
    657931.0 / 186134520519971831808000000.0,
};

// psi(x) for x > 0: upward recurrence to x >= 10, then the asymptotic
// series ln x - 1/(2x) - sum_k B_2k / (2k x^2k) (DLMF 5.15.8, 5.11.2).
double DigammaPositive(double x) {
  double result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (std::isinf(x)) return kInf;
  const double inv2 = 1 / (x * x);
  // B_2k / (2k) for k = 1..7.
  static constexpr double kCoeff[] = {1.0 / 12,   -1.0 / 120,  1.0 / 252,
                                      -1.0 / 240, 1.0 / 132,   -691.0 / 32760,
                                      1.0 / 12};
  double series = 0, power = inv2;
  for (double c : kCoeff) {
    series += c * power;
    power *= inv2;
  }
  return result + std::log(x) - 0.5 / x - series;
}

// sin(pi x) of trigamma's reflection as ATen's float kernel evaluates it,
// pi * x rounded to float: near the poles that rounding dominates the
// error, and PyTorch's results carry it (e.g. psi'(-7.9505868) = 412.7526
// there, 412.7442 exactly).
double FloatSinPi(float x) {
  return std::sin(static_cast<float>(kPi) * x);
}

double Digamma(double x) {
  if (x == 0) return std::copysign(kInf, -x);
  if (std::isnan(x)) return x;
  if (x < 0) {
    if (x == std::trunc(x)) return kNaN;  // poles; also -inf
    // Reflection psi(x) = psi(1 - x) - pi / tan(pi x), with the fractional
    // part of x (tan has period pi), which keeps pi * r accurate.
    const double r = x - std::trunc(x);
    return DigammaPositive(1 - x) - kPi / std::tan(kPi * r);
  }
  return DigammaPositive(x);
}

// Hurwitz zeta for s > 1 (the caller handles the domain): the first terms
// summed until q + n >= 10 and n >= 9, then the Euler-Maclaurin tail
// (DLMF 25.11.5 with the remainder's Bernoulli terms).
double HurwitzZeta(double s, double q) {
  double sum = 0;
  int n = 0;
  while (n < 9 || q + n < 10) {
    const double term = std::pow(q + n, -s);
    sum += term;
    ++n;
    if (std::isinf(sum)) return kInf;
    if (n >= 9 && std::fabs(term) < kEpsilon * std::fabs(sum)) return sum;
  }
  const double w = q + n;
  const double wps = std::pow(w, -s);  // w^-s
  sum += w * wps / (s - 1) + 0.5 * wps;
  // Term k: B_2k/(2k)! s (s+1) ... (s+2k-2) w^(-s-2k+1).
  double rising = s;          // s (s+1) ... (s+2k-2)
  double power = wps / w;     // w^(-s-2k+1)
  for (int k = 0; k < 13; ++k) {
    const double term = kBernoulliOverFactorial[k] * rising * power;
    sum += term;
    if (std::fabs(term) < kEpsilon * std::fabs(sum)) break;
    rising *= (s + 2 * k + 1) * (s + 2 * k + 2);
    power /= w * w;
  }
  return sum;
}

double Zeta(double s, double q) {
  if (std::isnan(s) || std::isnan(q)) return kNaN;
  if (s == 1) return kInf;
  if (s < 1) return kNaN;
  if (q <= 0) {
    if (q == std::floor(q)) return kInf;  // a pole; also q = -inf
    if (s != std::floor(s)) return kNaN;  // (q + k)^-s is complex
  }
  // ATen's series gives NaN for q = +inf (0 * inf in its tail term).
  if (std::isinf(q)) return kNaN;
  if (std::isinf(s)) return q < 1 ? kInf : (q == 1 ? 1.0 : 0.0);
  return HurwitzZeta(s, q);
}

// psi'(x): for x < 1/2 the reflection psi'(1 - x) + psi'(x) =
// pi^2 / sin^2(pi x), else zeta(2, x).
double Trigamma(double x) {
  if (std::isnan(x)) return x;
  if (x == kInf) return 0;
  if (x < 0.5) {
    if (x == std::floor(x)) return kInf;  // poles; also -inf is NaN below
    const double s = FloatSinPi(static_cast<float>(x));
    return kPi * kPi / (s * s) - Trigamma(1 - x);
  }
  return HurwitzZeta(2, x);
}

double Polygamma(int64_t n, double x) {
  if (n == 0) return Digamma(x);
  if (n == 1) return x == -kInf ? kNaN : Trigamma(x);
  // (-1)^(n+1) n! zeta(n + 1, x).
  const double sign = n % 2 == 1 ? 1.0 : -1.0;
  const double factorial = std::exp(std::lgamma(static_cast<double>(n) + 1));
  return sign * factorial * Zeta(static_cast<double>(n) + 1, x);
}

// erfinv: Winitzki's closed-form approximation (relative error ~2e-3),
// refined by Newton steps on erf(x) - y, each squaring the error.
double Erfinv(double y) {
  if (std::isnan(y) || std::fabs(y) > 1) return kNaN;
  if (std::fabs(y) == 1) return std::copysign(kInf, y);
  if (y == 0) return y;
  constexpr double a = 0.147;
  const double ln = std::log((1 - y) * (1 + y));
  const double t = 2 / (kPi * a) + ln / 2;
  double x = std::copysign(std::sqrt(std::sqrt(t * t - ln / a) - t), y);
  const double two_over_sqrt_pi = 1.12837916709551257390;
  for (int i = 0; i < 4; ++i) {
    const double step =
        (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
    x -= step;
    if (std::fabs(step) <= kEpsilon * std::fabs(x)) break;
  }
  return x;
}

// sum_k (x^2/4)^k / (k! (k + nu)!) * (x/2)^nu: the power series of I_nu
// (DLMF 10.25.2), for nu = 0, 1 and |x| <= 30, where it needs < 80 terms.
double BesselISeries(int nu, double x) {
  const double q = x * x / 4;
  double term = nu == 0 ? 1.0 : x / 2;
  double sum = term;
  for (int k = 1; k < 200; ++k) {
    term *= q / (k * static_cast<double>(k + nu));
    sum += term;
    if (term <= kEpsilon * sum) break;
  }
  return sum;
}

// I_nu(x) sqrt(2 pi x) e^-x for large x > 0: the asymptotic series
// sum_k (-1)^k a_k(nu) / x^k, a_k = prod_j (4 nu^2 - (2j - 1)^2) / (k! 8^k)
// (DLMF 10.40.1), summed while its terms decrease.
double BesselIScaledAsymptotic(int nu, double x) {
  double term = 1, sum = 1;
  const double mu = 4.0 * nu * nu;
  for (int k = 1; k < 60; ++k) {
    const double odd = 2.0 * k - 1;
    const double next = -term * (mu - odd * odd) / (k * 8 * x);
    if (std::fabs(next) >= std::fabs(term)) break;
    term = next;
    sum += term;
    if (std::fabs(term) < kEpsilon * std::fabs(sum)) break;
  }
  return sum;
}

constexpr double kAsymptoticFrom = 30;

// e^-|x| I_nu(|x|).
double BesselIScaled(int nu, double ax) {
  if (ax > kAsymptoticFrom) {
    return BesselIScaledAsymptotic(nu, ax) / std::sqrt(2 * kPi * ax);
  }
  return BesselISeries(nu, ax) * std::exp(-ax);
}

double BesselI(int nu, double ax) {
  if (ax > kAsymptoticFrom) {
    // e^x overflows float long before double: the float cast gives inf.
    return BesselIScaledAsymptotic(nu, ax) * std::exp(ax) /
           std::sqrt(2 * kPi * ax);
  }
  return BesselISeries(nu, ax);
}

// ATen's i0/i1 give NaN at +-inf (inf * 0 in its scaled form); the scaled
// functions give 0 there.
double I0(double x) {
  if (std::isinf(x)) return kNaN;
  return BesselI(0, std::fabs(x));
}
double I0e(double x) {
  if (std::isinf(x)) return 0;
  return BesselIScaled(0, std::fabs(x));
}
double I1(double x) {
  if (std::isinf(x) || std::isnan(x)) return kNaN;
  return std::copysign(BesselI(1, std::fabs(x)), x);
}
double I1e(double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return std::copysign(0.0, x);
  return std::copysign(BesselIScaled(1, std::fabs(x)), x);
}

// log(x^a e^-x / Gamma(a)), the common factor of both expansions below.
double IgammaLogPrefactor(double a, double x) {
  return a * std::log(x) - x - std::lgamma(a);
}

// P(a, x) by its power series (DLMF 8.11.4 with 8.7.1), for x < a + 1.
double IgammaSeries(double a, double x) {
  double term = 1 / a, sum = term;
  for (int n = 1; n < 100000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (term < kEpsilon * sum) break;
  }
  return sum * std::exp(IgammaLogPrefactor(a, x));
}

// Q(a, x) by its continued fraction (DLMF 8.9.2), evaluated with the
// modified Lentz method, for x >= a + 1.
double IgammacContinuedFraction(double a, double x) {
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a;
  double c = 1 / kTiny, d = 1 / b, h = d;
  for (int n = 1; n < 100000; ++n) {
    const double an = -n * (n - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < kEpsilon) break;
  }
  return std::exp(IgammaLogPrefactor(a, x)) * h;
}

// Beyond this the series and the fraction need too many terms near x ~ a;
// Temme's uniform expansion (DLMF 8.12.3/8.12.8 with its first coefficient
// c_0) is then accurate to O(1/a), far below float precision.
constexpr double kIgammaTemmeFrom = 1e7;

// P(a, x) (or Q with `upper`) by Temme's expansion:
// Q = erfc(eta sqrt(a/2)) / 2 + R, P = erfc(-eta sqrt(a/2)) / 2 - R, where
// R = e^(-a eta^2 / 2) / sqrt(2 pi a) c_0(eta).
double IgammaTemme(double a, double x, bool upper) {
  const double lambda = x / a;
  const double eta = std::copysign(
      std::sqrt(2 * (lambda - 1 - std::log(lambda))), lambda - 1);
  // c_0 = 1/(lambda - 1) - 1/eta, which cancels near lambda = 1: there its
  // series -1/3 + eta/12.
  const double c0 = std::fabs(lambda - 1) < 1e-6
                        ? -1.0 / 3 + eta / 12
                        : 1 / (lambda - 1) - 1 / eta;
  const double r =
      std::exp(-a * eta * eta / 2) / std::sqrt(2 * kPi * a) * c0;
  const double z = eta * std::sqrt(a / 2);
  return upper ? 0.5 * std::erfc(z) + r : 0.5 * std::erfc(-z) - r;
}

// The cases both functions share; true when `*p` (= P(a, x)) is decided.
bool IgammaSpecialCase(double a, double x, double* p) {
  if (std::isnan(a) || std::isnan(x) || a < 0 || x < 0 ||
      (a == 0 && x == 0) || (std::isinf(a) && std::isinf(x))) {
    *p = kNaN;
    return true;
  }
  if (a == 0 || std::isinf(x)) {
    *p = 1;
    return true;
  }
  if (x == 0 || std::isinf(a)) {
    *p = 0;
    return true;
  }
  return false;
}

double Igamma(double a, double x) {
  double p;
  if (IgammaSpecialCase(a, x, &p)) return p;
  if (a > kIgammaTemmeFrom) return IgammaTemme(a, x, /*upper=*/false);
  if (x < a + 1) return IgammaSeries(a, x);
  return 1 - IgammacContinuedFraction(a, x);
}

double Igammac(double a, double x) {
  double p;
  if (IgammaSpecialCase(a, x, &p)) return std::isnan(p) ? p : 1 - p;
  if (a > kIgammaTemmeFrom) return IgammaTemme(a, x, /*upper=*/true);
  if (x < a + 1) return 1 - IgammaSeries(a, x);
  return IgammacContinuedFraction(a, x);
}

}  // namespace
}  // namespace rbln::compiler

extern "C" {

float rbln_lgammaf(float x) {
  int sign;
  return lgammaf_r(x, &sign);
}

float rbln_digammaf(float x) {
  return static_cast<float>(rbln::compiler::Digamma(x));
}

float rbln_polygammaf(int64_t n, float x) {
  return static_cast<float>(rbln::compiler::Polygamma(n, x));
}

float rbln_zetaf(float s, float q) {
  return static_cast<float>(rbln::compiler::Zeta(s, q));
}

float rbln_erfinvf(float y) {
  return static_cast<float>(rbln::compiler::Erfinv(y));
}

float rbln_i0f(float x) { return static_cast<float>(rbln::compiler::I0(x)); }
float rbln_i0ef(float x) { return static_cast<float>(rbln::compiler::I0e(x)); }
float rbln_i1f(float x) { return static_cast<float>(rbln::compiler::I1(x)); }
float rbln_i1ef(float x) { return static_cast<float>(rbln::compiler::I1e(x)); }

float rbln_igammaf(float a, float x) {
  return static_cast<float>(rbln::compiler::Igamma(a, x));
}

float rbln_igammacf(float a, float x) {
  return static_cast<float>(rbln::compiler::Igammac(a, x));
}

}  // extern "C"

namespace rbln::compiler {

std::vector<std::pair<const char*, void*>> SpecialMathSymbols() {
  return {
      {"rbln_lgammaf", reinterpret_cast<void*>(&rbln_lgammaf)},
      {"rbln_digammaf", reinterpret_cast<void*>(&rbln_digammaf)},
      {"rbln_polygammaf", reinterpret_cast<void*>(&rbln_polygammaf)},
      {"rbln_zetaf", reinterpret_cast<void*>(&rbln_zetaf)},
      {"rbln_erfinvf", reinterpret_cast<void*>(&rbln_erfinvf)},
      {"rbln_i0f", reinterpret_cast<void*>(&rbln_i0f)},
      {"rbln_i0ef", reinterpret_cast<void*>(&rbln_i0ef)},
      {"rbln_i1f", reinterpret_cast<void*>(&rbln_i1f)},
      {"rbln_i1ef", reinterpret_cast<void*>(&rbln_i1ef)},
      {"rbln_igammaf", reinterpret_cast<void*>(&rbln_igammaf)},
      {"rbln_igammacf", reinterpret_cast<void*>(&rbln_igammacf)},
  };
}

}  // namespace rbln::compiler

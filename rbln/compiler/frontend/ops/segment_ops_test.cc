// spec: P3, P8
// segment_reduce with lengths and offsets against a reference that reduces
// in order in the data's dtype (as ATen's CPU kernel), every reduction,
// initial values, empty segments, 2-D data; lengths that overrun the axis
// raise (P8).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/reduction_reference.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double RefSegment(const std::vector<double>& values, const std::string& reduce,
                  bool has_initial, double initial, ir::DType t) {
  double acc = has_initial        ? initial
               : reduce == "max"  ? -kInf
               : reduce == "min"  ? kInf
               : reduce == "prod" ? 1
                                  : 0;
  acc = RoundTo(t, acc);
  for (double v : values) {
    if (reduce == "max") {
      acc = std::isnan(v) ? v : std::max(acc, v);
    } else if (reduce == "min") {
      acc = std::isnan(v) ? v : std::min(acc, v);
    } else if (reduce == "prod") {
      acc = RoundTo(t, acc * v);
    } else {
      acc = RoundTo(t, acc + v);
    }
  }
  if (reduce == "mean") {
    if (values.empty() && !has_initial) return kNan;
    if (!values.empty() && !std::isnan(acc)) {
      acc = RoundTo(t, acc / RoundTo(t, values.size()));
    }
  }
  return acc;
}

TEST(SegmentOpsTest, LengthsAndOffsetsMatchTheReference) {
  const std::vector<int64_t> lengths = {2, 0, 3, 1, 4};
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    HostTensor data = Random(t, {10, 3}, 4, -2.0, 2.0);
    data.values[7] = kNan;
    for (const std::string reduce : {"sum", "mean", "max", "min", "prod"}) {
      for (bool has_initial : {false, true}) {
        for (bool offsets : {false, true}) {
          std::vector<double> want;
          int64_t start = 0;
          for (int64_t len : lengths) {
            for (int c = 0; c < 3; ++c) {
              std::vector<double> seg;
              for (int64_t j = start; j < start + len; ++j) {
                seg.push_back(data.values[j * 3 + c]);
              }
              want.push_back(RefSegment(seg, reduce, has_initial, 1.5, t));
            }
            start += len;
          }
          std::vector<double> bounds;
          if (offsets) {
            bounds.push_back(0);
            for (int64_t len : lengths) bounds.push_back(bounds.back() + len);
          } else {
            bounds.assign(lengths.begin(), lengths.end());
          }
          const HostTensor b =
              Tensor(ir::INT64, {static_cast<int64_t>(bounds.size())}, bounds);
          Attrs attrs = {{"reduce", StrA(reduce)}, {"axis", IntA(0)}};
          if (has_initial) attrs["initial"] = FloatA(1.5);
          const std::string what = absl::StrCat(
              reduce, " ", DTypeText(t), offsets ? " offsets" : " lengths",
              has_initial ? " initial" : "");
          auto got = CompileAndRun(
              OneOpGraph("segment_reduce", {data.type(), b.type()},
                         {Type(t, {5, 3})}, attrs),
              {data, b});
          ASSERT_TRUE(got.ok()) << what << ": " << got.status();
          std::vector<double> tol;
          for (double w : want)
            tol.push_back(std::isnan(w) ? 0 : 1e-6 * std::fabs(w));
          ExpectClose((*got)[0], want, tol, what);
        }
      }
    }
  }
}

TEST(SegmentOpsTest, LengthsPastTheAxisRaise) {
  const HostTensor data = Random(ir::FLOAT32, {4}, 1);
  const HostTensor lengths = Tensor(ir::INT32, {2}, {3, 3});
  auto got = CompileAndRun(
      OneOpGraph("segment_reduce", {data.type(), lengths.type()},
                 {Type(ir::FLOAT32, {2})}, {{"reduce", StrA("sum")}}),
      {data, lengths});
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("out of"));
}

}  // namespace
}  // namespace rbln::compiler

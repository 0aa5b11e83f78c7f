// spec: P3, P8
// bucketize and searchsorted against std::lower_bound / std::upper_bound,
// with per-row sequences, a sorter (range-checked, P8), NaN values and
// mixed dtypes.
#include <algorithm>
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

// ATen's cus_lower_bound / cus_upper_bound (a NaN value goes past the end).
double Bound(const std::vector<double>& seq, double v, bool right) {
  int64_t start = 0, end = seq.size();
  while (start < end) {
    const int64_t mid = start + ((end - start) >> 1);
    const bool stop = right ? seq[mid] > v : seq[mid] >= v;
    if (!stop) {
      start = mid + 1;
    } else {
      end = mid;
    }
  }
  return start;
}

TEST(SearchOpsTest, BucketizeMatchesLowerAndUpperBound) {
  for (ir::DType dtype :
       {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32, ir::INT64}) {
    const HostTensor bounds = Tensor(dtype, {6}, {-3, -1, 0, 0, 2, 5});
    HostTensor x = Random(dtype, {4, 5}, 3, -6.0, 7.0);
    x.values[0] = 0;
    x.values[1] = 5;
    x.values[2] = -3;
    if (IsFloatDType(dtype)) x.values[3] = kNan;
    for (bool right : {false, true}) {
      for (bool out_int32 : {false, true}) {
        std::vector<double> want;
        for (double v : x.values)
          want.push_back(Bound(bounds.values, v, right));
        const ir::DType out = out_int32 ? ir::INT32 : ir::INT64;
        auto got = CompileAndRun(
            OneOpGraph(
                "bucketize", {x.type(), bounds.type()}, {Type(out, {4, 5})},
                {{"right", BoolA(right)}, {"out_int32", BoolA(out_int32)}}),
            {x, bounds});
        const std::string what =
            absl::StrCat("bucketize ", DTypeText(dtype), right ? " right" : "");
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectExact((*got)[0], want, what);
      }
    }
  }
}

// Per-row sequences, side="right", and a sorter over unsorted rows.
TEST(SearchOpsTest, SearchsortedRowsAndSorter) {
  const HostTensor seq =
      Tensor(ir::FLOAT32, {2, 4}, {1, 3, 5, 7, -2, -2, 0, 9});
  const HostTensor x = Tensor(ir::FLOAT32, {2, 3}, {3, 8, 0, -2, 1, 10});
  for (bool right : {false, true}) {
    std::vector<double> want;
    for (int r = 0; r < 2; ++r) {
      const std::vector<double> row(seq.values.begin() + 4 * r,
                                    seq.values.begin() + 4 * r + 4);
      for (int j = 0; j < 3; ++j) {
        want.push_back(Bound(row, x.values[3 * r + j], right));
      }
    }
    auto got =
        CompileAndRun(OneOpGraph("searchsorted", {seq.type(), x.type()},
                                 {Type(ir::INT64, {2, 3})},
                                 {{"side", StrA(right ? "right" : "left")}}),
                      {seq, x});
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectExact((*got)[0], want, right ? "side=right" : "side=left");
  }
  // Unsorted [7, 1, 5, 3] with sorter [1, 3, 2, 0].
  const HostTensor unsorted = Tensor(ir::INT64, {4}, {7, 1, 5, 3});
  const HostTensor sorter = Tensor(ir::INT64, {4}, {1, 3, 2, 0});
  const HostTensor v = Tensor(ir::INT64, {5}, {0, 1, 4, 7, 8});
  auto got = CompileAndRun(
      OneOpGraph("searchsorted", {unsorted.type(), v.type(), sorter.type()},
                 {Type(ir::INT64, {5})}),
      {unsorted, v, sorter});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {0, 0, 2, 3, 4}, "with a sorter");
  const HostTensor bad = Tensor(ir::INT64, {4}, {1, 3, 4, 0});
  got = CompileAndRun(
      OneOpGraph("searchsorted", {unsorted.type(), v.type(), bad.type()},
                 {Type(ir::INT64, {5})}),
      {unsorted, v, bad});
  ASSERT_FALSE(got.ok()) << "a sorter index past the end must raise (P8)";
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("out of"));
}

// Mixed dtypes compare in the promoted dtype; a scalar value is an attr.
TEST(SearchOpsTest, PromotionAndScalars) {
  const HostTensor bounds = Tensor(ir::FLOAT16, {3}, {0.5, 1.5, 2.5});
  const HostTensor ints = Tensor(ir::INT64, {4}, {0, 1, 2, 3});
  auto got = CompileAndRun(OneOpGraph("bucketize", {ints.type(), bounds.type()},
                                      {Type(ir::INT64, {4})}),
                           {ints, bounds});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {0, 1, 2, 3}, "int64 values, float16 boundaries");
  got =
      CompileAndRun(OneOpGraph("searchsorted", {bounds.type()},
                               {Type(ir::INT64, {})}, {{"self", FloatA(1.5)}}),
                    {bounds});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {1}, "scalar value");
}

}  // namespace
}  // namespace rbln::compiler

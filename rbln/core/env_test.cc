#include "rbln/core/env.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln::env {
namespace {

using ::testing::HasSubstr;

TEST(ParseByteSizeTest, AcceptsPlainAndBinaryUnits) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("64KiB"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("16MiB"), 16u << 20);
  EXPECT_EQ(*ParseByteSize("2gib"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize(" 3 GB "), uint64_t{3} << 30);
}

TEST(ParseByteSizeTest, RejectsMalformed) {
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("GiB").ok());
  EXPECT_FALSE(ParseByteSize("-5").ok());
  EXPECT_FALSE(ParseByteSize("0").ok());
  EXPECT_FALSE(ParseByteSize("16 potatoes").ok());
  EXPECT_FALSE(ParseByteSize("99999999999TiB").ok());
}

TEST(GetByteSizeTest, ErrorNamesVariableAndForm) {
  setenv("RBLN_TEST_BYTES", "16XB", 1);
  absl::StatusOr<uint64_t> v = GetByteSize("RBLN_TEST_BYTES", 1);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("RBLN_TEST_BYTES"));
  EXPECT_THAT(v.status().message(), HasSubstr("16XB"));
  EXPECT_THAT(v.status().message(), HasSubstr("MiB"));
  unsetenv("RBLN_TEST_BYTES");
  EXPECT_EQ(*GetByteSize("RBLN_TEST_BYTES", 7), 7u);
}

TEST(GetBoolTest, ParsesAndRejects) {
  setenv("RBLN_TEST_BOOL", "ON", 1);
  EXPECT_TRUE(*GetBool("RBLN_TEST_BOOL", false));
  setenv("RBLN_TEST_BOOL", "0", 1);
  EXPECT_FALSE(*GetBool("RBLN_TEST_BOOL", true));
  setenv("RBLN_TEST_BOOL", "maybe", 1);
  absl::StatusOr<bool> v = GetBool("RBLN_TEST_BOOL", true);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("RBLN_TEST_BOOL"));
  unsetenv("RBLN_TEST_BOOL");
  EXPECT_TRUE(*GetBool("RBLN_TEST_BOOL", true));
}

TEST(GetIntTest, EnforcesRange) {
  setenv("RBLN_TEST_INT", "5", 1);
  EXPECT_EQ(*GetInt("RBLN_TEST_INT", 1, 1, 8), 5);
  setenv("RBLN_TEST_INT", "9", 1);
  EXPECT_THAT(GetInt("RBLN_TEST_INT", 1, 1, 8).status().message(),
              HasSubstr("[1, 8]"));
  setenv("RBLN_TEST_INT", "two", 1);
  EXPECT_FALSE(GetInt("RBLN_TEST_INT", 1, 1, 8).ok());
  unsetenv("RBLN_TEST_INT");
}

TEST(GetChoiceTest, CaseInsensitiveAndListsChoices) {
  setenv("RBLN_TEST_CHOICE", "ATOM", 1);
  EXPECT_EQ(*GetChoice("RBLN_TEST_CHOICE", "rebel100", {"rebel100", "atom"}),
            "atom");
  setenv("RBLN_TEST_CHOICE", "rebel200", 1);
  absl::StatusOr<std::string> v =
      GetChoice("RBLN_TEST_CHOICE", "rebel100", {"rebel100", "atom"});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("rebel100, atom"));
  unsetenv("RBLN_TEST_CHOICE");
}

}  // namespace
}  // namespace rbln::env

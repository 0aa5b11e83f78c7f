// spec: A2, A3, A4, A5
#include "rbln/core/device_map.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// An environment made of exactly these variables; the process environment
// is never touched.
EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](
             absl::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

DeviceProfile Atom(int num_npus) {
  DeviceProfile p = DeviceProfile::ForFamily(DeviceFamily::kAtom);
  p.num_npus = num_npus;
  return p;
}

DeviceProfile Rebel100(int num_npus) {
  DeviceProfile p = DeviceProfile::ForFamily(DeviceFamily::kRebel100);
  p.num_npus = num_npus;
  return p;
}

// The logical devices as plain index lists, for ElementsAre.
std::vector<std::vector<int>> Groups(const DeviceMap& map) {
  std::vector<std::vector<int>> groups;
  for (const LogicalDevice& d : map.devices) groups.push_back(d.npus);
  return groups;
}

std::string ErrorOf(const DeviceProfile& profile,
                    std::map<std::string, std::string> vars) {
  absl::StatusOr<DeviceMap> map = PlanDeviceMap(profile, FakeEnv(vars));
  if (map.ok()) return "unexpectedly OK: " + map->DebugString();
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(map.status().message());
}

// --- Defaults and SPEC A5 ----------------------------------------------------

TEST(DeviceMapTest, DefaultIsOneLogicalDevicePerNpu) {
  for (const DeviceProfile& profile : {Rebel100(1), Rebel100(3), Atom(4)}) {
    absl::StatusOr<DeviceMap> map = PlanDeviceMap(profile, FakeEnv({}));
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_EQ(map->physical_device_count(), profile.num_npus);
    ASSERT_THAT(map->devices, SizeIs(profile.num_npus));
    for (int i = 0; i < profile.num_npus; ++i) {
      EXPECT_EQ(map->visible_npus[i], i);
      EXPECT_THAT(map->devices[i].npus, ElementsAre(i));
    }
    EXPECT_THAT(map->warnings, IsEmpty());
  }
}

TEST(DeviceMapTest, SpecA5FourAtomNpusTwoPerDevice) {
  absl::StatusOr<DeviceMap> map =
      PlanDeviceMap(Atom(4), FakeEnv({{kEnvNpusPerDevice, "2"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(map->devices, SizeIs(2));  // device_count()
  EXPECT_EQ(map->physical_device_count(), 4);
  EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(map->warnings, IsEmpty());
  EXPECT_EQ(map->DebugString(), "rbln:0 -> NPU [0,1]; rbln:1 -> NPU [2,3]");
}

TEST(DeviceMapTest, EmptyValueCountsAsUnset) {
  absl::StatusOr<DeviceMap> map = PlanDeviceMap(
      Atom(2), FakeEnv({{kEnvVisibleDevices, ""},
                        {kEnvNpusPerDevice, ""},
                        {kEnvDeviceMap, ""}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(0), ElementsAre(1)));
  EXPECT_THAT(map->warnings, IsEmpty());
}

TEST(DeviceMapTest, ProcessEnvReportsUnsetAsNullopt) {
  EXPECT_EQ(ProcessEnv()("RBLN_DEVICE_MAP_TEST_SURELY_UNSET_VARIABLE"),
            std::nullopt);
}

TEST(DeviceMapTest, ProfileWithoutNpusIsError) {
  absl::StatusOr<DeviceMap> map = PlanDeviceMap(Atom(0), FakeEnv({}));
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
}

// --- RBLN_VISIBLE_DEVICES and its deprecated alias (SPEC A3) ----------------

TEST(DeviceMapTest, VisibleDevicesLimitsAndOrders) {
  struct Case {
    std::string value;
    std::vector<int> visible;
  };
  for (const Case& c : std::vector<Case>{{"0,2,3", {0, 2, 3}},
                                         {"3,1", {3, 1}},
                                         {" 3 , 1 ", {3, 1}},
                                         {"2", {2}},
                                         {"\t1,0\n", {1, 0}}}) {
    SCOPED_TRACE(c.value);
    absl::StatusOr<DeviceMap> map =
        PlanDeviceMap(Atom(4), FakeEnv({{kEnvVisibleDevices, c.value}}));
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_EQ(map->visible_npus, c.visible);
    EXPECT_EQ(map->physical_device_count(),
              static_cast<int>(c.visible.size()));
    // Logical devices number the visible list, not physical ids.
    ASSERT_THAT(map->devices, SizeIs(c.visible.size()));
    for (int i = 0; i < static_cast<int>(c.visible.size()); ++i) {
      EXPECT_THAT(map->devices[i].npus, ElementsAre(i));
    }
    EXPECT_THAT(map->warnings, IsEmpty());
  }
}

TEST(DeviceMapTest, MalformedVisibleDevicesIsClearError) {
  struct Case {
    std::string value;
    std::string problem;
  };
  for (const Case& c : std::vector<Case>{
           {"4", "NPU 4 does not exist"},
           {"0,99999999999", "does not exist"},
           {"1,1", "NPU 1 is listed twice"},
           {"0,,1", "empty entry"},
           {"0,", "empty entry"},
           {",0", "empty entry"},
           {" ", "empty entry"},
           {"a", "'a' is not an NPU id"},
           {"-1", "'-1' is not an NPU id"},
           {"+1", "'+1' is not an NPU id"},
           {"0 1", "'0 1' is not an NPU id"},
           {"[0,1]", "'[0' is not an NPU id"}}) {
    SCOPED_TRACE(c.value);
    EXPECT_THAT(ErrorOf(Atom(4), {{kEnvVisibleDevices, c.value}}),
                AllOf(HasSubstr("RBLN_VISIBLE_DEVICES"),
                      HasSubstr("'" + c.value + "'"), HasSubstr(c.problem),
                      HasSubstr("ids in [0, 3] such as 0,2,3")));
  }
}

TEST(DeviceMapTest, DeprecatedAliasIsUsedWithWarning) {
  absl::StatusOr<DeviceMap> map =
      PlanDeviceMap(Atom(4), FakeEnv({{kEnvDevicesDeprecated, "1,3"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(map->visible_npus, ElementsAre(1, 3));
  ASSERT_THAT(map->warnings, SizeIs(1));
  EXPECT_THAT(map->warnings[0],
              AllOf(HasSubstr("RBLN_DEVICES is deprecated"),
                    HasSubstr("use RBLN_VISIBLE_DEVICES")));
}

TEST(DeviceMapTest, VisibleDevicesWinsOverDeprecatedAlias) {
  absl::StatusOr<DeviceMap> map = PlanDeviceMap(
      Atom(4), FakeEnv({{kEnvVisibleDevices, "2"},
                        {kEnvDevicesDeprecated, "not even valid"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(map->visible_npus, ElementsAre(2));
  ASSERT_THAT(map->warnings, SizeIs(1));
  EXPECT_THAT(map->warnings[0],
              AllOf(HasSubstr("RBLN_DEVICES='not even valid' is ignored"),
                    HasSubstr("RBLN_VISIBLE_DEVICES is set")));
}

TEST(DeviceMapTest, MalformedDeprecatedAliasNamesTheAlias) {
  std::string error = ErrorOf(Atom(2), {{kEnvDevicesDeprecated, "0,5"}});
  EXPECT_THAT(error, AllOf(HasSubstr("environment variable RBLN_DEVICES "),
                           HasSubstr("'0,5'"), HasSubstr("NPU 5")));
}

// --- RBLN_NPUS_PER_DEVICE (ATOM, SPEC A2) -----------------------------------

TEST(DeviceMapTest, NpusPerDeviceGroupsConsecutiveNpus) {
  struct Case {
    std::string value;
    std::vector<std::vector<int>> groups;
  };
  for (const Case& c : std::vector<Case>{
           {"1", {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
           {"2", {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
           {" 4 ", {{0, 1, 2, 3}, {4, 5, 6, 7}}},
           {"8", {{0, 1, 2, 3, 4, 5, 6, 7}}}}) {
    SCOPED_TRACE(c.value);
    absl::StatusOr<DeviceMap> map =
        PlanDeviceMap(Atom(8), FakeEnv({{kEnvNpusPerDevice, c.value}}));
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_EQ(Groups(*map), c.groups);
    EXPECT_EQ(map->physical_device_count(), 8);
    EXPECT_THAT(map->warnings, IsEmpty());
  }
}

TEST(DeviceMapTest, NpusPerDeviceUpToThirtyTwo) {
  absl::StatusOr<DeviceMap> map =
      PlanDeviceMap(Atom(64), FakeEnv({{kEnvNpusPerDevice, "32"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_THAT(map->devices, SizeIs(2));
  EXPECT_THAT(map->devices[1].npus, SizeIs(32));
  EXPECT_EQ(map->devices[1].npus.front(), 32);
}

TEST(DeviceMapTest, MalformedNpusPerDeviceIsClearError) {
  struct Case {
    std::string value;
    std::string problem;
  };
  for (const Case& c : std::vector<Case>{
           {"3", "not a supported RSD group size"},
           {"0", "not a supported RSD group size"},
           {"64", "not a supported RSD group size"},
           {"-2", "not a number"},
           {"two", "not a number"},
           {"2.0", "not a number"},
           {"2,2", "not a number"},
           {"99999999999", "not a number"}}) {
    SCOPED_TRACE(c.value);
    EXPECT_THAT(ErrorOf(Atom(8), {{kEnvNpusPerDevice, c.value}}),
                AllOf(HasSubstr("RBLN_NPUS_PER_DEVICE"),
                      HasSubstr("'" + c.value + "'"), HasSubstr(c.problem),
                      HasSubstr("one of 1, 2, 4, 8, 16 or 32")));
  }
}

TEST(DeviceMapTest, NpusPerDeviceLargerThanVisibleIsError) {
  EXPECT_THAT(ErrorOf(Atom(4), {{kEnvNpusPerDevice, "8"}}),
              AllOf(HasSubstr("RBLN_NPUS_PER_DEVICE"), HasSubstr("'8'"),
                    HasSubstr("only 4 NPUs are visible"),
                    HasSubstr("at most 4")));
  // Visibility counts, not the machine's NPUs.
  EXPECT_THAT(ErrorOf(Atom(8), {{kEnvVisibleDevices, "0,1"},
                                {kEnvNpusPerDevice, "4"}}),
              HasSubstr("only 2 NPUs are visible"));
}

TEST(DeviceMapTest, NpusPerDeviceLeftoverIsWarned) {
  absl::StatusOr<DeviceMap> map =
      PlanDeviceMap(Atom(6), FakeEnv({{kEnvNpusPerDevice, "4"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(0, 1, 2, 3)));
  EXPECT_EQ(map->physical_device_count(), 6);
  ASSERT_THAT(map->warnings, SizeIs(1));
  EXPECT_THAT(map->warnings[0],
              AllOf(HasSubstr("RBLN_NPUS_PER_DEVICE='4'"),
                    HasSubstr("NPU 4, 5 of the 6 visible NPUs"),
                    HasSubstr("unused")));
}

// --- Visible list composed with groups (SPEC A3) ----------------------------

TEST(DeviceMapTest, GroupsIndexTheVisibleList) {
  absl::StatusOr<DeviceMap> map = PlanDeviceMap(
      Atom(8), FakeEnv({{kEnvVisibleDevices, "7,6,5,4"},
                        {kEnvNpusPerDevice, "2"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(map->visible_npus, ElementsAre(7, 6, 5, 4));
  EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));

  map = PlanDeviceMap(Atom(8), FakeEnv({{kEnvVisibleDevices, "4,5,6,7"},
                                        {kEnvDeviceMap, "[3],[0,1]"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(3), ElementsAre(0, 1)));
  // The unused index is reported with its physical id too.
  ASSERT_THAT(map->warnings, SizeIs(1));
  EXPECT_THAT(map->warnings[0], HasSubstr("NPU 2 (physical 6)"));

  // Physical NPU 4 exists, but index 4 is past the 4 visible NPUs.
  EXPECT_THAT(ErrorOf(Atom(8), {{kEnvVisibleDevices, "4,5,6,7"},
                                {kEnvDeviceMap, "[4]"}}),
              AllOf(HasSubstr("RBLN_DEVICE_MAP"),
                    HasSubstr("NPU index 4 is out of range (4 NPUs are "
                              "visible)")));
}

// --- RBLN_DEVICE_MAP (ATOM, SPEC A4) ----------------------------------------

TEST(DeviceMapTest, DeviceMapNamesGroupsExplicitly) {
  struct Case {
    std::string value;
    std::vector<std::vector<int>> groups;
  };
  for (const Case& c : std::vector<Case>{
           {"[0,1],[2,3,4,5]", {{0, 1}, {2, 3, 4, 5}}},
           {" [ 0 , 1 ] ,\t[2,3,4,5] ", {{0, 1}, {2, 3, 4, 5}}},
           {"[2,3,4,5],[1,0]", {{2, 3, 4, 5}, {1, 0}}},
           {"[0],[1],[2],[3],[4],[5]", {{0}, {1}, {2}, {3}, {4}, {5}}}}) {
    SCOPED_TRACE(c.value);
    absl::StatusOr<DeviceMap> map =
        PlanDeviceMap(Atom(6), FakeEnv({{kEnvDeviceMap, c.value}}));
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_EQ(Groups(*map), c.groups);
    EXPECT_EQ(map->physical_device_count(), 6);
    EXPECT_THAT(map->warnings, IsEmpty());
  }
}

TEST(DeviceMapTest, DeviceMapUnusedNpusAreWarned) {
  absl::StatusOr<DeviceMap> map =
      PlanDeviceMap(Atom(4), FakeEnv({{kEnvDeviceMap, "[1]"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(1)));
  ASSERT_THAT(map->warnings, SizeIs(1));
  EXPECT_THAT(map->warnings[0],
              AllOf(HasSubstr("RBLN_DEVICE_MAP='[1]'"),
                    HasSubstr("NPU 0, 2, 3 of the 4 visible NPUs"),
                    HasSubstr("they stay unused")));
}

TEST(DeviceMapTest, DeviceMapWinsOverNpusPerDevice) {
  // The ignored value is not even checked: it has no effect.
  for (std::string per_device : {"2", "3"}) {
    SCOPED_TRACE(per_device);
    absl::StatusOr<DeviceMap> map = PlanDeviceMap(
        Atom(4), FakeEnv({{kEnvDeviceMap, "[0,1,2,3]"},
                          {kEnvNpusPerDevice, per_device}}));
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(0, 1, 2, 3)));
    ASSERT_THAT(map->warnings, SizeIs(1));
    EXPECT_THAT(map->warnings[0],
                AllOf(HasSubstr("RBLN_NPUS_PER_DEVICE='" + per_device +
                                "' is ignored"),
                      HasSubstr("RBLN_DEVICE_MAP is set")));
  }
}

TEST(DeviceMapTest, DeviceMapOverlapIsError) {
  EXPECT_THAT(ErrorOf(Atom(4), {{kEnvDeviceMap, "[0,1],[1,2]"}}),
              AllOf(HasSubstr("RBLN_DEVICE_MAP"), HasSubstr("'[0,1],[1,2]'"),
                    HasSubstr("NPU index 1 is in group 0 and group 1"),
                    HasSubstr("each index in at most one group")));
  EXPECT_THAT(ErrorOf(Atom(4), {{kEnvDeviceMap, "[0,0]"}}),
              HasSubstr("NPU index 0 appears twice in group 0"));
}

TEST(DeviceMapTest, DeviceMapOutOfRangeIsError) {
  EXPECT_THAT(ErrorOf(Atom(4), {{kEnvDeviceMap, "[0,1],[2,4]"}}),
              AllOf(HasSubstr("RBLN_DEVICE_MAP"), HasSubstr("'[0,1],[2,4]'"),
                    HasSubstr("NPU index 4 is out of range"),
                    HasSubstr("indices in [0, 3]")));
  EXPECT_THAT(ErrorOf(Atom(4), {{kEnvDeviceMap, "[99999999999]"}}),
              AllOf(HasSubstr("RBLN_DEVICE_MAP"),
                    HasSubstr("NPU index 99999999999 is too large")));
}

TEST(DeviceMapTest, DeviceMapBadGroupSizeIsError) {
  struct Case {
    std::string value;
    std::string problem;
  };
  for (const Case& c : std::vector<Case>{
           {"[0,1,2]", "group 0 [0,1,2] has 3 NPUs"},
           {"[0,1],[2,3,4]", "group 1 [2,3,4] has 3 NPUs"},
           {"[]", "group 0 [] has 0 NPUs"},
           {"[0],[ ]", "group 1 [] has 0 NPUs"}}) {
    SCOPED_TRACE(c.value);
    EXPECT_THAT(ErrorOf(Atom(8), {{kEnvDeviceMap, c.value}}),
                AllOf(HasSubstr("RBLN_DEVICE_MAP"),
                      HasSubstr("'" + c.value + "'"), HasSubstr(c.problem),
                      HasSubstr("1, 2, 4, 8, 16 or 32 NPUs per group")));
  }
}

TEST(DeviceMapTest, DeviceMapBadSyntaxIsError) {
  struct Case {
    std::string value;
    std::string problem;
  };
  for (const Case& c : std::vector<Case>{
           {"0,1", "character 1 is '0' where '[' should be"},
           {"[0,1", "the value ends where ',' or ']' should be"},
           {"[0,1]]", "character 6 is ']' where ',' or the end should be"},
           {"[[0,1]]", "character 2 is '[' where an NPU index should be"},
           {"[0,1][2,3]", "character 6 is '[' where ',' or the end should be"},
           {"[0,1],", "the value ends where '[' should be"},
           {"[0;1]", "character 3 is ';' where ',' or ']' should be"},
           {"[a]", "character 2 is 'a' where an NPU index should be"},
           {"[-1]", "character 2 is '-' where an NPU index should be"},
           {"[0,]", "character 4 is ']' where an NPU index should be"},
           {"[0,1],[2,3]x",
            "character 12 is 'x' where ',' or the end should be"},
           {"(0,1)", "character 1 is '(' where '[' should be"},
           {" ", "the value ends where '[' should be"}}) {
    SCOPED_TRACE(c.value);
    EXPECT_THAT(ErrorOf(Atom(8), {{kEnvDeviceMap, c.value}}),
                AllOf(HasSubstr("environment variable RBLN_DEVICE_MAP"),
                      HasSubstr("'" + c.value + "'"), HasSubstr(c.problem),
                      HasSubstr("expected groups of NPU indices such as "
                                "[0,1],[2,3]")));
  }
}

// --- Rebel100 (SPEC A2, A4) -------------------------------------------------

TEST(DeviceMapTest, Rebel100RejectsGroupVariables) {
  for (const char* name : {kEnvNpusPerDevice, kEnvDeviceMap}) {
    SCOPED_TRACE(name);
    // Even a value that would be a no-op on ATOM: setting it at all shows a
    // wrong mental model of the card.
    std::string value =
        absl::string_view(name) == kEnvDeviceMap ? "[0],[1]" : "1";
    EXPECT_THAT(
        ErrorOf(Rebel100(2), {{name, value}}),
        AllOf(HasSubstr(absl::StrCat("environment variable ", name)),
              HasSubstr("'" + value + "'"), HasSubstr("fixed RSD-4 group"),
              HasSubstr("a logical device is always one card"),
              HasSubstr(absl::StrCat("Unset ", name)),
              HasSubstr("torch.distributed with the rbln-ccl backend")));
  }
  EXPECT_THAT(ErrorOf(Rebel100(2), {{kEnvNpusPerDevice, "2"},
                                    {kEnvDeviceMap, "[0,1]"}}),
              HasSubstr("Unset RBLN_DEVICE_MAP and RBLN_NPUS_PER_DEVICE"));
}

TEST(DeviceMapTest, Rebel100HonorsVisibleDevices) {
  absl::StatusOr<DeviceMap> map = PlanDeviceMap(
      Rebel100(4), FakeEnv({{kEnvVisibleDevices, "3,1"}}));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(map->visible_npus, ElementsAre(3, 1));
  EXPECT_THAT(Groups(*map), ElementsAre(ElementsAre(0), ElementsAre(1)));
  EXPECT_EQ(map->DebugString(), "rbln:0 -> NPU [0]; rbln:1 -> NPU [1]");
}

}  // namespace
}  // namespace rbln

// The specialization cache (bounded LRU, statistics, threads) and the
// on-disk cache (reuse across processes, corrupt and stale entries).
// spec: P9, G4
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/execution/disk_cache.h"
#include "rbln/compiler/testing/op_test_util.h"

extern char** environ;

namespace rbln::compiler {
namespace {

using testing::HostTensor;
using testing::Random;
using testing::Type;

// a + b over f32[n]: a different program per n.
ir::Graph AddOfSize(int64_t n) { return testing::AddGraph(Type(ir::FLOAT32, {n})); }

void ExpectAddWorks(const CompiledProgram& program, int64_t n) {
  HostTensor a = Random(ir::FLOAT32, {n}, 1), b = Random(ir::FLOAT32, {n}, 2);
  absl::StatusOr<std::vector<HostTensor>> out = testing::RunProgram(program, {a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ((*out)[0].values[i], static_cast<float>(a.values[i] + b.values[i]));
  }
}

std::string TempDir(const std::string& name) {
  std::string dir = absl::StrFormat("%s/%s_%d", ::testing::TempDir(), name, getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CompilerCacheTest, LruEvictsTheLeastRecentlyUsed) {
  Compiler compiler(CompilerOptions{.cache_capacity = 2});
  auto p1 = compiler.Compile(AddOfSize(1));
  auto p2 = compiler.Compile(AddOfSize(2));
  ASSERT_TRUE(p1.ok() && p2.ok());
  // Touch 1, so that 2 is the least recently used when 3 arrives.
  auto p1_again = compiler.Compile(AddOfSize(1));
  ASSERT_TRUE(p1_again.ok());
  EXPECT_EQ(p1_again->get(), p1->get());
  ASSERT_TRUE(compiler.Compile(AddOfSize(3)).ok());
  CompilerStats s = compiler.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 3);
  EXPECT_EQ(s.compiles, 3);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.capacity, 2);
  EXPECT_GT(s.compile_time, absl::ZeroDuration());
  // 1 stayed, 2 was evicted (and recompiles), which evicts 3.
  ASSERT_TRUE(compiler.Compile(AddOfSize(1)).ok());
  EXPECT_EQ(compiler.stats().hits, 2);
  auto p2_again = compiler.Compile(AddOfSize(2));
  ASSERT_TRUE(p2_again.ok());
  s = compiler.stats();
  EXPECT_EQ(s.compiles, 4);
  EXPECT_EQ(s.evictions, 2);
  // An evicted program that a caller still holds keeps working.
  ExpectAddWorks(**p2, 2);
  ExpectAddWorks(**p2_again, 2);
}

TEST(CompilerCacheTest, CacheSizeComesFromTheEnvironment) {
  setenv("RBLN_COMPILER_CACHE_SIZE", "3", 1);
  absl::StatusOr<CompilerOptions> options = CompilerOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->cache_capacity, 3);
  for (const char* bad : {"0", "-4", "lots", "12MiB"}) {
    setenv("RBLN_COMPILER_CACHE_SIZE", bad, 1);
    options = CompilerOptions::FromEnv();
    ASSERT_FALSE(options.ok()) << bad;
    EXPECT_NE(options.status().message().find("RBLN_COMPILER_CACHE_SIZE"),
              std::string::npos)
        << options.status();
    // A compiler built from a bad environment says why on every compile.
    Compiler compiler;
    absl::StatusOr<std::shared_ptr<const CompiledProgram>> p =
        compiler.Compile(AddOfSize(4));
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("RBLN_COMPILER_CACHE_SIZE"),
              std::string::npos);
  }
  unsetenv("RBLN_COMPILER_CACHE_SIZE");
  EXPECT_EQ(CompilerOptions::FromEnv()->cache_capacity, 512);
}

TEST(CompilerCacheTest, BadPackedWeightsCapacityFailsTheCompile) {
  // The GEMM library reads it at run time; the compile reports it first.
  setenv("RBLN_COMPILER_PACKED_WEIGHTS_MB", "-1", 1);
  absl::StatusOr<CompilerOptions> options = CompilerOptions::FromEnv();
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("RBLN_COMPILER_PACKED_WEIGHTS_MB"),
            std::string::npos)
      << options.status();
  unsetenv("RBLN_COMPILER_PACKED_WEIGHTS_MB");
  EXPECT_TRUE(CompilerOptions::FromEnv().ok());
}

TEST(CompilerCacheTest, BadF16GemmRouteFailsTheCompile) {
  // The GEMM library reads it at run time; the compile reports it first.
  setenv("RBLN_COMPILER_F16_GEMM", "bf16", 1);
  absl::StatusOr<CompilerOptions> options = CompilerOptions::FromEnv();
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("RBLN_COMPILER_F16_GEMM"),
            std::string::npos)
      << options.status();
  unsetenv("RBLN_COMPILER_F16_GEMM");
  EXPECT_TRUE(CompilerOptions::FromEnv().ok());
}

// Several threads compile overlapping graphs: each graph is compiled once,
// every caller gets a working program, and the counts add up.
TEST(CompilerCacheTest, ConcurrentCompilesSharePrograms) {
  Compiler compiler(CompilerOptions{.cache_capacity = 64});
  constexpr int kThreads = 6, kGraphs = 4, kRounds = 3;
  std::vector<std::vector<std::shared_ptr<const CompiledProgram>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        for (int g = 0; g < kGraphs; ++g) {
          auto p = compiler.Compile(AddOfSize(10 + (g + t) % kGraphs));
          ASSERT_TRUE(p.ok()) << p.status();
          got[t].push_back(*p);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CompilerStats s = compiler.stats();
  EXPECT_EQ(s.compiles, kGraphs);
  EXPECT_EQ(s.hits + s.misses, kThreads * kGraphs * kRounds);
  EXPECT_EQ(s.entries, kGraphs);
  for (int t = 0; t < kThreads; ++t) {
    for (const auto& p : got[t]) {
      ExpectAddWorks(*p, p->graph().inputs(0).type().shape(0));
    }
  }
}

// --- Disk cache. -----------------------------------------------------------

// A graph with a gather (the kernel calls back into this library) and a
// matmul (BLAS when available): both must resolve in a loaded object.
ir::Graph EmbedAndProject() {
  ir::Graph g;
  g.set_name("embed_project");
  testing::AddInput(g, "w", Type(ir::FLOAT32, {8, 4}));
  testing::AddInput(g, "ids", Type(ir::INT64, {3}));
  testing::AddInput(g, "p", Type(ir::FLOAT32, {4, 5}));
  testing::AddNode(g, "embedding", {"w", "ids"}, "e", Type(ir::FLOAT32, {3, 4}));
  testing::AddNode(g, "mm", {"e", "p"}, "out", Type(ir::FLOAT32, {3, 5}));
  g.add_outputs("out");
  return g;
}

void ExpectEmbedAndProjectWorks(const CompiledProgram& program) {
  HostTensor w = Random(ir::FLOAT32, {8, 4}, 3), p = Random(ir::FLOAT32, {4, 5}, 4);
  HostTensor ids = testing::Tensor(ir::INT64, {3}, {7, 0, 2});
  absl::StatusOr<std::vector<HostTensor>> out = testing::RunProgram(program, {w, ids, p});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      double want = 0;
      for (int k = 0; k < 4; ++k) {
        want += w.values[ids.values[i] * 4 + k] * p.values[k * 5 + j];
      }
      EXPECT_NEAR((*out)[0].values[i * 5 + j], want, 1e-5);
    }
  }
  // The kernel's index check works in a loaded object too.
  ids.values[1] = 8;
  out = testing::RunProgram(program, {w, ids, p});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("embedding"), std::string::npos);
}

// Runs this test binary's `test` in a new process with `env` added.
int RunChild(const std::string& test, const std::string& env) {
  std::string filter = "--gtest_filter=" + test;
  char* argv[] = {const_cast<char*>("/proc/self/exe"), filter.data(), nullptr};
  std::vector<char*> envp;
  std::string env_copy = env;
  envp.push_back(env_copy.data());
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
    return -1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The child half of NewProcessReusesObjectsWithoutCodegen.
TEST(CompilerCacheTest, ChildLoadsFromDisk) {
  const char* dir = getenv("RBLN_TEST_DISK_CACHE_CHILD");
  if (dir == nullptr) GTEST_SKIP() << "run by NewProcessReusesObjectsWithoutCodegen";
  Compiler compiler(CompilerOptions{.cache_dir = dir});
  auto program = compiler.Compile(EmbedAndProject());
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(compiler.stats().disk_hits, 1);
  EXPECT_EQ(compiler.stats().compiles, 0);
  EXPECT_EQ(CounterRegistry::Global().Get("compiler/disk_hits")->value(), 1);
  ExpectEmbedAndProjectWorks(**program);
}

TEST(CompilerCacheTest, NewProcessReusesObjectsWithoutCodegen) {
  const std::string dir = TempDir("disk_cache");
  {
    Compiler compiler(CompilerOptions{.cache_dir = dir});
    auto program = compiler.Compile(EmbedAndProject());
    ASSERT_TRUE(program.ok()) << program.status();
    EXPECT_EQ(compiler.stats().compiles, 1);
    EXPECT_EQ(compiler.stats().disk_writes, 1);
    ExpectEmbedAndProjectWorks(**program);
  }
  EXPECT_EQ(RunChild("CompilerCacheTest.ChildLoadsFromDisk",
                     "RBLN_TEST_DISK_CACHE_CHILD=" + dir),
            0);
}

std::string OnlyFile(const std::string& dir, const std::string& suffix) {
  std::string found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (p.size() > suffix.size() && p.substr(p.size() - suffix.size()) == suffix) {
      found = p;
    }
  }
  return found;
}

// Entries of another build of the compiler are stale even without a
// version bump: the manifest records this binary's build ID.
TEST(CompilerCacheTest, ManifestsNameTheCompilersBuild) {
  const std::string& build = CompilerBuild();
  const std::string prefix = absl::StrCat(kCompilerVersion, "+");
  ASSERT_EQ(build.rfind(prefix, 0), 0u) << build;
  const std::string id = build.substr(prefix.size());
  EXPECT_GE(id.size(), 32u) << build;
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << build;
}

TEST(CompilerCacheTest, CorruptAndStaleEntriesAreRebuilt) {
  const std::string dir = TempDir("disk_cache_bad");
  const ir::Graph graph = AddOfSize(7);
  {
    Compiler writer(CompilerOptions{.cache_dir = dir});
    ASSERT_TRUE(writer.Compile(graph).ok());
  }
  const std::string object = OnlyFile(dir, ".o"), manifest = OnlyFile(dir, ".manifest");
  ASSERT_FALSE(object.empty());
  ASSERT_FALSE(manifest.empty());

  // A flipped byte in the object: rejected, rebuilt, rewritten.
  {
    std::fstream f(object, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  {
    Compiler reader(CompilerOptions{.cache_dir = dir});
    auto p = reader.Compile(graph);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(reader.stats().disk_rejects, 1);
    EXPECT_EQ(reader.stats().disk_hits, 0);
    EXPECT_EQ(reader.stats().compiles, 1);
    EXPECT_EQ(reader.stats().disk_writes, 1);
    ExpectAddWorks(**p, 7);
  }
  // The rebuilt entry loads.
  {
    Compiler reader(CompilerOptions{.cache_dir = dir});
    auto p = reader.Compile(graph);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(reader.stats().disk_hits, 1);
    EXPECT_EQ(reader.stats().compiles, 0);
    ExpectAddWorks(**p, 7);
  }
  // A manifest from another compiler version is stale.
  {
    std::ifstream in(manifest, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = bytes.find(kCompilerVersion);
    ASSERT_NE(at, std::string::npos);
    bytes[at] = 'X';
    std::ofstream out(manifest, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  {
    Compiler reader(CompilerOptions{.cache_dir = dir});
    ASSERT_TRUE(reader.Compile(graph).ok());
    EXPECT_EQ(reader.stats().disk_rejects, 1);
    EXPECT_EQ(reader.stats().compiles, 1);
  }
  // A truncated manifest is corrupt.
  {
    std::ofstream out(manifest, std::ios::binary | std::ios::trunc);
    out << "\x0a\xff";
  }
  {
    Compiler reader(CompilerOptions{.cache_dir = dir});
    ASSERT_TRUE(reader.Compile(graph).ok());
    EXPECT_EQ(reader.stats().disk_rejects, 1);
    EXPECT_EQ(reader.stats().compiles, 1);
  }
}

}  // namespace
}  // namespace rbln::compiler

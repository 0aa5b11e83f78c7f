#include "rbln/compiler/abi/problem_encoding.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace rbln::compiler {

std::pair<int64_t, int64_t> BlockRange(int64_t extent, int64_t part,
                                       int64_t block) {
  const int64_t begin = std::min(extent, block * part);
  return {begin, std::min(extent, begin + part) - begin};
}

void CheckEncodingVersion(const char* problem, int64_t found,
                          int64_t expected) {
  if (found == expected) return;
  std::fprintf(stderr,
               "[rbln compiler] oneDNN %s: problem encoding %lld, expected "
               "%lld\n",
               problem, static_cast<long long>(found),
               static_cast<long long>(expected));
  std::abort();
}

}  // namespace rbln::compiler

#include "rbln/compiler/kernels/test_operands.h"

#include <cstring>

#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler::testing {

void FillOperand(int64_t size, bool bf16, std::mt19937& rng,
                 std::vector<float>& values, std::vector<char>& raw) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  values.resize(size);
  raw.resize(size * (bf16 ? 2 : 4));
  for (int64_t i = 0; i < size; ++i) {
    values[i] = dist(rng);
    if (bf16) {
      // Truncated: the tests only need exact bf16 values.
      uint32_t u;
      std::memcpy(&u, &values[i], 4);
      const uint16_t bits = static_cast<uint16_t>(u >> 16);
      values[i] = Bf16ToFloat(bits);
      std::memcpy(raw.data() + 2 * i, &bits, 2);
    } else {
      std::memcpy(raw.data() + 4 * i, &values[i], 4);
    }
  }
}

}  // namespace rbln::compiler::testing

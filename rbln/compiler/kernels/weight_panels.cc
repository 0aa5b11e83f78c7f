#include "rbln/compiler/kernels/weight_panels.h"

#include <algorithm>
#include <cstring>

namespace rbln::compiler {
namespace {

// 32-bit units per tile row: one 64-byte line of a row of B.
constexpr int64_t kTileUnits = 16;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// 32-bit units of a column, k padded: 16 pairs of bf16 (16a..2a is a
// block of 32 rows), 16 f32 values.
int64_t UnitRows(const WeightPanels& p) {
  return RoundUp((p.k * p.element_bytes + 3) / 4, 16);
}

// Unit `j` of B's row `row` (k elements at `row`): a bf16 pair whose upper
// half is zero past k, an f32 value; zero past k altogether.
uint32_t Unit(const WeightPanels& p, const char* row, int64_t j) {
  const int64_t per_unit = 4 / p.element_bytes;
  const int64_t first = j * per_unit;
  if (first + per_unit <= p.k) {
    uint32_t u;
    std::memcpy(&u, row + first * p.element_bytes, 4);
    return u;
  }
  if (first >= p.k) return 0;
  uint16_t low;  // the last bf16 of an odd k
  std::memcpy(&low, row + first * p.element_bytes, 2);
  return low;
}

// Units [j0, j0 + 16) of rows [c0, c0 + 16) of the panel (those from
// `rows` on zero) transposed into `out`'s panel ([unit rows][W]): 16 lines
// read, 16 lines written.
void PackTile(const WeightPanels& p, const char* from, int64_t rows,
              int64_t c0, int64_t j0, uint32_t* out) {
  const int64_t row_bytes = p.ldb * p.element_bytes;
  uint32_t in[kTileUnits][kTileUnits] = {};
  for (int64_t c = 0; c < kTileUnits && c0 + c < rows; ++c) {
    std::memcpy(in[c], from + (c0 + c) * row_bytes + j0 * 4, sizeof(in[c]));
  }
  uint32_t t_out[kTileUnits][kTileUnits];
  for (int64_t t = 0; t < kTileUnits; ++t) {
    for (int64_t c = 0; c < kTileUnits; ++c) t_out[t][c] = in[c][t];
  }
  for (int64_t t = 0; t < kTileUnits; ++t) {
    std::memcpy(out + (j0 + t) * p.width + c0, t_out[t], sizeof(t_out[t]));
  }
}

// One panel: the units of W rows of B (`rows` of them real, the rest zero)
// transposed into `out` ([unit rows][W]).
void PackPanel(const WeightPanels& p, const char* from, int64_t rows,
               uint32_t* out) {
  const int64_t units = UnitRows(p);
  const int64_t row_bytes = p.ldb * p.element_bytes;
  // Whole units of a row of B: tiles up to the last whole 16, then the
  // tail unit by unit (an odd k's last bf16, the padding).
  const int64_t full = p.k * p.element_bytes / 4 / kTileUnits * kTileUnits;
  // 16 rows of B at a time, each read front to back: 16 streams the
  // hardware prefetcher follows, while the panel (W rows of B: 256 KB for
  // Llama-3.2-1B's k = 2048) stays in L2 for the next 16.
  for (int64_t c0 = 0; c0 < p.width; c0 += kTileUnits) {
    for (int64_t j0 = 0; j0 < full; j0 += kTileUnits) {
      PackTile(p, from, rows, c0, j0, out);
    }
  }
  for (int64_t j = full; j < units; ++j) {
    uint32_t* to = out + j * p.width;
    for (int64_t c = 0; c < rows; ++c) to[c] = Unit(p, from + c * row_bytes, j);
    for (int64_t c = rows; c < p.width; ++c) to[c] = 0;
  }
}

}  // namespace

int64_t WeightPanels::PackedBytes() const {
  return UnitRows(*this) * 4 * RoundUp(n, width);
}

bool PackWeightPanels(const WeightPanels& p, const void* from, void* to) {
  if ((p.width != 16 && p.width != 32 && p.width != 64) ||
      (p.element_bytes != 2 && p.element_bytes != 4) || p.k <= 0 ||
      p.n <= 0 || p.ldb < p.k) {
    return false;
  }
  const int64_t panel_units = UnitRows(p) * p.width;
  const char* b = static_cast<const char*>(from);
  uint32_t* out = static_cast<uint32_t*>(to);
  for (int64_t col = 0; col < p.n; col += p.width) {
    PackPanel(p, b + col * p.ldb * p.element_bytes,
              std::min(p.width, p.n - col), out);
    out += panel_units;
  }
  return true;
}

}  // namespace rbln::compiler

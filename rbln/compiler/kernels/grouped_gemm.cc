#include "rbln/compiler/kernels/grouped_gemm.h"

#include <algorithm>
#include <cstring>

#include "rbln/compiler/kernels/onednn_gemm.h"

namespace rbln::compiler {
namespace {

int64_t OperandBytes(GemmOperandType type) {
  return type == GemmOperandType::kF32 ? 4 : 2;
}

// at::slice's clamping of one bound: negative counts from the end, then
// into [low, size].
int64_t Clamp(int64_t v, int64_t low, int64_t size) {
  if (v < 0) v += size;
  return std::min(std::max(v, low), size);
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> GroupRows(const void* offsets, bool i64,
                                                   int64_t groups, int64_t m) {
  std::vector<std::pair<int64_t, int64_t>> rows;
  rows.reserve(groups);
  int64_t start = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t end = i64 ? static_cast<const int64_t*>(offsets)[g]
                            : static_cast<const int32_t*>(offsets)[g];
    const int64_t begin = Clamp(start, 0, m);
    rows.emplace_back(begin, Clamp(end, begin, m));
    start = end;
  }
  return rows;
}

std::pair<int64_t, int64_t> GroupedGemmColumns(int64_t n, int64_t block, int64_t blocks) {
  const int64_t part = ((n + blocks - 1) / blocks + 15) / 16 * 16;
  const int64_t begin = std::min(n, block * part);
  return {begin, std::min(n, begin + part)};
}

std::vector<int64_t> GroupedGemmGroupBlocks(
    const std::vector<std::pair<int64_t, int64_t>>& rows, int64_t m, int64_t blocks) {
  const int64_t groups = static_cast<int64_t>(rows.size());
  if (blocks < 1 || groups < kMinGroupsPerBlock * blocks) return {};
  // A non-empty group costs its rows plus, for reading its weight, as many
  // as an average group has.
  const int64_t weight_rows = std::max<int64_t>(1, m / groups);
  std::vector<int64_t> cost(groups, 0);
  int64_t total = 0, rows_end = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const auto [begin, end] = rows[g];
    if (begin >= end) continue;
    if (begin < rows_end) return {};  // overlaps an earlier group: in order
    rows_end = end;
    cost[g] = end - begin + weight_rows;
    total += cost[g];
  }
  std::vector<int64_t> owner(groups, 0);
  if (total == 0) return owner;
  int64_t before = 0;
  for (int64_t g = 0; g < groups; ++g) {
    // The block whose share of the total holds the middle of g's cost.
    owner[g] = std::min(blocks - 1, (2 * before + cost[g]) * blocks / (2 * total));
    before += cost[g];
  }
  return owner;
}

void RunGroupedGemmBlock(const GroupedGemmProblem& p, const void* a, const void* b,
                         const void* offsets, float* c, int64_t block, int64_t blocks) {
  if (p.k <= 0) return;
  const int64_t bytes = OperandBytes(p.type);
  const auto* a_bytes = static_cast<const char*>(a);
  const auto* b_bytes = static_cast<const char*>(b);
  const std::vector<std::pair<int64_t, int64_t>> rows =
      GroupRows(offsets, p.offsets_i64, p.groups, p.m);
  const std::vector<int64_t> owner = GroupedGemmGroupBlocks(rows, p.m, blocks);
  const auto [first, last] = owner.empty() ? GroupedGemmColumns(p.n, block, blocks)
                                           : std::pair<int64_t, int64_t>{0, p.n};
  if (first >= last) return;
  for (int64_t g = 0; g < p.groups; ++g) {
    const auto [begin, end] = rows[g];
    if (begin >= end || (!owner.empty() && owner[g] != block)) continue;
    GemmProblem q;
    q.type = p.type;
    q.trans_b = p.trans_b;
    q.accumulate = false;
    q.m = end - begin;
    q.n = last - first;
    q.k = p.k;
    q.lda = p.lda;
    q.ldb = p.ldb;
    q.ldc = p.ldc;
    // Column `first` of op(B[g]): a row of B stored [n, k] when trans_b.
    const int64_t b_offset = g * p.stride_b + (p.trans_b ? first * p.ldb : first);
    RunGemmBlock(q, a_bytes + begin * p.lda * bytes, b_bytes + b_offset * bytes,
                 c + begin * p.ldc + first, nullptr, 0, 1);
  }
}

}  // namespace rbln::compiler

extern "C" void rbln_grouped_gemm(int64_t type, int64_t trans_b, int64_t offsets_i64,
                                  int64_t groups, int64_t m, int64_t n, int64_t k,
                                  int64_t lda, int64_t ldb, int64_t ldc, int64_t stride_b,
                                  int64_t a, int64_t b, int64_t offsets, int64_t c,
                                  int64_t block, int64_t blocks) {
  rbln::compiler::GroupedGemmProblem p;
  p.type = static_cast<rbln::compiler::GemmOperandType>(type);
  p.trans_b = trans_b != 0;
  p.offsets_i64 = offsets_i64 != 0;
  p.groups = groups;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.stride_b = stride_b;
  rbln::compiler::RunGroupedGemmBlock(
      p, reinterpret_cast<const void*>(a), reinterpret_cast<const void*>(b),
      reinterpret_cast<const void*>(offsets), reinterpret_cast<float*>(c), block, blocks);
}

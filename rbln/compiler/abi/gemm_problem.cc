#include "rbln/compiler/abi/gemm_problem.h"

#include <utility>

#include "rbln/compiler/abi/problem_encoding.h"

namespace rbln::compiler {
namespace {

constexpr int64_t kEncodingVersion = 1;

}  // namespace

std::vector<int64_t> GemmProblem::Encode() const {
  std::vector<int64_t> words = {kEncodingVersion,
                                static_cast<int64_t>(type),
                                trans_b,
                                accumulate,
                                batch,
                                m,
                                n,
                                k,
                                lda,
                                ldb,
                                ldc,
                                stride_a,
                                stride_b,
                                stride_c};
  epilogue.AppendTo(words);
  return words;
}

GemmProblem GemmProblem::Decode(const int64_t* w) {
  CheckEncodingVersion("GEMM", w[0], kEncodingVersion);
  GemmProblem p;
  p.type = static_cast<GemmOperandType>(w[1]);
  p.trans_b = w[2] != 0;
  p.accumulate = w[3] != 0;
  p.batch = w[4];
  p.m = w[5];
  p.n = w[6];
  p.k = w[7];
  p.lda = w[8];
  p.ldb = w[9];
  p.ldc = w[10];
  p.stride_a = w[11];
  p.stride_b = w[12];
  p.stride_c = w[13];
  const int64_t* rest = w + 14;
  p.epilogue = LibraryEpilogue::Parse(rest);
  return p;
}

GemmBlock GemmBlockOf(const GemmProblem& p, int64_t block, int64_t blocks) {
  GemmBlock out{p};
  if (blocks <= 1) return out;
  auto range = [&](int64_t extent, int64_t part) {
    return BlockRange(extent, part, block);
  };
  GemmProblem& q = out.problem;
  if (p.batch > 1) {
    auto [begin, size] = range(p.batch, CeilDiv(p.batch, blocks));
    q.batch = size;
    out.offset_a = begin * p.stride_a;
    out.offset_b = begin * p.stride_b;
    out.offset_c = begin * p.stride_c;
  } else if (p.m >= p.n) {
    auto [begin, size] = range(p.m, CeilDiv(p.m, blocks));
    q.m = size;
    out.offset_a = begin * p.lda;
    out.offset_c = begin * p.ldc;
  } else {
    // Column parts in whole 16-float vectors.
    auto [begin, size] = range(p.n, CeilDiv(CeilDiv(p.n, blocks), 16) * 16);
    q.n = size;
    out.offset_b = p.trans_b ? begin * p.ldb : begin;
    out.offset_c = begin;
    out.column = begin;
  }
  // A batch of one is a plain matrix for oneDNN.
  if (q.batch == 1) q.stride_a = q.stride_b = q.stride_c = 0;
  return out;
}

}  // namespace rbln::compiler

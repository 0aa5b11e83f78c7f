#include "rbln/compiler/abi/library_epilogue.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rbln::compiler {
namespace {

int64_t FloatWord(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float WordFloat(int64_t w) {
  const uint32_t u = static_cast<uint32_t>(w);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const char* EltwiseName(int64_t fn) {
  switch (static_cast<EltwiseFn>(fn)) {
    case EltwiseFn::kRelu:
      return "relu";
    case EltwiseFn::kGeluErf:
      return "gelu_erf";
    case EltwiseFn::kGeluTanh:
      return "gelu_tanh";
    case EltwiseFn::kSilu:
      return "silu";
    case EltwiseFn::kSigmoid:
      return "sigmoid";
    case EltwiseFn::kTanh:
      return "tanh";
    case EltwiseFn::kLinear:
      return "linear";
  }
  return "?";
}

const char* BinaryName(int64_t fn) {
  static const char* kNames[] = {"add", "sub", "mul", "div"};
  return fn >= 0 && fn < 4 ? kNames[fn] : "?";
}

}  // namespace

bool EpilogueOp::operator==(const EpilogueOp& o) const {
  return binary == o.binary && fn == o.fn && alpha == o.alpha &&
         beta == o.beta && row == o.row;
}

bool LibraryEpilogue::operator==(const LibraryEpilogue& o) const {
  return bias_row == o.bias_row && ops == o.ops && store == o.store;
}

int64_t LibraryEpilogue::SideRows() const {
  int64_t rows = bias_row + 1;
  for (const EpilogueOp& op : ops) {
    if (op.binary) rows = std::max(rows, op.row + 1);
  }
  return rows;
}

void LibraryEpilogue::AppendTo(std::vector<int64_t>& words) const {
  words.push_back(bias_row);
  words.push_back(static_cast<int64_t>(store));
  words.push_back(static_cast<int64_t>(ops.size()));
  for (const EpilogueOp& op : ops) {
    words.insert(words.end(), {op.binary ? 1 : 0, op.fn, FloatWord(op.alpha),
                               FloatWord(op.beta), op.row});
  }
}

LibraryEpilogue LibraryEpilogue::Parse(const int64_t*& words) {
  LibraryEpilogue e;
  e.bias_row = *words++;
  e.store = static_cast<StoreType>(*words++);
  const int64_t n = *words++;
  for (int64_t i = 0; i < n; ++i) {
    EpilogueOp op;
    op.binary = *words++ != 0;
    op.fn = *words++;
    op.alpha = WordFloat(*words++);
    op.beta = WordFloat(*words++);
    op.row = *words++;
    e.ops.push_back(op);
  }
  return e;
}

float ApplyEltwise(EltwiseFn fn, float alpha, float beta, float x) {
  switch (fn) {
    case EltwiseFn::kRelu:
      return x < 0 ? 0.0f : x;
    case EltwiseFn::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752440f));
    case EltwiseFn::kGeluTanh: {
      const float inner = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case EltwiseFn::kSilu:
      return x / (1.0f + std::exp(-x));
    case EltwiseFn::kSigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case EltwiseFn::kTanh:
      return std::tanh(x);
    case EltwiseFn::kLinear:
      return alpha * x + beta;
  }
  return x;
}

float LibraryEpilogue::Apply(float x, const float* sides, int64_t channels,
                             int64_t channel) const {
  auto side = [&](int64_t row) { return sides[row * channels + channel]; };
  if (bias_row >= 0) x += side(bias_row);
  for (const EpilogueOp& op : ops) {
    if (!op.binary) {
      x = ApplyEltwise(static_cast<EltwiseFn>(op.fn), op.alpha, op.beta, x);
      continue;
    }
    const float s = side(op.row);
    switch (static_cast<BinaryFn>(op.fn)) {
      case BinaryFn::kAdd:
        x += s;
        break;
      case BinaryFn::kSub:
        x -= s;
        break;
      case BinaryFn::kMul:
        x *= s;
        break;
      case BinaryFn::kDiv:
        x /= s;
        break;
    }
  }
  return x;
}

uint16_t RoundToBf16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

void LibraryEpilogue::Store(float x, void* out) const {
  if (store == StoreType::kBF16) {
    const uint16_t bits = RoundToBf16(x);
    std::memcpy(out, &bits, 2);
  } else {
    std::memcpy(out, &x, 4);
  }
}

std::string LibraryEpilogue::ToString() const {
  std::vector<std::string> parts;
  if (bias_row >= 0) parts.push_back(absl::StrFormat("bias(row %d)", bias_row));
  for (const EpilogueOp& op : ops) {
    if (op.binary) {
      parts.push_back(absl::StrFormat("%s(row %d)", BinaryName(op.fn), op.row));
    } else if (op.fn == static_cast<int64_t>(EltwiseFn::kLinear)) {
      parts.push_back(absl::StrFormat("linear(%g, %g)", op.alpha, op.beta));
    } else {
      parts.push_back(EltwiseName(op.fn));
    }
  }
  parts.push_back(store == StoreType::kBF16 ? "store bf16" : "store f32");
  return absl::StrJoin(parts, ", ");
}

}  // namespace rbln::compiler

#include "rbln/compiler/transforms/library/attention_buffers.h"

#include <algorithm>

#include "mlir/IR/BuiltinTypes.h"
#include "rbln/compiler/transforms/library/library_calls.h"

namespace rbln::compiler {

std::optional<Buffer> AsBuffer(mlir::Value v, bool contiguous) {
  auto type = v.getType().dyn_cast<mlir::MemRefType>();
  if (!type || !type.hasStaticShape()) return std::nullopt;
  Buffer b;
  int64_t offset;
  if (mlir::failed(mlir::getStridesAndOffset(type, b.strides, offset)) ||
      llvm::any_of(b.strides, mlir::ShapedType::isDynamic)) {
    return std::nullopt;
  }
  int64_t expected = 1;
  for (int d = type.getRank() - 1; d >= 0; --d) {
    const bool unit_last = d == type.getRank() - 1;
    if ((contiguous || unit_last) && type.getDimSize(d) > 1 && b.strides[d] != expected) {
      return std::nullopt;
    }
    expected *= type.getDimSize(d);
  }
  b.base.memref = v;
  if (!mlir::ShapedType::isDynamic(offset)) b.base.offset = offset;
  b.base.element_bytes = type.getElementTypeBitWidth() / 8;
  return b;
}

int64_t AttentionBlocks(int64_t work, int64_t items) {
  constexpr int64_t kMinAttentionBlockWork = int64_t{1} << 18;
  return std::max<int64_t>(
      1, std::min({kMaxGemmBlocks, items, work / kMinAttentionBlockWork}));
}

}  // namespace rbln::compiler

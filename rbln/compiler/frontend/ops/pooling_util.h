// Pooling geometry and builders the pooling families share (pooling_ops.cc:
// max and average pools; adaptive_pooling_ops.cc: adaptive pools): the
// window attributes as ATen reads them, padding for windows, window-shaped
// loop operands and the compare/index helpers of max-with-indices.
#ifndef RBLN_COMPILER_FRONTEND_OPS_POOLING_UTIL_H_
#define RBLN_COMPILER_FRONTEND_OPS_POOLING_UTIL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler::pooling {

// The geometry of one pooling op.
struct Pool {
  int spatial = 2;
  Shape lead;  // [N, C] or [C]
  Shape in, out;
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false;

  int lead_rank() const { return lead.size(); }
  int rank() const { return lead.size() + spatial; }
  Shape InShape() const {
    Shape s = lead;
    s.insert(s.end(), in.begin(), in.end());
    return s;
  }
  Shape OutShape() const {
    Shape s = lead;
    s.insert(s.end(), out.begin(), out.end());
    return s;
  }
};

// "max_pool3d_with_indices" -> 3.
int SpatialOf(const ir::Node& node);

// Splits x into the lead dims ([N, C] or [C]) and the spatial dims, with
// ATen's errors for a bad rank or an empty spatial dim.
absl::Status SplitInput(const ir::Node& node, const Shape& x, Pool& p);

// Reads the window attributes of a max (`max`) or average pool.
absl::StatusOr<Pool> ReadWindow(const ir::Node& node, const Shape& x,
                                bool max);

// The input padded so that every window (o * stride + k * dilation, before
// removing the padding) is in range; `value` fills the padding.
mlir::Value PadForWindows(GraphImporter& im, mlir::Value x, const Pool& p,
                          double value);

// An operand that gives the window loops of a generic their extents (like
// the kernel operand of linalg.pooling_*): an uninitialized tensor of the
// window's shape read by the map (d_first .. d_{first+count-1}), never
// read in the body.
mlir::Value WindowShape(GraphImporter& im, const Shape& window);
mlir::AffineMap WindowMap(GraphImporter& im, int loops, int first, int count);

mlir::Value Cmp(mlir::OpBuilder& b, mlir::Location l,
                mlir::arith::CmpIPredicate pred, mlir::Value x, mlir::Value y);

// Row-major flat index of `pos` in a plane of `sizes` (index values).
mlir::Value FlatIndex(mlir::OpBuilder& b, mlir::Location l,
                      const std::vector<mlir::Value>& pos, const Shape& sizes);

mlir::Value ToI64(mlir::OpBuilder& b, mlir::Location l, mlir::Value index);
mlir::Value Greater(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                    mlir::Value y);
mlir::Value IsNan(mlir::OpBuilder& b, mlir::Location l, mlir::Value x);
mlir::Value SmallestConst(mlir::OpBuilder& b, mlir::Location l,
                          mlir::Type type);

// A filled tensor of the compute type holding its smallest value.
mlir::Value SmallestFilled(GraphImporter& im, const Shape& shape, ir::DType t);

// The input dtype is one the pool supports (`ints`: integers too).
absl::Status CheckPoolDType(GraphImporter& im, const ir::Node& node,
                            bool ints);

}  // namespace rbln::compiler::pooling

#endif  // RBLN_COMPILER_FRONTEND_OPS_POOLING_UTIL_H_

// Loops of whole-slice copies selected by an index tensor: index_copy's
// scatter and index_select's gather when each index moves a slice with a
// contiguous inner run. A serial scf.for of extract_slice / linalg.copy /
// insert_slice, which one-shot bufferization turns into in-place copies of
// strided subviews: the copies vectorize, where a generic that reads its
// source through an index loaded and range-checked per element does not.
#ifndef RBLN_COMPILER_FRONTEND_OPS_SLICE_COPIES_H_
#define RBLN_COMPILER_FRONTEND_OPS_SLICE_COPIES_H_

#include <cstdint>
#include <string>

#include "mlir/IR/Value.h"
#include "rbln/compiler/frontend/graph_importer.h"

namespace rbln::compiler {

// for i in [0, k): into[.., index[i], ..] = source[.., i, ..] along `dim`,
// in order (the last repeated index wins); index[i] is range-checked
// against `bound` (SPEC P8).
mlir::Value CopySlices(GraphImporter& im, mlir::Value into,
                       const std::string& index, const std::string& source,
                       int dim, int64_t bound);

// for i in [0, k): out[.., i, ..] = x[.., index[i], ..] along `dim`, with
// index a 0-D or 1-D tensor of k elements, each range-checked against x's
// size along `dim` (negative indices are errors, as index_select's).
mlir::Value GatherSlices(GraphImporter& im, mlir::Value x,
                         const std::string& index, int dim);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_OPS_SLICE_COPIES_H_

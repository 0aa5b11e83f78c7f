// A Linear weight (B stored [n, k], read as op(B) = B^T [k, n]) packed into
// the blocked layouts oneDNN's brgemm matmul reads weights in
// (onednn_gemm_plan.cc's PackedLayouts), without oneDNN's reorder:
//
//   bf16 BA16a<W>b2a: panels of W columns, one after another; in a panel
//        the k rows in pairs, each pair of a column one 32-bit unit (the
//        lower k first), the W units of a pair row side by side; k in
//        blocks of 16 pairs;
//   f32  BA16a<W>b:   the same with one k row per 32-bit unit, k in blocks
//        of 16 rows.
//
// k is padded to whole blocks and n to W columns with zeros, as oneDNN
// pads.
// Either way a panel is the transpose of W rows of B viewed as 32-bit
// units, which this does a 16-unit-wide tile at a time. oneDNN 2.6's
// reorder for these layouts ran at ~1.6 GB/s per core (half of a real-size
// decoder's first call was packing weights); a tiled transpose runs at
// copy speed.
#ifndef RBLN_COMPILER_KERNELS_WEIGHT_PANELS_H_
#define RBLN_COMPILER_KERNELS_WEIGHT_PANELS_H_

#include <cstdint>

namespace rbln::compiler {

struct WeightPanels {
  int64_t k = 0, n = 0;
  int64_t ldb = 0;          // elements between B's rows (>= k)
  int64_t element_bytes = 0;  // 2: bf16 (k in pairs), 4: f32
  int64_t width = 0;        // W: 16, 32 or 64 columns

  // Bytes of the packed copy (oneDNN's memory_desc_get_size of the layout).
  int64_t PackedBytes() const;
};

// Packs B (`p.n` rows of `p.k` elements, `p.ldb` apart) at `from` into `to`
// (PackedBytes() long). False, with nothing written, for a shape it does
// not take (a width other than 16, 32 or 64, an element size other than 2
// or 4, ldb < k).
bool PackWeightPanels(const WeightPanels& p, const void* from, void* to);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_WEIGHT_PANELS_H_

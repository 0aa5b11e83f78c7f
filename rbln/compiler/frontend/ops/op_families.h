// The op converters, one registration function per op family
// (frontend/ops/*.cc); the frontend's table (frontend.cc) calls them all.
#ifndef RBLN_COMPILER_FRONTEND_OPS_OP_FAMILIES_H_
#define RBLN_COMPILER_FRONTEND_OPS_OP_FAMILIES_H_

#include "rbln/compiler/frontend/graph_importer.h"

namespace rbln::compiler {

void RegisterElementwiseOps(OpConverterTable& table);
void RegisterReductionOps(OpConverterTable& table);
void RegisterMatmulOps(OpConverterTable& table);
void RegisterGroupedMatmulOps(OpConverterTable& table);
void RegisterPagedAttentionOps(OpConverterTable& table);
void RegisterDataMovementOps(OpConverterTable& table);
void RegisterAttentionOps(OpConverterTable& table);
void RegisterStridedBoxOps(OpConverterTable& table);
void RegisterUnaryMathOps(OpConverterTable& table);
void RegisterBinaryMathOps(OpConverterTable& table);
void RegisterActivationOps(OpConverterTable& table);
void RegisterConstructionOps(OpConverterTable& table);
void RegisterConvolutionOps(OpConverterTable& table);
void RegisterPoolingOps(OpConverterTable& table);
void RegisterAdaptivePoolingOps(OpConverterTable& table);
void RegisterNormOps(OpConverterTable& table);
void RegisterSamplingOps(OpConverterTable& table);
void RegisterMomentOps(OpConverterTable& table);
void RegisterVectorNormOps(OpConverterTable& table);
void RegisterScanOps(OpConverterTable& table);
void RegisterSortOps(OpConverterTable& table);
void RegisterSearchOps(OpConverterTable& table);
void RegisterHistogramOps(OpConverterTable& table);
void RegisterLinalgOps(OpConverterTable& table);
void RegisterSegmentOps(OpConverterTable& table);
void RegisterGatherScatterOps(OpConverterTable& table);
void RegisterAdvancedIndexOps(OpConverterTable& table);
void RegisterLayoutOps(OpConverterTable& table);
void RegisterViewScatterOps(OpConverterTable& table);
void RegisterEmbeddingBagOps(OpConverterTable& table);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_OPS_OP_FAMILIES_H_

#include "rbln/compiler/frontend/frontend.h"

#include <algorithm>
#include <string>
#include <vector>

#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/op_families.h"

namespace rbln::compiler {
namespace {

const OpConverterTable& Converters() {
  static const auto* table = [] {
    auto* t = new OpConverterTable();
    RegisterElementwiseOps(*t);
    RegisterReductionOps(*t);
    RegisterMatmulOps(*t);
    RegisterGroupedMatmulOps(*t);
    RegisterPagedAttentionOps(*t);
    RegisterDataMovementOps(*t);
    RegisterAttentionOps(*t);
    RegisterStridedBoxOps(*t);
    RegisterUnaryMathOps(*t);
    RegisterBinaryMathOps(*t);
    RegisterActivationOps(*t);
    RegisterConstructionOps(*t);
    RegisterConvolutionOps(*t);
    RegisterPoolingOps(*t);
    RegisterAdaptivePoolingOps(*t);
    RegisterNormOps(*t);
    RegisterSamplingOps(*t);
    RegisterMomentOps(*t);
    RegisterVectorNormOps(*t);
    RegisterScanOps(*t);
    RegisterSortOps(*t);
    RegisterSearchOps(*t);
    RegisterHistogramOps(*t);
    RegisterLinalgOps(*t);
    RegisterSegmentOps(*t);
    RegisterGatherScatterOps(*t);
    RegisterAdvancedIndexOps(*t);
    RegisterLayoutOps(*t);
    RegisterViewScatterOps(*t);
    RegisterEmbeddingBagOps(*t);
    return t;
  }();
  return *table;
}

}  // namespace

absl::Status CheckOpsImplemented(const ir::Graph& graph) {
  return CheckOpsImplemented(graph, Converters());
}

bool IsOpImplemented(absl::string_view op) {
  return Converters().contains(op);
}

std::vector<std::string> ImplementedOps() {
  std::vector<std::string> ops;
  ops.reserve(Converters().size());
  for (const auto& [name, converter] : Converters()) ops.push_back(name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> ImportGraph(
    const ir::Graph& graph, mlir::MLIRContext* context) {
  GraphImporter importer(graph, context, Converters());
  return importer.Import();
}

}  // namespace rbln::compiler

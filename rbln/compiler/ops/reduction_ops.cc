// Reductions, softmax and normalizations.
#include "rbln/compiler/graph_importer.h"

namespace rbln::compiler {

void RegisterReductionOps(OpConverterTable& table) {}

}  // namespace rbln::compiler

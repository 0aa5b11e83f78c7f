// The matmul family.
#include "rbln/compiler/graph_importer.h"

namespace rbln::compiler {

void RegisterMatmulOps(OpConverterTable& table) {}

}  // namespace rbln::compiler

// Chiplet partitioning (SPEC A2): on Rebel100 every program runs on the card's
// 4 chiplets at once.
//
// The pass runs on buffers (after bufferization and the BLAS rewrite) and
// turns `@kernel` into an SPMD function that every chiplet worker calls with
// its own slice index, its last argument. Each top-level op becomes one of:
//  - split: a linalg op with a parallel loop dimension d (the outermost one
//    that every output indexes directly and whose extent is >= 2) runs on
//    rows [i*T, min(N, (i+1)*T)) of d, T = ceil(N/k), as a clone of the op on
//    subviews. Static sizes: full slices have extent T, the one partial slice
//    its own extent (two static variants, so the vectorizer still sees
//    static shapes). Every element is computed by the
//    same code as unpartitioned, so results are bit-identical.
//  - chiplet 0: anything else with side effects (a reduction-only loop nest,
//    memref.copy, an op whose input overlaps its output with another access
//    pattern, calls such as the BLAS rewrite's cblas_sgemm) runs on worker 0
//    only. Such an op with results (a 1-D sort's scf.while, whose bounds the
//    next loop reads) first becomes one scf.execute_region with the ops up
//    to its results' last user (GroupStatefulResults), so that worker 0 runs
//    them together.
//  - replicated: pure and view ops (constants, subviews, reshapes) run on
//    every worker, and so do reads whose values they all use (a memref.load
//    of an index: a KV cache's write position), after the barrier that
//    follows the buffer's writer.
// Internal buffers (top-level memref.alloc) must be shared by the team, so
// they become kernel arguments (after the outputs, before the slice index)
// that the caller places in the program's workspace; their deallocs are
// dropped. The workspace is one segment per worker, homed in the memory of
// the chiplet that worker runs on: a buffer only worker 0 touches (written
// and read by chiplet-0 ops) lives in worker 0's segment, a buffer that split
// slices share goes to the least-filled segment. The access table (each
// buffer's home and the workers that touch it) is recorded with the layout.
// Between two top-level ops that touch the same buffer (read after write,
// write after read or write; all kernel arguments are treated as one
// buffer) every worker calls rbln_chiplet_barrier().
//
// Programs whose total work (iterations of their top-level linalg ops) is
// below `min_work` are left unpartitioned: waking the team costs more than
// the kernel (see docs/benchmarks.md). The module records the outcome in
// kPartitionsAttr (1: unchanged signature) and kScratchBytesAttr.

#include "rbln/compiler/transforms/passes.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/Pass.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/pipelines/mlir_compat.h"

namespace rbln::compiler {
namespace {

using ::mlir::OpBuilder;
using ::mlir::Operation;
using ::mlir::Value;

// Scratch buffers start on cache-line boundaries.
constexpr int64_t kScratchAlignment = 64;

// A buffer a top-level op reads or writes, up to aliasing: the memref.alloc
// (or memref.get_global) it is a view of, the kernel argument, or kUnknown
// (conflicts with everything). Distinct arguments do not overlap (SPEC P4:
// the caller copies overlapping inputs) except that an output may be an
// input's own buffer (in-place ops); for barriers all arguments count as one
// buffer (kArguments).
using Root = const void*;
Root const kArguments = reinterpret_cast<const void*>(1);
Root const kUnknown = reinterpret_cast<const void*>(2);

Root RootOf(Value v) {
  while (true) {
    if (v.isa<mlir::BlockArgument>()) return v.getAsOpaquePointer();
    Operation* def = v.getDefiningOp();
    if (llvm::isa<mlir::memref::AllocOp, mlir::memref::AllocaOp,
                  mlir::memref::GetGlobalOp>(def)) {
      return def;
    }
    auto view = llvm::dyn_cast<mlir::ViewLikeOpInterface>(def);
    if (!view) return kUnknown;
    v = view.getViewSource();
  }
}

// The buffer class a barrier decision keys on.
Root BarrierRoot(Value v) {
  const Root root = RootOf(v);
  Value base = v;
  while (!base.isa<mlir::BlockArgument>()) {
    auto view = llvm::dyn_cast_or_null<mlir::ViewLikeOpInterface>(base.getDefiningOp());
    if (!view) return root;
    base = view.getViewSource();
  }
  return kArguments;
}

struct Access {
  llvm::SmallPtrSet<const void*, 4> reads;
  llvm::SmallPtrSet<const void*, 4> writes;

  static bool Overlap(const llvm::SmallPtrSet<const void*, 4>& a,
                      const llvm::SmallPtrSet<const void*, 4>& b) {
    if (a.empty() || b.empty()) return false;
    if (a.contains(kUnknown) || b.contains(kUnknown)) return true;
    return llvm::any_of(a, [&](const void* r) { return b.contains(r); });
  }
  // True if `later` must wait for this access to finish on every worker.
  bool ConflictsWith(const Access& later) const {
    return Overlap(writes, later.reads) || Overlap(writes, later.writes) ||
           Overlap(reads, later.writes);
  }
  void Merge(const Access& other) {
    reads.insert(other.reads.begin(), other.reads.end());
    writes.insert(other.writes.begin(), other.writes.end());
  }
  void Clear() {
    reads.clear();
    writes.clear();
  }
};

// The buffers `op` and the ops nested in it touch outside `top`.
void CollectAccess(Operation* op, Operation* top, Access& access) {
  if (auto iface = llvm::dyn_cast<mlir::MemoryEffectOpInterface>(op)) {
    llvm::SmallVector<mlir::MemoryEffects::EffectInstance> effects;
    iface.getEffects(effects);
    for (const auto& effect : effects) {
      const bool read = llvm::isa<mlir::MemoryEffects::Read>(effect.getEffect());
      const bool write =
          llvm::isa<mlir::MemoryEffects::Write>(effect.getEffect());
      if (!read && !write) continue;  // Allocate / Free of op-local buffers.
      Value value = effect.getValue();
      Root root = kUnknown;
      if (value) {
        // Buffers defined inside `top` are private to one worker's slice;
        // a view made inside `top` of an outer buffer is that buffer (a
        // loop writing the slices of an output, e.g. a scan's).
        Value base = value;
        while (auto view = llvm::dyn_cast_or_null<mlir::ViewLikeOpInterface>(
                   base.getDefiningOp())) {
          base = view.getViewSource();
        }
        if (Operation* def = base.getDefiningOp();
            def != nullptr && top != op && top->isAncestor(def)) {
          continue;
        }
        if (auto arg = base.dyn_cast<mlir::BlockArgument>();
            arg && top != op &&
            top->isAncestor(arg.getOwner()->getParentOp())) {
          continue;
        }
        root = BarrierRoot(value);
      }
      (read ? access.reads : access.writes).insert(root);
    }
  } else if (!op->hasTrait<mlir::OpTrait::HasRecursiveMemoryEffects>()) {
    access.reads.insert(kUnknown);
    access.writes.insert(kUnknown);
  }
  for (mlir::Region& region : op->getRegions()) {
    for (Operation& nested : region.getOps()) CollectAccess(&nested, top, access);
  }
}

enum class Placement {
  kReplicated,
  // Reads memory and yields values every worker uses (a memref.load of an
  // index, e.g. a KV cache's write position): every worker runs it, after
  // the barrier that follows the buffer's writer.
  kReplicatedRead,
  kSplit,            // a linalg op, by slices of split_dim
  kSplitIterations,  // a kParallelIterationsAttr loop, by iteration ranges
  kChiplet0,
  kScratch,
  kDropped
};

// A memref operand of a split op.
struct SliceAccess {
  Root root;
  // What two ops' accesses must share to mean the same elements: the
  // operand Value; for a whole kernel argument, its type (an output may be
  // an input's own buffer, SPEC P4: an in-place pair lines up element for
  // element); null for a view of an argument.
  const void* layout = nullptr;
  // The buffer dimension (position in the operand's indexing map) that
  // holds split_dim, -1 if none does: a slice touches the operand only
  // within its own rows of that dimension.
  int dim = -1;
  bool write = false;  // an output (read too, for accumulators)
  int64_t argument_bytes = -1;  // a whole kernel argument's size
};

struct TopLevelOp {
  Operation* op;
  Placement placement;
  int split_dim = -1;
  int64_t extent = 0;  // of split_dim, or the loop's trip count
  Access access;
  // kSplit ops whose payload touches no memory: every access is one of
  // these (so `access` is exactly their roots).
  std::optional<llvm::SmallVector<SliceAccess, 4>> slice_accesses;
};

// The loop dimension a linalg op can be split along, or nothing.
std::optional<int> SplitDim(mlir::linalg::LinalgOp op) {
  if (!compat::HasBufferSemantics(op)) return std::nullopt;
  llvm::SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  llvm::SmallVector<mlir::utils::IteratorType> iterators =
      op.getIteratorTypesArray();
  // An input that is also an output, read with another pattern, may be read
  // by one slice where another writes it.
  for (mlir::OpOperand* input : op.getDpsInputOperands()) {
    if (!input->get().getType().isa<mlir::MemRefType>()) continue;
    const Root root = RootOf(input->get());
    for (mlir::OpOperand* init : compat::DpsInitOperands(op)) {
      const Root out = RootOf(init->get());
      const bool may_alias = root == kUnknown || out == kUnknown || root == out;
      if (may_alias && (input->get() != init->get() ||
                        op.getMatchingIndexingMap(input) !=
                            op.getMatchingIndexingMap(init))) {
        return std::nullopt;
      }
    }
  }
  for (int d = 0; d < static_cast<int>(ranges.size()); ++d) {
    if (iterators[d] != mlir::utils::IteratorType::parallel) continue;
    if (mlir::ShapedType::isDynamic(ranges[d]) || ranges[d] < 2) continue;
    // Every output must be indexed by d directly, so slices write disjoint
    // elements.
    const bool disjoint = llvm::all_of(
        compat::DpsInitOperands(op), [&](mlir::OpOperand* init) {
          return llvm::any_of(
              op.getMatchingIndexingMap(init).getResults(),
              [&](mlir::AffineExpr e) {
                auto dim = e.dyn_cast<mlir::AffineDimExpr>();
                return dim && static_cast<int>(dim.getPosition()) == d;
              });
        });
    if (disjoint) return d;
  }
  return std::nullopt;
}

// True for an op without regions whose only memory effects are reads
// (memref.load): every worker may run it.
bool OnlyReads(Operation& op) {
  auto iface = llvm::dyn_cast<mlir::MemoryEffectOpInterface>(op);
  if (!iface || op.getNumRegions() != 0) return false;
  llvm::SmallVector<mlir::MemoryEffects::EffectInstance> effects;
  iface.getEffects(effects);
  return llvm::all_of(effects, [](const mlir::MemoryEffects::EffectInstance& e) {
    return llvm::isa<mlir::MemoryEffects::Read>(e.getEffect());
  });
}

// The trip count of a kParallelIterationsAttr loop from 0 by 1 to a
// constant, or nothing.
std::optional<int64_t> ParallelTripCount(Operation& op) {
  auto loop = llvm::dyn_cast<mlir::scf::ForOp>(op);
  if (!loop || !loop->hasAttr(kParallelIterationsAttr) ||
      loop.getNumResults() != 0) {
    return std::nullopt;
  }
  auto constant = [](Value v) -> std::optional<int64_t> {
    if (auto c = v.getDefiningOp<mlir::arith::ConstantIndexOp>()) return c.value();
    return std::nullopt;
  };
  if (constant(loop.getLowerBound()) != 0 || constant(loop.getStep()) != 1) {
    return std::nullopt;
  }
  return constant(loop.getUpperBound());
}

int64_t Iterations(mlir::linalg::LinalgOp op) {
  int64_t n = 1;
  for (int64_t r : op.getStaticLoopRanges()) {
    if (mlir::ShapedType::isDynamic(r)) return int64_t{1} << 40;
    n *= r;
  }
  return n;
}

// Bytes of one element in a scratch buffer, or nothing if memref.view cannot
// produce that element type.
std::optional<int64_t> ElementBytes(mlir::Type type) {
  // index: 64 bits on every target the compiler builds for (a sort's stack
  // of index ranges is a scratch buffer like any other).
  if (type.isIndex()) return 8;
  if (!type.isIntOrFloat()) return std::nullopt;
  const unsigned bits = type.getIntOrFloatBitWidth();
  if (bits % 8 != 0) return std::nullopt;  // i1: LLVM's layout differs
  return bits / 8;
}

// Per memref operand of a split linalg op, where split_dim lands in the
// buffer; nothing if its payload reads or writes memory itself (a gather's
// memref.load), which the operands do not describe.
std::optional<llvm::SmallVector<SliceAccess, 4>> SliceAccesses(
    mlir::linalg::LinalgOp op, int split_dim) {
  bool payload_touches_memory = false;
  for (mlir::Region& region : op->getRegions()) {
    region.walk([&](Operation* nested) {
      if (!mlir::isMemoryEffectFree(nested)) payload_touches_memory = true;
    });
  }
  if (payload_touches_memory) return std::nullopt;
  llvm::SmallVector<SliceAccess, 4> accesses;
  for (mlir::OpOperand& operand : op->getOpOperands()) {
    Value value = operand.get();
    auto type = value.getType().dyn_cast<mlir::MemRefType>();
    if (!type) continue;
    SliceAccess access;
    access.root = BarrierRoot(value);
    access.layout = value.getAsOpaquePointer();
    if (access.root == kArguments) {
      const bool whole = value.isa<mlir::BlockArgument>();
      access.layout = whole ? type.getAsOpaquePointer() : nullptr;
      std::optional<int64_t> element = ElementBytes(type.getElementType());
      if (whole && type.hasStaticShape() && element) {
        access.argument_bytes = type.getNumElements() * *element;
      }
    }
    // An output is read too where the payload uses it (accumulators).
    access.write = op.isDpsInit(&operand);
    llvm::ArrayRef<mlir::AffineExpr> results =
        op.getMatchingIndexingMap(&operand).getResults();
    for (int r = 0; r < static_cast<int>(results.size()); ++r) {
      auto d = results[r].dyn_cast<mlir::AffineDimExpr>();
      if (d && static_cast<int>(d.getPosition()) == split_dim) access.dim = r;
    }
    accesses.push_back(access);
  }
  return accesses;
}

// True if worker w's slice of `a`'s op and of `b`'s op touch the same
// elements only: the same memory seen the same way, split along the same
// dimension (the ops are split alike, so w gets the same rows of both).
bool SameRows(const SliceAccess& a, const SliceAccess& b) {
  return a.layout != nullptr && a.layout == b.layout && a.dim >= 0 && a.dim == b.dim;
}

// True if `later` needs no barrier after `earlier` although both touch a
// buffer one of them writes: both are split the same way (same extent and
// worker count), and every such pair of accesses stays within the same
// rows (SameRows) or cannot overlap (two whole kernel arguments of
// different sizes: an output overlaps an input only as its own buffer,
// SPEC P4). Worker w then only reads or overwrites elements that it wrote
// or read itself, in program order -- the chain of element-wise ops and row
// reductions of a layer norm or a softmax.
bool SliceLocal(const TopLevelOp& earlier, const TopLevelOp& later) {
  if (earlier.placement != Placement::kSplit || later.placement != Placement::kSplit ||
      !earlier.slice_accesses || !later.slice_accesses || earlier.extent != later.extent) {
    return false;
  }
  for (const SliceAccess& a : *earlier.slice_accesses) {
    for (const SliceAccess& b : *later.slice_accesses) {
      if (a.root == kUnknown || b.root == kUnknown) return false;
      if (a.root != b.root || !(a.write || b.write)) continue;
      if (SameRows(a, b)) continue;
      if (a.root == kArguments && a.argument_bytes >= 0 && b.argument_bytes >= 0 &&
          a.argument_bytes != b.argument_bytes) {
        continue;
      }
      return false;
    }
  }
  return true;
}

// Wraps each top-level op of `body` that writes memory and yields values
// (a 1-D sort's scf.while) in an scf.execute_region without results, with
// the ops after it up to the last user of any value defined since: the
// group runs on worker 0 like any resultless stateful op, instead of the
// whole program staying unpartitioned. A group that would take in an
// allocation, a deallocation or a value used after it is left as it was.
void GroupStatefulResults(mlir::Block& body) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    Operation& first = *it;
    if (first.getNumResults() == 0 || first.hasTrait<mlir::OpTrait::IsTerminator>() ||
        mlir::isMemoryEffectFree(&first) || OnlyReads(first)) {
      continue;
    }
    // The group [first, last] grows while an op in it defines a value used
    // after `last`.
    Operation* last = &first;
    bool grouped = true;
    for (Operation* op = &first;; op = op->getNextNode()) {
      if (llvm::isa<mlir::memref::AllocOp, mlir::memref::DeallocOp,
                    mlir::memref::AllocaOp>(op) ||
          op->hasTrait<mlir::OpTrait::IsTerminator>()) {
        grouped = false;
        break;
      }
      for (Value v : op->getResults()) {
        for (Operation* user : v.getUsers()) {
          Operation* top = body.findAncestorOpInBlock(*user);
          if (top != nullptr && last->isBeforeInBlock(top)) last = top;
        }
      }
      if (op == last) break;
    }
    if (!grouped) continue;
    OpBuilder b(&first);
    auto region = b.create<mlir::scf::ExecuteRegionOp>(first.getLoc(), mlir::TypeRange{});
    mlir::Block* inner = b.createBlock(&region.getRegion());
    b.create<mlir::scf::YieldOp>(first.getLoc());
    Operation* end = last->getNextNode();
    for (Operation* op = &first; op != end;) {
      Operation* next = op->getNextNode();
      op->moveBefore(inner->getTerminator());
      op = next;
    }
    it = mlir::Block::iterator(region.getOperation());
  }
}

class PartitionPass
    : public mlir::PassWrapper<PartitionPass,
                               mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(PartitionPass)
  explicit PartitionPass(PartitionOptions options) : options_(options) {}

  llvm::StringRef getArgument() const final { return "rbln-partition"; }
  llvm::StringRef getDescription() const final {
    return "Split the kernel over the chiplets (SPEC A2)";
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    OpBuilder b(module.getContext());
    module->setAttr(kPartitionsAttr, b.getI64IntegerAttr(1));
    module->setAttr(kScratchBytesAttr, b.getI64IntegerAttr(0));
    auto func = module.lookupSymbol<mlir::func::FuncOp>(kKernelName);
    if (options_.partitions <= 1 || !func || func.isExternal() ||
        !func.getBody().hasOneBlock()) {
      return;
    }
    GroupStatefulResults(func.getBody().front());
    std::optional<std::vector<TopLevelOp>> plan = Plan(func);
    if (!plan) return;
    Rewrite(module, func, *plan);
  }

 private:
  // Decides each top-level op's placement; nothing if the program stays
  // whole (too small, nothing to split, or something the pass cannot share).
  std::optional<std::vector<TopLevelOp>> Plan(mlir::func::FuncOp func) {
    std::vector<TopLevelOp> plan;
    int64_t work = 0;
    bool any_split = false;
    llvm::SmallPtrSet<Operation*, 8> scratch;
    for (Operation& op : func.getBody().front().without_terminator()) {
      TopLevelOp top{&op, Placement::kReplicated};
      if (auto alloc = llvm::dyn_cast<mlir::memref::AllocOp>(op)) {
        mlir::MemRefType type = alloc.getType();
        if (!type.hasStaticShape() || !type.getLayout().isIdentity() ||
            !ElementBytes(type.getElementType()) || type.getMemorySpace()) {
          return std::nullopt;
        }
        top.placement = Placement::kScratch;
        scratch.insert(&op);
      } else if (auto dealloc = llvm::dyn_cast<mlir::memref::DeallocOp>(op)) {
        if (!scratch.contains(dealloc.getMemref().getDefiningOp())) {
          return std::nullopt;
        }
        top.placement = Placement::kDropped;
      } else if (llvm::isa<mlir::memref::AllocaOp>(op)) {
        return std::nullopt;  // Per-worker stack memory cannot be shared.
      } else if (mlir::isMemoryEffectFree(&op)) {
        top.placement = Placement::kReplicated;
      } else if (OnlyReads(op)) {
        top.placement = Placement::kReplicatedRead;
        CollectAccess(&op, &op, top.access);
      } else {
        CollectAccess(&op, &op, top.access);
        if (auto attr = op.getAttrOfType<mlir::IntegerAttr>(kWorkAttr)) {
          work += attr.getInt();
        }
        if (std::optional<int64_t> trips = ParallelTripCount(op)) {
          top.placement = Placement::kSplitIterations;
          top.extent = *trips;
          any_split = true;
          plan.push_back(std::move(top));
          continue;
        }
        auto linalg_op = llvm::dyn_cast<mlir::linalg::LinalgOp>(op);
        std::optional<int> dim =
            linalg_op ? SplitDim(linalg_op) : std::nullopt;
        if (linalg_op) work += Iterations(linalg_op);
        if (auto copy = llvm::dyn_cast<mlir::memref::CopyOp>(op)) {
          work += copy.getSource().getType().cast<mlir::MemRefType>().getNumElements();
        }
        if (dim) {
          top.placement = Placement::kSplit;
          top.split_dim = *dim;
          top.extent = linalg_op.getStaticLoopRanges()[*dim];
          top.slice_accesses = SliceAccesses(linalg_op, *dim);
          any_split = true;
        } else {
          // Worker 0 alone; the op moves into an scf.if, which cannot
          // forward results.
          if (op.getNumResults() != 0) return std::nullopt;
          top.placement = Placement::kChiplet0;
        }
      }
      plan.push_back(std::move(top));
    }
    if (!any_split || work < options_.min_work) return std::nullopt;
    return plan;
  }

  void Rewrite(mlir::ModuleOp module, mlir::func::FuncOp func,
               std::vector<TopLevelOp>& plan) {
    mlir::MLIRContext* context = module.getContext();
    OpBuilder b(context);
    const mlir::Location loc = func.getLoc();

    // The barrier, called by every worker.
    b.setInsertionPointToEnd(module.getBody());
    auto barrier_decl = b.create<mlir::func::FuncOp>(
        loc, kChipletBarrierSymbol, b.getFunctionType({}, {}));
    barrier_decl.setPrivate();

    // Scratch buffers: one argument each, placed in the per-worker segments
    // of the workspace by the caller. (Not memref.view of one i8 arena: MLIR
    // 16's expand-strided-metadata folds extract_aligned_pointer_as_index
    // through a memref.view and drops its byte shift, which breaks the BLAS
    // rewrite's pointers.)
    const int workers = options_.partitions;
    llvm::SmallPtrSet<const void*, 8> shared = SharedScratch(plan);
    std::vector<int64_t> segments(workers, 0);
    int64_t scratch_bytes = 0;
    llvm::SmallVector<mlir::Attribute> scratch_attrs;
    for (const TopLevelOp& top : plan) {
      if (top.placement != Placement::kScratch) continue;
      auto type = llvm::cast<mlir::memref::AllocOp>(top.op).getType();
      const int64_t bytes = (type.getNumElements() *
                                 *ElementBytes(type.getElementType()) +
                             kScratchAlignment - 1) /
                            kScratchAlignment * kScratchAlignment;
      // Worker 0 alone touches it: its own chiplet. Shared by slices: the
      // least-filled segment, so the workspace spreads over the chiplets.
      const bool is_shared = shared.contains(top.op) || shared.contains(kUnknown);
      const int least_filled = static_cast<int>(
          std::min_element(segments.begin(), segments.end()) - segments.begin());
      const int home = is_shared ? least_filled : 0;
      llvm::SmallVector<int64_t> entry = {home, segments[home],
                                          is_shared ? kAllWorkers : int64_t{1}};
      entry.append(type.getShape().begin(), type.getShape().end());
      scratch_attrs.push_back(b.getDenseI64ArrayAttr(entry));
      segments[home] += bytes;
      scratch_bytes += bytes;
      func.insertArgument(func.getNumArguments(), type, {}, loc);
      top.op->getResult(0).replaceAllUsesWith(
          func.getArgument(func.getNumArguments() - 1));
    }
    func.insertArgument(func.getNumArguments(), b.getIndexType(), {}, loc);
    Value slice = func.getArgument(func.getNumArguments() - 1);

    mlir::Block& body = func.getBody().front();
    b.setInsertionPointToStart(&body);
    Value zero = b.create<mlir::arith::ConstantIndexOp>(loc, 0);
    Value is_chiplet0 = b.create<mlir::arith::CmpIOp>(
        loc, mlir::arith::CmpIPredicate::eq, slice, zero);

    // The ops since the last barrier.
    std::vector<const TopLevelOp*> since_barrier;
    for (TopLevelOp& top : plan) {
      Operation* op = top.op;
      switch (top.placement) {
        case Placement::kReplicated:
          break;
        case Placement::kDropped:
          op->erase();
          break;
        case Placement::kScratch:
          op->erase();
          break;
        case Placement::kReplicatedRead:
        case Placement::kSplit:
        case Placement::kSplitIterations:
        case Placement::kChiplet0: {
          b.setInsertionPoint(op);
          const bool must_wait =
              llvm::any_of(since_barrier, [&](const TopLevelOp* earlier) {
                return earlier->access.ConflictsWith(top.access) &&
                       !SliceLocal(*earlier, top);
              });
          if (must_wait) {
            b.create<mlir::func::CallOp>(loc, barrier_decl, mlir::ValueRange{});
            since_barrier.clear();
          }
          since_barrier.push_back(&top);
          if (top.placement == Placement::kSplit) {
            Split(b, llvm::cast<mlir::linalg::LinalgOp>(op), top, slice);
          } else if (top.placement == Placement::kSplitIterations) {
            SplitIterations(b, llvm::cast<mlir::scf::ForOp>(op), top, slice);
          } else if (top.placement == Placement::kChiplet0) {
            auto only = b.create<mlir::scf::IfOp>(op->getLoc(), is_chiplet0,
                                                  /*withElseRegion=*/false);
            op->moveBefore(only.thenBlock()->getTerminator());
          }
          break;
        }
      }
    }
    module->setAttr(kPartitionsAttr,
                    b.getI64IntegerAttr(options_.partitions));
    module->setAttr(kScratchBytesAttr, b.getI64IntegerAttr(scratch_bytes));
    module->setAttr(kScratchBuffersAttr, b.getArrayAttr(scratch_attrs));
    module->setAttr(kWorkspaceSegmentsAttr, b.getDenseI64ArrayAttr(segments));
  }

  // The scratch buffers (their allocs) that a split op or a replicated
  // read touches, so more than worker 0; kUnknown if some such op's
  // accesses are unknown.
  static llvm::SmallPtrSet<const void*, 8> SharedScratch(
      const std::vector<TopLevelOp>& plan) {
    llvm::SmallPtrSet<const void*, 8> shared;
    for (const TopLevelOp& top : plan) {
      if (top.placement != Placement::kSplit &&
          top.placement != Placement::kSplitIterations &&
          top.placement != Placement::kReplicatedRead) {
        continue;
      }
      shared.insert(top.access.reads.begin(), top.access.reads.end());
      shared.insert(top.access.writes.begin(), top.access.writes.end());
    }
    return shared;
  }

  // Replaces `op` by its slice for worker `slice`:
  //   if slice < full { op[slice*T, T) } else if slice == full { op[full*T, rest) }
  void Split(OpBuilder& b, mlir::linalg::LinalgOp op, const TopLevelOp& top,
             Value slice) {
    const mlir::Location loc = op.getLoc();
    const int64_t n = top.extent;
    const int64_t tile = (n + options_.partitions - 1) / options_.partitions;
    const int64_t full = n / tile;      // slices of extent `tile`
    const int64_t rest = n - full * tile;  // extent of the one partial slice
    Value full_v = b.create<mlir::arith::ConstantIndexOp>(loc, full);
    Value is_full = b.create<mlir::arith::CmpIOp>(
        loc, mlir::arith::CmpIPredicate::ult, slice, full_v);
    auto branch = b.create<mlir::scf::IfOp>(loc, is_full,
                                            /*withElseRegion=*/rest > 0);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(branch.thenBlock()->getTerminator());
      Value tile_v = b.create<mlir::arith::ConstantIndexOp>(loc, tile);
      Value offset = b.create<mlir::arith::MulIOp>(loc, slice, tile_v);
      CloneSlice(b, op, top.split_dim, offset, tile);
    }
    if (rest > 0) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(branch.elseBlock()->getTerminator());
      Value is_last = b.create<mlir::arith::CmpIOp>(
          loc, mlir::arith::CmpIPredicate::eq, slice, full_v);
      auto last = b.create<mlir::scf::IfOp>(loc, is_last,
                                            /*withElseRegion=*/false);
      b.setInsertionPoint(last.thenBlock()->getTerminator());
      Value offset = b.create<mlir::arith::ConstantIndexOp>(loc, full * tile);
      CloneSlice(b, op, top.split_dim, offset, rest);
    }
    op->erase();
  }

  // Worker `slice` runs iterations [min(slice*T, n), min(slice*T + T, n))
  // of `loop`, T = ceil(n/k); the same iterations, so the same results, as
  // the whole loop.
  void SplitIterations(OpBuilder& b, mlir::scf::ForOp loop,
                       const TopLevelOp& top, Value slice) {
    const mlir::Location loc = loop.getLoc();
    const int64_t n = top.extent;
    const int64_t tile = (n + options_.partitions - 1) / options_.partitions;
    auto index = [&](int64_t v) -> Value {
      return b.create<mlir::arith::ConstantIndexOp>(loc, v);
    };
    Value n_v = index(n);
    Value begin = b.create<mlir::arith::MinUIOp>(
        loc, b.create<mlir::arith::MulIOp>(loc, slice, index(tile)), n_v);
    Value end = b.create<mlir::arith::MinUIOp>(
        loc, b.create<mlir::arith::AddIOp>(loc, begin, index(tile)), n_v);
    // The loop runs from 0 by 1 (ParallelTripCount).
    loop.setLowerBound(begin);
    loop.setUpperBound(end);
  }

  // `op` restricted to [offset, offset + size) of loop `dim`, at b's
  // insertion point.
  static void CloneSlice(OpBuilder& b, mlir::linalg::LinalgOp op, int dim,
                         Value offset, int64_t size) {
    const mlir::Location loc = op.getLoc();
    llvm::SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    llvm::SmallVector<mlir::OpFoldResult> tile_sizes, bounds, offsets;
    for (int d = 0; d < static_cast<int>(ranges.size()); ++d) {
      tile_sizes.push_back(b.getIndexAttr(d == dim ? size : 0));
      bounds.push_back(b.getIndexAttr(ranges[d]));
      offsets.push_back(d == dim ? mlir::OpFoldResult(offset)
                                 : mlir::OpFoldResult(b.getIndexAttr(0)));
    }
    llvm::SmallVector<Value> operands(op->getOperands());
    llvm::SmallVector<Value> sliced = mlir::linalg::makeTiledShapes(
        b, loc, op, operands, {mlir::OpFoldResult(offset)}, tile_sizes, bounds,
        /*omitPartialTileCheck=*/true);
    Operation* clone = mlir::clone(b, op, mlir::TypeRange{}, sliced);
    mlir::linalg::offsetIndices(b, llvm::cast<mlir::linalg::LinalgOp>(clone),
                                offsets);
  }

  PartitionOptions options_;
};

}  // namespace

std::unique_ptr<mlir::Pass> CreatePartitionPass(PartitionOptions options) {
  return std::make_unique<PartitionPass>(options);
}

PartitionLayout ReadPartitionLayout(mlir::ModuleOp module) {
  PartitionLayout layout;
  if (auto p = module->getAttrOfType<mlir::IntegerAttr>(kPartitionsAttr)) {
    layout.partitions = static_cast<int>(p.getInt());
  }
  if (auto s = module->getAttrOfType<mlir::IntegerAttr>(kScratchBytesAttr)) {
    layout.scratch_bytes = s.getInt();
  }
  // Entries: home worker, offset in its segment, accessor mask, shape.
  if (auto buffers = module->getAttrOfType<mlir::ArrayAttr>(kScratchBuffersAttr)) {
    for (mlir::Attribute a : buffers) {
      llvm::ArrayRef<int64_t> entry = a.cast<mlir::DenseI64ArrayAttr>().asArrayRef();
      layout.scratch.push_back(ScratchBuffer{
          static_cast<int>(entry[0]), entry[1],
          std::vector<int64_t>(entry.begin() + 3, entry.end()), entry[2]});
    }
  }
  if (auto segments =
          module->getAttrOfType<mlir::DenseI64ArrayAttr>(kWorkspaceSegmentsAttr)) {
    layout.segment_bytes.assign(segments.asArrayRef().begin(),
                                segments.asArrayRef().end());
  }
  return layout;
}

}  // namespace rbln::compiler

#include "rbln/compiler/ir/graph_util.h"

#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace rbln::compiler::ir {
namespace {

const char* ShortDType(DType t) {
  switch (t) {
    case FLOAT16:
      return "f16";
    case BFLOAT16:
      return "bf16";
    case FLOAT32:
      return "f32";
    case INT32:
      return "i32";
    case INT64:
      return "i64";
    case BOOL:
      return "i1";
    case INT8:
      return "i8";
    case INT16:
      return "i16";
    case UINT8:
      return "u8";
    default:
      return "?";
  }
}

std::string AttrToText(const Attribute& a) {
  switch (a.value_case()) {
    case Attribute::kF:
      return absl::StrCat(a.f());
    case Attribute::kI:
      return absl::StrCat(a.i());
    case Attribute::kS:
      return absl::StrCat("\"", a.s(), "\"");
    case Attribute::kB:
      return a.b() ? "true" : "false";
    default:
      return "<unset>";
  }
}

}  // namespace

absl::Status Validate(const Graph& graph) {
  absl::flat_hash_set<std::string> defined;
  auto define = [&](const Value& v) -> absl::Status {
    if (v.name().empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("graph %s: a value has no name", graph.name()));
    }
    if (!defined.insert(v.name()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph %s: value %%%s is defined twice", graph.name(), v.name()));
    }
    for (int64_t d : v.type().shape()) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "graph %s: value %%%s has negative dimension %d", graph.name(),
            v.name(), d));
      }
    }
    return absl::OkStatus();
  };
  for (const Value& v : graph.inputs()) {
    if (absl::Status s = define(v); !s.ok()) return s;
  }
  for (const Node& node : graph.nodes()) {
    for (const std::string& in : node.inputs()) {
      if (!defined.contains(in)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "graph %s: node %s uses undefined value %%%s", graph.name(),
            node.op(), in));
      }
    }
    for (const Value& v : node.outputs()) {
      if (absl::Status s = define(v); !s.ok()) return s;
    }
  }
  if (graph.outputs().empty() && graph.updates().empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("graph %s has no outputs", graph.name()));
  }
  for (const std::string& out : graph.outputs()) {
    if (!defined.contains(out)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph %s: output %%%s is not defined", graph.name(), out));
    }
  }
  absl::flat_hash_map<std::string, const TensorType*> input_types;
  for (const Value& v : graph.inputs()) input_types[v.name()] = &v.type();
  absl::flat_hash_map<std::string, const TensorType*> value_types = input_types;
  for (const Node& node : graph.nodes()) {
    for (const Value& v : node.outputs()) value_types[v.name()] = &v.type();
  }
  absl::flat_hash_set<std::string> updated;
  for (const Update& u : graph.updates()) {
    auto input = input_types.find(u.input());
    if (input == input_types.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph %s: update of %%%s, which is not a graph input", graph.name(), u.input()));
    }
    if (!updated.insert(u.input()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph %s: input %%%s is updated twice", graph.name(), u.input()));
    }
    auto value = value_types.find(u.value());
    if (value == value_types.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph %s: update of %%%s with undefined value %%%s", graph.name(), u.input(),
          u.value()));
    }
    if (value->second->SerializeAsString() != input->second->SerializeAsString()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph %s: update of %%%s (%s) with %%%s of another type (%s)", graph.name(),
          u.input(), TypeToText(*input->second), u.value(), TypeToText(*value->second)));
    }
  }
  return absl::OkStatus();
}

std::string DeterministicBytes(const Graph& graph) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    graph.SerializeToCodedStream(&coded);
  }
  return bytes;
}

uint64_t Fingerprint(const Graph& graph) {
  const std::string bytes = DeterministicBytes(graph);
  // Good enough for a cache key whose hits are confirmed by comparing the
  // graphs.
  return StableHash(bytes);
}

uint64_t StableHash(absl::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string TypeToText(const TensorType& type) {
  return absl::StrCat(ShortDType(type.dtype()), "[",
                      absl::StrJoin(type.shape(), ","), "]");
}

const char* TorchDTypeName(DType t) {
  switch (t) {
    case FLOAT16:
      return "float16";
    case BFLOAT16:
      return "bfloat16";
    case FLOAT32:
      return "float32";
    case INT32:
      return "int32";
    case INT64:
      return "int64";
    case BOOL:
      return "bool";
    case INT8:
      return "int8";
    case INT16:
      return "int16";
    case UINT8:
      return "uint8";
    default:
      return "unknown";
  }
}

rbln::DType ToRuntimeDType(DType t) {
  switch (t) {
    case FLOAT16:
      return rbln::DType::kFloat16;
    case BFLOAT16:
      return rbln::DType::kBFloat16;
    case FLOAT32:
      return rbln::DType::kFloat32;
    case INT32:
      return rbln::DType::kInt32;
    case INT64:
      return rbln::DType::kInt64;
    case INT8:
      return rbln::DType::kInt8;
    case INT16:
      return rbln::DType::kInt16;
    case UINT8:
      return rbln::DType::kUInt8;
    default:
      return rbln::DType::kBool;
  }
}

std::string ToText(const Graph& graph) {
  std::vector<std::string> params;
  for (const Value& v : graph.inputs()) {
    params.push_back(absl::StrCat("%", v.name(), ": ", TypeToText(v.type())));
  }
  std::string out = absl::StrCat("graph ", graph.name(), "(",
                                 absl::StrJoin(params, ", "), ") {\n");
  for (const Node& node : graph.nodes()) {
    std::vector<std::string> results, args, attrs;
    for (const Value& v : node.outputs()) {
      results.push_back(absl::StrCat("%", v.name(), ": ", TypeToText(v.type())));
    }
    for (const std::string& in : node.inputs()) args.push_back("%" + in);
    // Sorted, so the dump is stable.
    std::map<std::string, std::string> sorted;
    for (const auto& [k, v] : node.attrs()) sorted[k] = AttrToText(v);
    for (const auto& [k, v] : sorted) attrs.push_back(absl::StrCat(k, "=", v));
    absl::StrAppend(&out, "  ", absl::StrJoin(results, ", "), " = ", node.op(),
                    "(", absl::StrJoin(args, ", "), ")");
    if (!attrs.empty()) absl::StrAppend(&out, " {", absl::StrJoin(attrs, ", "), "}");
    absl::StrAppend(&out, "\n");
  }
  for (const Update& u : graph.updates()) {
    absl::StrAppend(&out, "  update %", u.input(), " = %", u.value(), "\n");
  }
  std::vector<std::string> outs;
  for (const std::string& o : graph.outputs()) outs.push_back("%" + o);
  absl::StrAppend(&out, "  return ", absl::StrJoin(outs, ", "), "\n}\n");
  return out;
}

}  // namespace rbln::compiler::ir

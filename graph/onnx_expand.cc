// The expansions of graph/onnx_expand.h.
#include "graph/onnx_expand.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "graph/onnx_expand_layers.h"

namespace mpc {
namespace {

// A scalar bound given as a constant input, or absent (nullptr input or none).
absl::StatusOr<const Value*> ConstantScalar(const std::vector<Value*>& inputs, size_t index, const std::string& what,
                                            const std::string& where) {
  if (index >= inputs.size() || inputs[index] == nullptr) return nullptr;
  const Value* v = inputs[index];
  if (v->kind != ValueKind::kConstant || NumElements(v->shape) != 1) {
    return absl::UnimplementedError(absl::StrCat(where, ": ", what, " '", v->name,
                                                 "' must be a constant scalar (an initializer); mpc does not train "
                                                 "or feed clipping bounds"));
  }
  return v;
}

// min(max(x, lo), hi) as ONNX defines Clip (so lo > hi gives hi), each bound optional,
// written with Where: NaN compares false both ways and passes through.
Value* ClipBetween(GraphBuilder& b, Value* x, std::optional<double> lo, std::optional<double> hi) {
  Value* y = x;
  if (lo) {
    Value* bound = b.ScalarConstant(*lo, x->dtype);
    y = b.Op("Where", {b.Op("Less", {y, bound}), bound, y});
  }
  if (hi) {
    Value* bound = b.ScalarConstant(*hi, x->dtype);
    y = b.Op("Where", {b.Op("Greater", {y, bound}), bound, y});
  }
  return y;
}

std::optional<double> ValueOf(const Value* bound) {
  return bound ? std::optional<double>(bound->data.GetAsDouble(0)) : std::nullopt;
}

Value* HardSigmoid(GraphBuilder& b, Value* x, double alpha, double beta) {
  Value* z = b.Add(b.Mul(x, b.ScalarConstant(alpha, x->dtype)), b.ScalarConstant(beta, x->dtype));
  return ClipBetween(b, z, 0.0, 1.0);
}

absl::StatusOr<Value*> Pad(GraphBuilder& b, Value* x, const std::vector<Value*>& inputs, const AttrMap& attrs,
                           const std::string& where) {
  const std::string mode = attrs.GetString("mode", "constant");
  if (mode != "constant") {
    return absl::UnimplementedError(
        absl::StrCat(where, ": mode '", mode, "' is not supported (only 'constant'); re-export with zero padding"));
  }
  const int rank = static_cast<int>(x->shape.size());
  // Opset 18's axes input names the padded axes (pads then has two entries per named axis);
  // without it every axis is padded.
  std::vector<int> axes;
  const Value* axes_input = inputs.size() > 3 ? inputs[3] : nullptr;
  if (axes_input) {
    if (axes_input->kind != ValueKind::kConstant) {
      return absl::UnimplementedError(absl::StrCat(where, ": 'axes' must be a constant (an initializer)"));
    }
    for (int64_t i = 0; i < axes_input->data.num_elements(); ++i) {
      int64_t a = static_cast<int64_t>(axes_input->data.GetAsDouble(i));
      if (a < -rank || a >= rank) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": axis ", a, " is out of range for rank ", rank));
      }
      axes.push_back(static_cast<int>(a < 0 ? a + rank : a));
    }
  } else {
    for (int a = 0; a < rank; ++a) axes.push_back(a);
  }
  const int count = static_cast<int>(axes.size());
  const Value* pads = inputs.size() > 1 ? inputs[1] : nullptr;
  if (!pads || pads->kind != ValueKind::kConstant || NumElements(pads->shape) != 2 * count) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": 'pads' must be a constant of ", 2 * count, " integers (begin and end of each ",
                     axes_input ? "named axis" : "axis", ")"));
  }
  MPC_ASSIGN_OR_RETURN(const Value* fill, ConstantScalar(inputs, 2, "the constant value", where));
  const double value = fill ? fill->data.GetAsDouble(0) : 0.0;
  Graph& g = *b.graph();
  Value* y = x;
  for (int k = 0; k < count; ++k) {
    const int axis = axes[k];
    const int64_t before = static_cast<int64_t>(pads->data.GetAsDouble(k));
    const int64_t after = static_cast<int64_t>(pads->data.GetAsDouble(k + count));
    if (before < 0 || after < 0) {
      return absl::UnimplementedError(absl::StrCat(where, ": negative pads (cropping) are not supported"));
    }
    if (before == 0 && after == 0) continue;
    std::vector<Value*> parts;
    for (int64_t width : {before, int64_t{-1}, after}) {
      if (width == -1) {
        parts.push_back(y);
        continue;
      }
      if (width == 0) continue;
      Shape shape = y->shape;
      shape[axis] = width;
      Tensor block = Tensor(DType::kF64, shape);
      for (int64_t i = 0; i < block.num_elements(); ++i) block.data<double>()[i] = value;
      parts.push_back(g.AddConstant(g.UniqueName(absl::StrCat(where, "/fill")), block.CastTo(y->dtype)));
    }
    AttrMap concat;
    concat.Set("axis", static_cast<int64_t>(axis));
    y = b.Op("Concat", parts, std::move(concat));
    MPC_RETURN_IF_ERROR(b.status());
  }
  return y;
}

}  // namespace

const std::vector<std::string>& OnnxExpansionOps() {
  static const auto* ops = new std::vector<std::string>{
      "Attention", "CastLike", "Clip", "GroupNormalization", "HardSigmoid", "HardSwish", "InstanceNormalization",
      "IsNaN", "LeakyRelu", "Pad", "RMSNormalization", "Resize", "RotaryEmbedding"};
  return *ops;
}

bool HasOnnxExpansion(const std::string& op) {
  const std::vector<std::string>& ops = OnnxExpansionOps();
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

absl::StatusOr<std::vector<Value*>> ExpandOnnxNode(Graph& graph, const std::string& op, const std::string& name,
                                                   const std::vector<Value*>& inputs, const AttrMap& attrs) {
  const std::string where = absl::StrCat("node '", name, "' (", op, ")");
  if (inputs.empty() || inputs[0] == nullptr) return absl::InvalidArgumentError(absl::StrCat(where, ": no input"));
  Value* x = inputs[0];
  if (op == "CastLike") {  // Cast to the dtype of input 1, which only lends its type
    if (inputs.size() < 2 || inputs[1] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": CastLike needs the input whose dtype it takes"));
    }
    if (x->kind == ValueKind::kConstant && !x->data.empty()) {  // shape arithmetic: folded now
      return std::vector<Value*>{graph.AddConstant(graph.UniqueName(name), x->data.CastTo(inputs[1]->dtype))};
    }
    AttrMap cast;
    cast.Set("to", static_cast<int64_t>(DTypeToOnnx(inputs[1]->dtype)));
    if (attrs.Has("saturate")) cast.Set("saturate", attrs.GetInt("saturate", 1));
    GraphBuilder b(&graph, name + "/");
    Value* y = b.Op("Cast", {x}, std::move(cast));
    MPC_RETURN_IF_ERROR(b.status());
    return std::vector<Value*>{y};
  }
  if (!IsFloating(x->dtype)) {
    return absl::UnimplementedError(absl::StrCat(where, ": input '", x->name, "' is ", DTypeName(x->dtype),
                                                 "; mpc supports this op on float tensors"));
  }
  GraphBuilder b(&graph, name + "/");
  Value* y = nullptr;
  if (op == "Clip") {
    MPC_ASSIGN_OR_RETURN(const Value* lo, ConstantScalar(inputs, 1, "min", where));
    MPC_ASSIGN_OR_RETURN(const Value* hi, ConstantScalar(inputs, 2, "max", where));
    y = ClipBetween(b, x, ValueOf(lo), ValueOf(hi));
  } else if (op == "HardSigmoid") {
    y = HardSigmoid(b, x, attrs.GetFloat("alpha", 0.2f), attrs.GetFloat("beta", 0.5f));
  } else if (op == "HardSwish") {
    y = b.Mul(x, HardSigmoid(b, x, 1.0 / 6.0, 0.5));
  } else if (op == "LeakyRelu") {  // x > 0 picks x, so the gradient at 0 is alpha's, as in PyTorch
    Value* zero = b.ScalarConstant(0.0, x->dtype);
    y = b.Op("Where", {b.Op("Greater", {x, zero}), x, b.Mul(x, b.ScalarConstant(attrs.GetFloat("alpha", 0.01f), x->dtype))});
  } else if (op == "Pad") {
    MPC_ASSIGN_OR_RETURN(y, Pad(b, x, inputs, attrs, where));
  } else if (op == "IsNaN") {  // NaN is the one value not equal to itself
    y = b.Op("Not", {b.Op("Equal", {x, x})});
  } else if (op == "RMSNormalization") {
    MPC_ASSIGN_OR_RETURN(y, ExpandRmsNormalization(b, inputs, attrs, where));
  } else if (op == "GroupNormalization" || op == "InstanceNormalization") {
    MPC_ASSIGN_OR_RETURN(y, ExpandGroupNormalization(b, inputs, attrs, op == "InstanceNormalization", where));
  } else if (op == "RotaryEmbedding") {
    MPC_ASSIGN_OR_RETURN(y, ExpandRotaryEmbedding(b, inputs, attrs, where));
  } else if (op == "Resize") {
    MPC_ASSIGN_OR_RETURN(y, ExpandResize(b, inputs, attrs, where));
  } else if (op == "Attention") {
    MPC_ASSIGN_OR_RETURN(y, ExpandAttention(b, inputs, attrs, where));
  } else {
    return absl::InternalError(absl::StrCat(where, ": no expansion"));
  }
  MPC_RETURN_IF_ERROR(b.status());
  if (y == x) y = b.Op("Identity", {x});  // Clip without bounds: still a node with its own output
  MPC_RETURN_IF_ERROR(b.status());
  return std::vector<Value*>{y};
}

}  // namespace mpc

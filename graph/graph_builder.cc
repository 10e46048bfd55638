// GraphBuilder: sticky-error node emission.
#include "graph/graph_builder.h"

#include "absl/strings/str_cat.h"

namespace mpc {

std::vector<Value*> GraphBuilder::OpN(const std::string& op, std::vector<Value*> inputs, AttrMap attrs) {
  if (!status_.ok()) return {};
  for (size_t i = 0; i < inputs.size(); ++i) {
    // A null input in the middle means an earlier emission failed; absent optional
    // inputs are only ever trailing, and AddNode drops those.
    if (inputs[i] == nullptr && i + 1 < inputs.size() && inputs[i + 1] != nullptr) {
      SetError(absl::InternalError(absl::StrCat("GraphBuilder: input ", i, " of ", op, " is null")));
      return {};
    }
  }
  const std::string name = graph_->UniqueName(absl::StrCat(prefix_, op));
  auto node = graph_->AddNode(op, std::move(inputs), std::move(attrs), name);
  if (!node.ok()) {
    SetError(node.status());
    return {};
  }
  last_node_ = *node;
  return (*node)->outputs;
}

Value* GraphBuilder::Op(const std::string& op, std::vector<Value*> inputs, AttrMap attrs) {
  std::vector<Value*> outs = OpN(op, std::move(inputs), std::move(attrs));
  return outs.empty() ? nullptr : outs[0];
}

Value* GraphBuilder::ScalarConstant(double value, DType dtype) {
  Tensor t = Tensor::FromVector<double>({}, {value}).CastTo(dtype);
  return graph_->AddConstant(absl::StrCat(prefix_, "const"), std::move(t));
}

Value* GraphBuilder::ShapeConstant(const Shape& shape) {
  return graph_->AddConstant(absl::StrCat(prefix_, "shape"),
                             Tensor::FromVector<int64_t>({static_cast<int64_t>(shape.size())}, shape));
}

Value* GraphBuilder::Reshape(Value* x, const Shape& shape) {
  if (x && x->shape == shape) return x;
  return Op("Reshape", {x, ShapeConstant(shape)});
}

Value* GraphBuilder::Transpose(Value* x, std::vector<int64_t> perm) {
  AttrMap attrs;
  attrs.Set("perm", std::move(perm));
  return Op("Transpose", {x}, std::move(attrs));
}

Value* GraphBuilder::ReduceSumTo(Value* x, const Shape& shape) {
  if (x && x->shape == shape) return x;
  AttrMap attrs;
  attrs.Set("shape", shape);
  return Op("ReduceSumTo", {x}, std::move(attrs));
}

Value* GraphBuilder::Cast(Value* x, DType dtype) {
  if (x && x->dtype == dtype) return x;
  AttrMap attrs;
  attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(dtype)));
  return Op("Cast", {x}, std::move(attrs));
}

}  // namespace mpc

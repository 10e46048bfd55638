// Convolution and pooling ops, NCHW (channel axis 1), 1-D and 2-D spatial:
//   Conv (ONNX): X [N,C,...], W [M,C/group,k...], optional B [M]; strides, pads,
//     dilations, group, kernel_shape, auto_pad.
//   MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool (ONNX).
// and the mpc-domain backward ops they differentiate into:
//   ConvGradInput(dY, W)   -> dX   attributes: the forward's + input_shape (X's shape)
//   ConvGradWeight(dY, X)  -> dW   attributes: the forward's + kernel_shape (always set)
//   MaxPoolGrad(dY, X)     -> dX   dY routed to each window's first maximum
//   AveragePoolGrad(dY)    -> dX   attributes: the forward's + input_shape
// Conv's bias gradient is ReduceSumTo(dY, [M,1,...]) reshaped to [M]. GlobalAveragePool's
// gradient is BroadcastTo(dY) / (spatial size); GlobalMaxPool's is a MaxPoolGrad with
// the whole spatial extent as its kernel. Conv, ConvGradInput, ConvGradWeight, MaxPool and
// MaxPoolGrad with mpc_channels_last = 1 (passes/channels_last.h) read and write X, Y, dX
// and dY as [N, spatial..., C]; their shape rules run on channels-first views
// (ops_conv_util.h). Padding rules (passes/pad_dims.h): Conv is
// kChannelContraction, the forward pools kChannelwise, the backward ops kOpaque (autodiff
// runs after pad-dims).
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/ops_common.h"
#include "graph/ops_conv_util.h"

namespace mpc {
namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

std::vector<int64_t> Spatial(const Shape& s) { return std::vector<int64_t>(s.begin() + 2, s.end()); }

// X must be [N, C, W] or [N, C, H, W].
absl::Status CheckNchw(const Node& n, const Value* x, const char* what) {
  if (x->shape.size() != 3 && x->shape.size() != 4) {
    return absl::UnimplementedError(
        absl::StrCat(what, " '", x->name, "' has shape ", ShapeToString(x->shape), " (",
                     static_cast<int>(x->shape.size()) - 2, " spatial axes); ", n.op,
                     " supports 1-D and 2-D NCHW inputs (rank 3 or 4); 3-D and higher are not "
                     "implemented"));
  }
  return absl::OkStatus();
}

// Group count and consistency of X [N,C,...] with W [M,C/group,k...].
absl::StatusOr<int64_t> CheckGroups(const Node& n, int64_t c, int64_t m, int64_t w_c, const Shape& x_shape,
                                    const Shape& w_shape) {
  const int64_t group = n.attrs.GetInt("group", 1);
  if (group < 1) return absl::InvalidArgumentError(absl::StrCat("group ", group, " must be >= 1"));
  if (c % group != 0 || m % group != 0 || w_c * group != c) {
    return absl::InvalidArgumentError(absl::StrCat("X ", ShapeToString(x_shape), " has C=", c, " channels and W ",
                                                   ShapeToString(w_shape), " has M=", m, " output channels of ", w_c,
                                                   " input channels each, with group=", group,
                                                   "; need C and M divisible by group and W[1] = C/group"));
  }
  return group;
}

// The kernel extent: W's spatial dims, checked against kernel_shape when given.
absl::StatusOr<std::vector<int64_t>> ConvKernel(const Node& n, const Shape& w_shape) {
  std::vector<int64_t> k = Spatial(w_shape);
  if (n.attrs.Has("kernel_shape") && n.attrs.GetInts("kernel_shape", {}) != k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel_shape [", absl::StrJoin(n.attrs.GetInts("kernel_shape", {}), ","), "] does not match W's shape ",
        ShapeToString(w_shape), "; drop kernel_shape or make it [", absl::StrJoin(k, ","), "]"));
  }
  return k;
}

Types InferConv(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 3));
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* x = n.inputs[0];
  const Value* w = n.inputs[1];
  MPC_RETURN_IF_ERROR(CheckNchw(n, x, "X"));
  if (w->shape.size() != x->shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("W ", ShapeToString(w->shape), " must have X's rank ",
                                                   x->shape.size(), " (X ", ShapeToString(x->shape),
                                                   "): [M, C/group, kernel...]"));
  }
  const Shape xs = conv::AsChannelsFirst(n, x->shape);
  const int64_t m = w->shape[0];
  MPC_RETURN_IF_ERROR(CheckGroups(n, xs[1], m, w->shape[1], x->shape, w->shape).status());
  if (n.inputs.size() > 2 && n.inputs[2] && n.inputs[2]->shape != Shape{m}) {
    return absl::InvalidArgumentError(absl::StrCat("bias B ", ShapeToString(n.inputs[2]->shape), " must be [", m,
                                                   "] (one value per output channel of W ", ShapeToString(w->shape),
                                                   ")"));
  }
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ConvKernel(n, w->shape));
  auto win = conv::ResolveWindow(n, Spatial(xs), kernel, /*pooling=*/false);
  if (!win.ok()) {
    return absl::Status(win.status().code(), absl::StrCat("X ", ShapeToString(x->shape), ", W ",
                                                          ShapeToString(w->shape), ": ", win.status().message()));
  }
  Shape out{xs[0], m};
  out.insert(out.end(), win->out.begin(), win->out.end());
  return std::vector<TensorType>{{x->dtype, conv::InNodeLayout(n, out)}};
}

// dY must be the forward output computed from (x_shape, kernel); x_shape channels-first.
absl::Status CheckGradOutput(const Node& n, const Value* dy, const Shape& x_shape, int64_t out_channels,
                             const std::vector<int64_t>& kernel, bool pooling) {
  auto win = conv::ResolveWindow(n, Spatial(x_shape), kernel, pooling);
  if (!win.ok()) {
    return absl::Status(win.status().code(),
                        absl::StrCat("input shape ", ShapeToString(x_shape), ": ", win.status().message()));
  }
  Shape want{x_shape[0], out_channels};
  want.insert(want.end(), win->out.begin(), win->out.end());
  want = conv::InNodeLayout(n, want);
  if (dy->shape != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("dY '", dy->name, "' has shape ", ShapeToString(dy->shape), " but the forward output for input ",
                     ShapeToString(conv::InNodeLayout(n, x_shape)), " is ", ShapeToString(want),
                     "; pass the gradient of this op's forward output"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> InputShapeAttr(const Node& n, size_t rank) {
  Shape s = n.attrs.GetInts("input_shape", {});
  if (s.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("attribute input_shape [", absl::StrJoin(s, ","),
                                                   "] must give the forward input's full shape (rank ", rank, ")"));
  }
  return s;
}

Types InferConvGradInput(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* dy = n.inputs[0];
  const Value* w = n.inputs[1];
  MPC_RETURN_IF_ERROR(CheckNchw(n, dy, "dY"));
  MPC_ASSIGN_OR_RETURN(Shape x_shape, InputShapeAttr(n, dy->shape.size()));
  if (w->shape.size() != x_shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("W ", ShapeToString(w->shape), " must have rank ", x_shape.size()));
  }
  const Shape xs = conv::AsChannelsFirst(n, x_shape);  // input_shape is in the node's layout
  MPC_RETURN_IF_ERROR(CheckGroups(n, xs[1], w->shape[0], w->shape[1], x_shape, w->shape).status());
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ConvKernel(n, w->shape));
  MPC_RETURN_IF_ERROR(CheckGradOutput(n, dy, xs, w->shape[0], kernel, false));
  return std::vector<TensorType>{{dy->dtype, x_shape}};
}

Types InferConvGradWeight(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* dy = n.inputs[0];
  const Value* x = n.inputs[1];
  MPC_RETURN_IF_ERROR(CheckNchw(n, x, "X"));
  const std::vector<int64_t> kernel = n.attrs.GetInts("kernel_shape", {});
  if (kernel.size() != x->shape.size() - 2) {
    return absl::InvalidArgumentError(absl::StrCat("kernel_shape [", absl::StrJoin(kernel, ","), "] must have ",
                                                   x->shape.size() - 2, " values for X ", ShapeToString(x->shape)));
  }
  if (dy->shape.size() != x->shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dY ", ShapeToString(dy->shape), " and X ", ShapeToString(x->shape), " must have the same rank"));
  }
  const Shape xs = conv::AsChannelsFirst(n, x->shape);
  const int64_t m = conv::AsChannelsFirst(n, dy->shape)[1];
  const int64_t group = n.attrs.GetInt("group", 1);
  if (group < 1 || xs[1] % group != 0 || m % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("group ", group, " must divide X's C=", xs[1], " and dY's M=", m));
  }
  MPC_RETURN_IF_ERROR(CheckGradOutput(n, dy, xs, m, kernel, false));
  Shape w_shape{m, xs[1] / group};
  w_shape.insert(w_shape.end(), kernel.begin(), kernel.end());
  return std::vector<TensorType>{{dy->dtype, w_shape}};
}

// Copies the forward's window attributes onto a backward node.
AttrMap WindowAttrs(const Node& n) {
  AttrMap a;
  for (const char* name : {"strides", "pads", "dilations", "group", "auto_pad", "kernel_shape", "ceil_mode",
                           "count_include_pad", "storage_order", "mpc_channels_last", "mpc_ceil_drops_padded_window"}) {
    auto it = n.attrs.all().find(name);
    if (it != n.attrs.all().end()) a.Set(name, it->second);
  }
  return a;
}

Grads GradConv(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  Value* x = n.inputs[0];
  Value* w = n.inputs[1];
  Value* dy = dys[0];
  AttrMap base = WindowAttrs(n);
  base.Set("kernel_shape", Spatial(w->shape));
  AttrMap in_attrs = base;
  in_attrs.Set("input_shape", x->shape);
  std::vector<Value*> grads{b.Op("ConvGradInput", {dy, w}, std::move(in_attrs)), b.Op("ConvGradWeight", {dy, x}, base)};
  if (n.inputs.size() > 2 && n.inputs[2]) {
    // [M, 1, ...] against dY [N, M, ...]; [M] against a channels-last dY [N, ..., M].
    Shape per_channel(conv::ChannelsLast(n) ? 1 : x->shape.size() - 1, 1);
    per_channel[0] = w->shape[0];
    grads.push_back(b.Reshape(b.ReduceSumTo(dy, per_channel), n.inputs[2]->shape));
  }
  return grads;
}

// ---------------------------------------------------------------------------------
// Pooling.

absl::StatusOr<std::vector<int64_t>> PoolKernel(const Node& n, const Shape& x_shape) {
  std::vector<int64_t> k = n.attrs.GetInts("kernel_shape", {});
  if (k.size() != x_shape.size() - 2) {
    return absl::InvalidArgumentError(absl::StrCat("kernel_shape [", absl::StrJoin(k, ","),
                                                   "] must have one value per "
                                                   "spatial axis of X ",
                                                   ShapeToString(x_shape), " (", x_shape.size() - 2, " values)"));
  }
  return k;
}

absl::Status CheckPoolAttrs(const Node& n) {
  if (n.attrs.GetInt("storage_order", 0) != 0) {
    return absl::UnimplementedError("storage_order=1 (column-major indices) is not supported; use 0");
  }
  return absl::OkStatus();
}

Types InferPool(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  MPC_RETURN_IF_ERROR(CheckPoolAttrs(n));
  const Value* x = n.inputs[0];
  MPC_RETURN_IF_ERROR(CheckNchw(n, x, "X"));
  if (conv::ChannelsLast(n) && n.op != "MaxPool") {
    return absl::UnimplementedError(absl::StrCat(n.op, " has no channels-last form (mpc_channels_last); only MaxPool"));
  }
  const Shape xs = conv::AsChannelsFirst(n, x->shape);
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, PoolKernel(n, xs));
  auto win = conv::ResolveWindow(n, Spatial(xs), kernel, /*pooling=*/true);
  if (!win.ok()) {
    return absl::Status(win.status().code(), absl::StrCat("X ", ShapeToString(x->shape), ": ", win.status().message()));
  }
  Shape out{xs[0], xs[1]};
  out.insert(out.end(), win->out.begin(), win->out.end());
  return std::vector<TensorType>{{x->dtype, conv::InNodeLayout(n, out)}};
}

// MaxPoolGrad(dY, X) -> dX.
Types InferMaxPoolGrad(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* x = n.inputs[1];
  MPC_RETURN_IF_ERROR(CheckNchw(n, x, "X"));
  const Shape xs = conv::AsChannelsFirst(n, x->shape);
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, PoolKernel(n, xs));
  MPC_RETURN_IF_ERROR(CheckGradOutput(n, n.inputs[0], xs, xs[1], kernel, true));
  return std::vector<TensorType>{{x->dtype, x->shape}};
}

// AveragePoolGrad(dY) -> dX of shape input_shape.
Types InferAveragePoolGrad(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* dy = n.inputs[0];
  MPC_RETURN_IF_ERROR(CheckNchw(n, dy, "dY"));
  MPC_ASSIGN_OR_RETURN(Shape x_shape, InputShapeAttr(n, dy->shape.size()));
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, PoolKernel(n, x_shape));
  MPC_RETURN_IF_ERROR(CheckGradOutput(n, dy, x_shape, x_shape[1], kernel, true));
  return std::vector<TensorType>{{dy->dtype, x_shape}};
}

Grads GradMaxPool(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  return std::vector<Value*>{b.Op("MaxPoolGrad", {dys[0], n.inputs[0]}, WindowAttrs(n))};
}

Grads GradAveragePool(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  AttrMap a = WindowAttrs(n);
  a.Set("input_shape", n.inputs[0]->shape);
  return std::vector<Value*>{b.Op("AveragePoolGrad", {dys[0]}, std::move(a))};
}

Types InferGlobalPool(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* x = n.inputs[0];
  if (x->shape.size() < 3) {
    return absl::InvalidArgumentError(absl::StrCat("X '", x->name, "' has shape ", ShapeToString(x->shape), "; ", n.op,
                                                   " needs [N, C, spatial...] (rank >= 3)"));
  }
  Shape out(x->shape.size(), 1);
  out[0] = x->shape[0];
  out[1] = x->shape[1];
  return std::vector<TensorType>{{x->dtype, out}};
}

Grads GradGlobalAveragePool(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  const Shape& xs = n.inputs[0]->shape;
  const int64_t count = NumElements(Spatial(xs));
  AttrMap a;
  a.Set("shape", xs);
  Value* spread = b.Op("BroadcastTo", {dys[0]}, std::move(a));
  return std::vector<Value*>{b.Div(spread, b.ScalarConstant(static_cast<double>(count), dys[0]->dtype))};
}

Grads GradGlobalMaxPool(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  AttrMap a;
  a.Set("kernel_shape", Spatial(n.inputs[0]->shape));
  return std::vector<Value*>{b.Op("MaxPoolGrad", {dys[0], n.inputs[0]}, std::move(a))};
}

OpDef Def(const char* name, const char* domain, int min_in, int max_in, InferFn infer, GradFn grad = nullptr,
          PaddingRule padding = PaddingRule::kOpaque) {
  OpDef d;
  d.name = name;
  d.domain = domain;
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.infer = std::move(infer);
  d.grad = std::move(grad);
  d.padding = padding;  // NCHW: channel axis 1, spatial axes last
  return d;
}

}  // namespace

void RegisterConvOps(OpRegistry& r) {
  r.Register(Def("Conv", "", 2, 3, InferConv, GradConv, PaddingRule::kChannelContraction));
  r.Register(Def("ConvGradInput", "mpc", 2, 2, InferConvGradInput));
  r.Register(Def("ConvGradWeight", "mpc", 2, 2, InferConvGradWeight));
  // MaxPool's optional Indices output is not supported (the importer says so).
  r.Register(Def("MaxPool", "", 1, 1, InferPool, GradMaxPool, PaddingRule::kChannelwise));
  r.Register(Def("AveragePool", "", 1, 1, InferPool, GradAveragePool, PaddingRule::kChannelwise));
  r.Register(Def("MaxPoolGrad", "mpc", 2, 2, InferMaxPoolGrad));
  r.Register(Def("AveragePoolGrad", "mpc", 1, 1, InferAveragePoolGrad));
  r.Register(Def("GlobalAveragePool", "", 1, 1, InferGlobalPool, GradGlobalAveragePool, PaddingRule::kChannelwise));
  r.Register(Def("GlobalMaxPool", "", 1, 1, InferGlobalPool, GradGlobalMaxPool, PaddingRule::kChannelwise));
}

}  // namespace mpc

// f32 activations and softmax on oneDNN primitives (eltwise_forward for ReLU, logistic
// and tanh; softmax_forward / logsoftmax_forward along one axis), built once per node
// with its static shape. These replace the loop kernels for f32; the f64 loop kernels
// stay as the reference the op numerics tests compare against.
#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc {
namespace {

using dnnl::memory;

memory::desc FlatDesc(const Shape& shape) {
  memory::dims dims(shape.begin(), shape.end());
  if (dims.empty()) dims = {1};
  memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return memory::desc(dims, memory::data_type::f32, strides);
}

// One primitive with a src and a dst argument.
class DnnlUnaryKernel : public Kernel {
 public:
  DnnlUnaryKernel(dnnl::primitive primitive, const memory::desc& md)
      : primitive_(std::move(primitive)),
        src_(md, CpuDnnlEngine(), DNNL_MEMORY_NONE),
        dst_(md, CpuDnnlEngine(), DNNL_MEMORY_NONE) {}

  absl::Status Run(KernelContext& ctx) override {
    src_.set_data_handle(ctx.inputs[0].data);
    dst_.set_data_handle(ctx.outputs[0].data);
    primitive_.execute(CpuDnnlStream(), {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}});
    CpuDnnlStream().wait();
    return absl::OkStatus();
  }

 private:
  dnnl::primitive primitive_;
  memory src_, dst_;
};

KernelFactory Eltwise(dnnl::algorithm algorithm) {
  return [algorithm](const Node& node, Backend&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    const memory::desc md = FlatDesc(node.inputs[0]->shape);
    try {
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, md, 0.0f, 0.0f);
      dnnl::eltwise_forward::primitive_desc pd(desc, CpuDnnlEngine());
      return std::unique_ptr<Kernel>(std::make_unique<DnnlUnaryKernel>(dnnl::eltwise_forward(pd), md));
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("oneDNN eltwise setup failed: ", e.what()));
    }
  };
}

template <bool kLog>
absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmax(const Node& node, Backend&) {
  const Shape& shape = node.inputs[0]->shape;
  const int rank = static_cast<int>(shape.size());
  int64_t axis = node.attrs.GetInt("axis", -1);
  if (axis < 0) axis += rank;
  const memory::desc md = FlatDesc(shape);
  try {
    if (kLog) {
      dnnl::logsoftmax_forward::desc desc(dnnl::prop_kind::forward_inference, md, static_cast<int>(axis));
      dnnl::logsoftmax_forward::primitive_desc pd(desc, CpuDnnlEngine());
      return std::unique_ptr<Kernel>(std::make_unique<DnnlUnaryKernel>(dnnl::logsoftmax_forward(pd), md));
    }
    dnnl::softmax_forward::desc desc(dnnl::prop_kind::forward_inference, md, static_cast<int>(axis));
    dnnl::softmax_forward::primitive_desc pd(desc, CpuDnnlEngine());
    return std::unique_ptr<Kernel>(std::make_unique<DnnlUnaryKernel>(dnnl::softmax_forward(pd), md));
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN softmax setup failed: ", e.what()));
  }
}

}  // namespace

void RegisterCpuDnnlEltwiseKernels(KernelRegistry& r) {
  r.Register("Relu", "cpu", DType::kF32, Eltwise(dnnl::algorithm::eltwise_relu));
  r.Register("Sigmoid", "cpu", DType::kF32, Eltwise(dnnl::algorithm::eltwise_logistic));
  r.Register("Tanh", "cpu", DType::kF32, Eltwise(dnnl::algorithm::eltwise_tanh));
  r.Register("Softmax", "cpu", DType::kF32, CreateSoftmax<false>);
  r.Register("LogSoftmax", "cpu", DType::kF32, CreateSoftmax<true>);
}

}  // namespace mpc

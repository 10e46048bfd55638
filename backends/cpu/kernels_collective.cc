// CPU kernels of the collective ops (graph/ops_collective.cc): AllReduce packs its bucket
// of tensors into one contiguous buffer, reduces it across the ranks through the backend's
// Communicator (MPI), and unpacks the result. One call per bucket: latency is paid per
// bucket, not per gradient.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "distributed/communicator.h"

namespace mpc {
namespace {

class AllReduceKernel : public Kernel {
 public:
  // `in_place`: AllReduceInPlace, which writes the result back into its inputs (state).
  AllReduceKernel(const Node& node, Communicator* comm, bool in_place)
      : name_(node.name),
        comm_(comm),
        held_(node.attrs.GetInt("held", 0) != 0),
        in_place_(in_place),
        reduce_(node.attrs.GetString("reduce", in_place ? "max" : "mean")) {}

  absl::Status Run(KernelContext& ctx) override {
    std::vector<TensorView>& results = in_place_ ? ctx.inputs : ctx.outputs;
    const size_t tensors = results.size();
    const bool hold = held_ && ctx.inputs.back().as<float>()[0] != 0.0f;
    if (hold) {  // a micro-batch that does not end the step: nothing to agree on yet
      for (size_t i = 0; i < tensors; ++i) {
        if (ctx.outputs[i].data != ctx.inputs[i].data) {
          std::memcpy(ctx.outputs[i].data, ctx.inputs[i].data, ctx.inputs[i].num_elements() * sizeof(float));
        }
      }
      return absl::OkStatus();
    }
    int64_t total = 0;
    for (size_t i = 0; i < tensors; ++i) total += ctx.inputs[i].num_elements();
    buffer_.resize(static_cast<size_t>(total));
    int64_t at = 0;
    for (size_t i = 0; i < tensors; ++i) {
      const int64_t n = ctx.inputs[i].num_elements();
      std::memcpy(buffer_.data() + at, ctx.inputs[i].data, n * sizeof(float));
      at += n;
    }
    const ReduceOp op = reduce_ == "max" ? ReduceOp::kMax : ReduceOp::kSum;
    absl::Status s = comm_->AllReduce(buffer_.data(), total, op, absl::StrCat("'", name_, "' at step ", ctx.step + 1));
    if (!s.ok()) return s;
    const float scale = reduce_ == "mean" ? 1.0f / static_cast<float>(comm_->size()) : 1.0f;
    at = 0;
    for (size_t i = 0; i < tensors; ++i) {
      const int64_t n = results[i].num_elements();
      float* out = results[i].as<float>();
      const float* in = buffer_.data() + at;
      if (scale == 1.0f) {
        std::memcpy(out, in, n * sizeof(float));
      } else {
        for (int64_t k = 0; k < n; ++k) out[k] = in[k] * scale;
      }
      at += n;
    }
    return absl::OkStatus();
  }

 private:
  const std::string name_;
  Communicator* const comm_;
  const bool held_;
  const bool in_place_;
  const std::string reduce_;
  std::vector<float> buffer_;  // the packed bucket, reused every step
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateAllReduce(const Node& node, Backend& backend) {
  Communicator* comm = backend.communicator();
  if (!comm) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AllReduce '", node.name,
        "': this program was compiled for data-parallel training but the process is not part of a job; start it "
        "with mpirun -np N"));
  }
  return std::unique_ptr<Kernel>(new AllReduceKernel(node, comm, node.op == "AllReduceInPlace"));
}

}  // namespace

void RegisterCpuCollectiveKernels(KernelRegistry& r) {
  r.Register("AllReduce", "cpu", DType::kF32, CreateAllReduce);
  r.Register("AllReduceInPlace", "cpu", DType::kF32, CreateAllReduce);
}

}  // namespace mpc

// CPU kernels of the collective ops (graph/ops_collective.cc): AllReduce packs its bucket
// of tensors into one contiguous buffer, reduces it across the ranks through the backend's
// Communicator (MPI), and unpacks the result. One call per bucket: latency is paid per
// bucket, not per gradient. ZeRO-1's ReduceScatter and AllGatherInPlace pack their
// buckets rank-major (every tensor's slice for rank 0, then rank 1's, ...; graph/
// sharding.h) so one collective moves the bucket; Shard copies this rank's slice.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "distributed/communicator.h"
#include "graph/sharding.h"

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

absl::StatusOr<Communicator*> CommunicatorFor(const Node& node, Backend& backend) {
  Communicator* comm = backend.communicator();
  if (!comm) {
    return absl::FailedPreconditionError(absl::StrCat(
        node.op, " '", node.name,
        "': this program was compiled for data-parallel training but the process is not part of a job; start it "
        "with mpirun -np N"));
  }
  if (comm->size() != node.attrs.GetInt("world_size", 0)) {
    return absl::FailedPreconditionError(absl::StrCat(node.op, " '", node.name, "' was compiled for ",
                                                      node.attrs.GetInt("world_size", 0), " ranks; this job has ",
                                                      comm->size(), " (compile it for the job that runs it)"));
  }
  return comm;
}

// Copies this rank's slice of `n` floats (zero-padded to the shard length).
void CopySlice(const float* whole, int64_t n, int world, int rank, float* slice) {
  const ShardRange range = ShardRangeOf(n, world, rank);
  std::copy_n(whole + range.begin, range.count, slice);
  std::fill(slice + range.count, slice + ShardLength(n, world), 0.0f);
}

class ReduceScatterKernel : public Kernel {
 public:
  ReduceScatterKernel(const Node& node, Communicator* comm)
      : name_(node.name), comm_(comm), held_(node.attrs.GetInt("held", 0) != 0) {}

  absl::Status Run(KernelContext& ctx) override {
    const int world = comm_->size(), rank = comm_->rank();
    const size_t tensors = ctx.outputs.size();
    if (held_ && ctx.inputs.back().as<float>()[0] != 0.0f) {  // a micro-batch that does not end the step
      for (size_t i = 0; i < tensors; ++i) {
        CopySlice(ctx.inputs[i].as<float>(), ctx.inputs[i].num_elements(), world, rank, ctx.outputs[i].as<float>());
      }
      return absl::OkStatus();
    }
    int64_t per_rank = 0;
    for (size_t i = 0; i < tensors; ++i) per_rank += ctx.outputs[i].num_elements();
    send_.resize(static_cast<size_t>(per_rank) * world);
    recv_.resize(static_cast<size_t>(per_rank));
    for (int r = 0; r < world; ++r) {
      float* chunk = send_.data() + static_cast<size_t>(r) * per_rank;
      for (size_t i = 0; i < tensors; ++i) {
        CopySlice(ctx.inputs[i].as<float>(), ctx.inputs[i].num_elements(), world, r, chunk);
        chunk += ctx.outputs[i].num_elements();
      }
    }
    absl::Status s = comm_->ReduceScatter(send_.data(), recv_.data(), per_rank,
                                          absl::StrCat("'", name_, "' at step ", ctx.step + 1));
    if (!s.ok()) return s;
    const float* at = recv_.data();
    for (size_t i = 0; i < tensors; ++i) {
      const int64_t n = ctx.outputs[i].num_elements();
      std::memcpy(ctx.outputs[i].data, at, n * sizeof(float));
      at += n;
    }
    return absl::OkStatus();
  }

 private:
  const std::string name_;
  Communicator* const comm_;
  const bool held_;
  std::vector<float> send_, recv_;  // reused every step
};

class ShardKernel : public Kernel {
 public:
  explicit ShardKernel(Communicator* comm) : comm_(comm) {}
  absl::Status Run(KernelContext& ctx) override {
    CopySlice(ctx.inputs[0].as<float>(), ctx.inputs[0].num_elements(), comm_->size(), comm_->rank(),
              ctx.outputs[0].as<float>());
    return absl::OkStatus();
  }

 private:
  Communicator* const comm_;
};

class AllGatherInPlaceKernel : public Kernel {
 public:
  AllGatherInPlaceKernel(const Node& node, Communicator* comm) : name_(node.name), comm_(comm) {}

  absl::Status Run(KernelContext& ctx) override {
    const int world = comm_->size();
    const size_t tensors = ctx.inputs.size() / 2;
    int64_t per_rank = 0;
    for (size_t i = 0; i < tensors; ++i) per_rank += ctx.inputs[i].num_elements();
    mine_.resize(static_cast<size_t>(per_rank));
    all_.resize(static_cast<size_t>(per_rank) * world);
    float* at = mine_.data();
    for (size_t i = 0; i < tensors; ++i) {
      const int64_t n = ctx.inputs[i].num_elements();
      std::memcpy(at, ctx.inputs[i].data, n * sizeof(float));
      at += n;
    }
    absl::Status s = comm_->AllGatherFloats(mine_.data(), all_.data(), per_rank,
                                            absl::StrCat("'", name_, "' at step ", ctx.step + 1));
    if (!s.ok()) return s;
    for (int r = 0; r < world; ++r) {
      const float* chunk = all_.data() + static_cast<size_t>(r) * per_rank;
      for (size_t i = 0; i < tensors; ++i) {
        TensorView& whole = ctx.inputs[tensors + i];
        const ShardRange range = ShardRangeOf(whole.num_elements(), world, r);
        std::copy_n(chunk, range.count, whole.as<float>() + range.begin);
        chunk += ctx.inputs[i].num_elements();
      }
    }
    return absl::OkStatus();
  }

 private:
  const std::string name_;
  Communicator* const comm_;
  std::vector<float> mine_, all_;
};

// ZeRO-3's AllGather: every rank's slice end to end, the padding dropped. A bf16/fp16 slice
// travels as its bytes (in float-sized words: the communicator moves floats).
class AllGatherKernel : public Kernel {
 public:
  AllGatherKernel(const Node& node, Communicator* comm) : name_(node.name), comm_(comm) {}

  absl::Status Run(KernelContext& ctx) override {
    const TensorView& slice = ctx.inputs[0];
    TensorView& whole = ctx.outputs[0];
    const size_t element = DTypeSize(whole.dtype);
    const size_t slice_bytes = static_cast<size_t>(slice.num_elements()) * element;
    const int64_t words = static_cast<int64_t>((slice_bytes + sizeof(float) - 1) / sizeof(float));
    mine_.assign(static_cast<size_t>(words), 0.0f);
    all_.resize(static_cast<size_t>(words) * comm_->size());
    std::memcpy(mine_.data(), slice.data, slice_bytes);
    absl::Status s =
        comm_->AllGatherFloats(mine_.data(), all_.data(), words, absl::StrCat("'", name_, "' at step ", ctx.step + 1));
    if (!s.ok()) return s;
    char* out = static_cast<char*>(whole.data);
    size_t left = static_cast<size_t>(whole.num_elements()) * element;
    for (int r = 0; r < comm_->size() && left > 0; ++r) {
      const size_t n = std::min(left, slice_bytes);
      std::memcpy(out, all_.data() + static_cast<size_t>(r) * words, n);
      out += n;
      left -= n;
    }
    return absl::OkStatus();
  }

 private:
  const std::string name_;
  Communicator* const comm_;
  std::vector<float> mine_, all_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateZeroKernel(const Node& node, Backend& backend) {
  absl::StatusOr<Communicator*> comm = CommunicatorFor(node, backend);
  if (!comm.ok()) return comm.status();
  if (node.op == "ReduceScatter") return std::unique_ptr<Kernel>(new ReduceScatterKernel(node, *comm));
  if (node.op == "Shard") return std::unique_ptr<Kernel>(new ShardKernel(*comm));
  if (node.op == "AllGather") return std::unique_ptr<Kernel>(new AllGatherKernel(node, *comm));
  return std::unique_ptr<Kernel>(new AllGatherInPlaceKernel(node, *comm));
}

}  // namespace

void RegisterCpuCollectiveKernels(KernelRegistry& r) {
  r.Register("ReduceScatter", "cpu", DType::kF32, CreateZeroKernel);
  r.Register("Shard", "cpu", DType::kF32, CreateZeroKernel);
  r.Register("AllGatherInPlace", "cpu", DType::kF32, CreateZeroKernel);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) r.Register("AllGather", "cpu", t, CreateZeroKernel);
  r.Register("AllReduce", "cpu", DType::kF32, CreateAllReduce);
  r.Register("AllReduceInPlace", "cpu", DType::kF32, CreateAllReduce);
}

}  // namespace mpc

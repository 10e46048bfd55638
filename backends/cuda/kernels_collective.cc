// CUDA kernels of the collective ops (graph/ops_collective.cc) on NCCL: AllReduce packs its
// bucket into one device buffer, reduces it with one ncclAllReduce on the backend's stream
// (so it is ordered with the kernels around it and a captured step records it), and
// unpacks. NCCL's communicator is the backend's (CudaBackend::Nccl), set up over MPI.
// The hold flag of an accumulating program lives on the device; reading it would stall
// the stream, so on CUDA every micro-batch reduces (the held results are never applied).
// ZeRO-1's ReduceScatter and AllGatherInPlace pack their buckets rank-major (graph/
// sharding.h) with device copies around one ncclReduceScatter / ncclAllGather.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "base/status_macros.h"
#include "distributed/communicator.h"
#include "graph/sharding.h"

#ifdef MPC_WITH_NCCL
#include <nccl.h>
#endif

namespace mpc::cuda {

#ifdef MPC_WITH_NCCL
namespace {

absl::Status NcclStatus(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", ncclGetErrorString(r)));
}

}  // namespace

absl::StatusOr<void*> CudaBackend::Nccl() {
  if (nccl_) return nccl_.get();
  Communicator* world = communicator();
  if (!world) {
    return absl::FailedPreconditionError(
        "NCCL: this process is not part of a data-parallel job (start it with mpirun -np N)");
  }
  // Rank 0's unique id, to every rank over MPI.
  ncclUniqueId id;
  if (world->rank() == 0) MPC_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  const std::string mine(reinterpret_cast<const char*>(&id), world->rank() == 0 ? sizeof(id) : 0);
  MPC_ASSIGN_OR_RETURN(std::vector<std::string> all, world->AllGather(mine, "'NCCL unique id' at start"));
  if (all.empty() || all[0].size() != sizeof(id)) {
    return absl::InternalError("NCCL: rank 0's unique id did not arrive whole");
  }
  std::memcpy(&id, all[0].data(), sizeof(id));
  MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device()));
  ncclComm_t comm = nullptr;
  MPC_RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&comm, world->size(), id, world->rank()),
                                 absl::StrCat("ncclCommInitRank (rank ", world->rank(), " of ", world->size(), ")")));
  nccl_ = std::shared_ptr<void>(comm, [](void* c) { ncclCommDestroy(static_cast<ncclComm_t>(c)); });
  return nccl_.get();
}

absl::Status CudaBackend::NcclSumInPlace(double* data, size_t count, const std::string& what) {
  MPC_ASSIGN_OR_RETURN(void* comm, Nccl());
  return NcclStatus(ncclAllReduce(data, data, count, ncclFloat64, ncclSum, static_cast<ncclComm_t>(comm), stream()),
                    absl::StrCat("ncclAllReduce ", what));
}
#else
absl::StatusOr<void*> CudaBackend::Nccl() {
  return absl::FailedPreconditionError(
      "this mpc was built without NCCL (libnccl was not found beside the CUDA toolkit), so data-parallel jobs run "
      "on the CPU only: use --device cpu, or rebuild with NCCL");
}

absl::Status CudaBackend::NcclSumInPlace(double*, size_t, const std::string&) { return Nccl().status(); }
#endif

namespace {

class CudaAllReduce : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    if (!backend.communicator()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "AllReduce '", node.name,
          "': this program was compiled for data-parallel training but the process is not part of a job; start it "
          "with mpirun -np N"));
    }
    MPC_ASSIGN_OR_RETURN(void* comm, cuda->Nccl());
    auto k = std::unique_ptr<CudaAllReduce>(new CudaAllReduce(cuda));
    k->comm_ = comm;
    k->name_ = node.name;
    k->in_place_ = node.op == "AllReduceInPlace";
    const std::string reduce = node.attrs.GetString("reduce", k->in_place_ ? "max" : "mean");
    k->op_ = reduce == "max" ? 2 : reduce == "sum" ? 1 : 0;
    const size_t tensors = k->in_place_ ? node.inputs.size() : node.outputs.size();
    for (size_t i = 0; i < tensors; ++i) k->total_ += NumElements(node.inputs[i]->shape);
    MPC_ASSIGN_OR_RETURN(k->buffer_, backend.Allocate(static_cast<size_t>(k->total_) * sizeof(float)));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  ~CudaAllReduce() override {
    if (buffer_) cuda_->Free(buffer_);
  }

  absl::Status Run(KernelContext& ctx) override {
#ifdef MPC_WITH_NCCL
    cudaStream_t stream = cuda_->stream();
    std::vector<TensorView>& results = in_place_ ? ctx.inputs : ctx.outputs;
    char* packed = static_cast<char*>(buffer_);
    size_t at = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      const size_t bytes = static_cast<size_t>(ctx.inputs[i].num_elements()) * sizeof(float);
      MPC_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(packed + at, ctx.inputs[i].data, bytes, cudaMemcpyDeviceToDevice, stream));
      at += bytes;
    }
    const ncclRedOp_t op = op_ == 2 ? ncclMax : op_ == 1 ? ncclSum : ncclAvg;
    MPC_RETURN_IF_ERROR(NcclStatus(ncclAllReduce(buffer_, buffer_, static_cast<size_t>(total_), ncclFloat32, op,
                                                 static_cast<ncclComm_t>(comm_), stream),
                                   absl::StrCat("ncclAllReduce '", name_, "'")));
    at = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      const size_t bytes = static_cast<size_t>(results[i].num_elements()) * sizeof(float);
      MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(results[i].data, packed + at, bytes, cudaMemcpyDeviceToDevice, stream));
      at += bytes;
    }
    return absl::OkStatus();
#else
    return absl::FailedPreconditionError("AllReduce: this mpc was built without NCCL");
#endif
  }

 private:
  explicit CudaAllReduce(CudaBackend* cuda) : cuda_(cuda) {}
  CudaBackend* cuda_;
  void* comm_ = nullptr;
  std::string name_;
  int op_ = 0;  // 0 mean, 1 sum, 2 max
  bool in_place_ = false;
  int64_t total_ = 0;
  void* buffer_ = nullptr;
};

// Device copy of `rank`'s slice of `n` floats, zero-padded to the shard length.
absl::Status CopySlice(const float* whole, int64_t n, int world, int rank, float* slice, cudaStream_t stream) {
  const ShardRange range = ShardRangeOf(n, world, rank);
  if (range.count > 0) {
    MPC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(slice, whole + range.begin, range.count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
  const int64_t pad = ShardLength(n, world) - range.count;
  if (pad > 0) MPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(slice + range.count, 0, pad * sizeof(float), stream));
  return absl::OkStatus();
}

// The job's communicator, of the world size the node was compiled for.
absl::StatusOr<Communicator*> JobOf(const Node& node, Backend& backend) {
  Communicator* world = backend.communicator();
  if (!world || world->size() != node.attrs.GetInt("world_size", 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        node.op, " '", node.name, "' was compiled for a data-parallel job of ", node.attrs.GetInt("world_size", 0),
        " ranks; start it with mpirun -np ", node.attrs.GetInt("world_size", 0)));
  }
  return world;
}

// ReduceScatter, Shard and AllGatherInPlace (graph/ops_collective.cc).
class CudaZeroCollective : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    MPC_ASSIGN_OR_RETURN(Communicator * world, JobOf(node, backend));
    auto k = std::unique_ptr<CudaZeroCollective>(new CudaZeroCollective(cuda, world));
    k->name_ = node.name;
    k->op_ = node.op;
    if (node.op == "Shard") return std::unique_ptr<Kernel>(std::move(k));
    MPC_ASSIGN_OR_RETURN(k->comm_, cuda->Nccl());
    const bool scatter = node.op == "ReduceScatter";
    const size_t tensors = scatter ? node.outputs.size() : node.inputs.size() / 2;
    for (size_t i = 0; i < tensors; ++i) {
      k->per_rank_ += ShardLength(NumElements(node.inputs[scatter ? i : tensors + i]->shape), world->size());
    }
    // Rank-major: size() chunks of per_rank_, then (ReduceScatter) this rank's reduced chunk.
    const size_t floats = static_cast<size_t>(k->per_rank_) * (world->size() + (scatter ? 1 : 0));
    MPC_ASSIGN_OR_RETURN(k->buffer_, backend.Allocate(std::max<size_t>(floats, 1) * sizeof(float)));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  ~CudaZeroCollective() override {
    if (buffer_) cuda_->Free(buffer_);
  }

  absl::Status Run(KernelContext& ctx) override {
    cudaStream_t stream = cuda_->stream();
    const int world = world_->size(), rank = world_->rank();
    if (op_ == "Shard") {
      return CopySlice(ctx.inputs[0].as<float>(), ctx.inputs[0].num_elements(), world, rank, ctx.outputs[0].as<float>(),
                       stream);
    }
#ifdef MPC_WITH_NCCL
    float* chunks = static_cast<float*>(buffer_);
    if (op_ == "ReduceScatter") {
      const size_t tensors = ctx.outputs.size();
      for (int r = 0; r < world; ++r) {
        float* at = chunks + static_cast<size_t>(r) * per_rank_;
        for (size_t i = 0; i < tensors; ++i) {
          MPC_RETURN_IF_ERROR(CopySlice(ctx.inputs[i].as<float>(), ctx.inputs[i].num_elements(), world, r, at, stream));
          at += ctx.outputs[i].num_elements();
        }
      }
      float* reduced = chunks + static_cast<size_t>(world) * per_rank_;
      MPC_RETURN_IF_ERROR(NcclStatus(ncclReduceScatter(chunks, reduced, static_cast<size_t>(per_rank_), ncclFloat32,
                                                       ncclSum, static_cast<ncclComm_t>(comm_), stream),
                                     absl::StrCat("ncclReduceScatter '", name_, "'")));
      for (size_t i = 0; i < tensors; ++i) {
        const size_t bytes = static_cast<size_t>(ctx.outputs[i].num_elements()) * sizeof(float);
        MPC_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(ctx.outputs[i].data, reduced, bytes, cudaMemcpyDeviceToDevice, stream));
        reduced += ctx.outputs[i].num_elements();
      }
      return absl::OkStatus();
    }
    // AllGatherInPlace: this rank's slices packed into its chunk, gathered, unpacked.
    const size_t tensors = ctx.inputs.size() / 2;
    float* mine = chunks + static_cast<size_t>(rank) * per_rank_;
    for (size_t i = 0; i < tensors; ++i) {
      const size_t bytes = static_cast<size_t>(ctx.inputs[i].num_elements()) * sizeof(float);
      MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mine, ctx.inputs[i].data, bytes, cudaMemcpyDeviceToDevice, stream));
      mine += ctx.inputs[i].num_elements();
    }
    MPC_RETURN_IF_ERROR(
        NcclStatus(ncclAllGather(chunks + static_cast<size_t>(rank) * per_rank_, chunks, static_cast<size_t>(per_rank_),
                                 ncclFloat32, static_cast<ncclComm_t>(comm_), stream),
                   absl::StrCat("ncclAllGather '", name_, "'")));
    for (int r = 0; r < world; ++r) {
      const float* at = chunks + static_cast<size_t>(r) * per_rank_;
      for (size_t i = 0; i < tensors; ++i) {
        TensorView& whole = ctx.inputs[tensors + i];
        const ShardRange range = ShardRangeOf(whole.num_elements(), world, r);
        if (range.count > 0) {
          MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(whole.as<float>() + range.begin, at, range.count * sizeof(float),
                                                   cudaMemcpyDeviceToDevice, stream));
        }
        at += ctx.inputs[i].num_elements();
      }
    }
    return absl::OkStatus();
#else
    return absl::FailedPreconditionError(absl::StrCat(op_, ": this mpc was built without NCCL"));
#endif
  }

 private:
  CudaZeroCollective(CudaBackend* cuda, Communicator* world) : cuda_(cuda), world_(world) {}
  CudaBackend* cuda_;
  Communicator* world_;
  void* comm_ = nullptr;
  std::string name_, op_;
  int64_t per_rank_ = 0;  // floats of one rank's chunk: the bucket's shard lengths
  void* buffer_ = nullptr;
};

// ZeRO-3's AllGather (graph/ops_collective.cc): the slices gathered end to end into a
// buffer of world x slice elements, the whole tensor its first n.
class CudaAllGather : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    MPC_ASSIGN_OR_RETURN(Communicator * world, JobOf(node, backend));
    auto k = std::unique_ptr<CudaAllGather>(new CudaAllGather(cuda));
    k->name_ = node.name;
    k->dtype_ = node.inputs[0]->dtype;
    k->slice_ = NumElements(node.inputs[0]->shape);
    MPC_ASSIGN_OR_RETURN(k->comm_, cuda->Nccl());
    const size_t bytes = static_cast<size_t>(k->slice_) * world->size() * DTypeSize(k->dtype_);
    MPC_ASSIGN_OR_RETURN(k->buffer_, backend.Allocate(std::max<size_t>(bytes, 1)));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  ~CudaAllGather() override {
    if (buffer_) cuda_->Free(buffer_);
  }

  absl::Status Run(KernelContext& ctx) override {
#ifdef MPC_WITH_NCCL
    cudaStream_t stream = cuda_->stream();
    const ncclDataType_t type = dtype_ == DType::kBF16  ? ncclBfloat16
                                : dtype_ == DType::kF16 ? ncclFloat16
                                                        : ncclFloat32;
    MPC_RETURN_IF_ERROR(NcclStatus(ncclAllGather(ctx.inputs[0].data, buffer_, static_cast<size_t>(slice_), type,
                                                 static_cast<ncclComm_t>(comm_), stream),
                                   absl::StrCat("ncclAllGather '", name_, "'")));
    const size_t bytes = static_cast<size_t>(ctx.outputs[0].num_elements()) * DTypeSize(dtype_);
    MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ctx.outputs[0].data, buffer_, bytes, cudaMemcpyDeviceToDevice, stream));
    return absl::OkStatus();
#else
    (void)ctx;
    return absl::FailedPreconditionError("AllGather: this mpc was built without NCCL");
#endif
  }

 private:
  explicit CudaAllGather(CudaBackend* cuda) : cuda_(cuda) {}
  CudaBackend* cuda_;
  void* comm_ = nullptr;
  std::string name_;
  DType dtype_ = DType::kF32;
  int64_t slice_ = 0;
  void* buffer_ = nullptr;
};

}  // namespace

void RegisterCudaCollectiveKernels(KernelRegistry& r) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) r.Register("AllGather", "cuda", t, CudaAllGather::Create);
  r.Register("ReduceScatter", "cuda", DType::kF32, CudaZeroCollective::Create);
  r.Register("Shard", "cuda", DType::kF32, CudaZeroCollective::Create);
  r.Register("AllGatherInPlace", "cuda", DType::kF32, CudaZeroCollective::Create);
  r.Register("AllReduce", "cuda", DType::kF32, CudaAllReduce::Create);
  r.Register("AllReduceInPlace", "cuda", DType::kF32, CudaAllReduce::Create);
}

}  // namespace mpc::cuda

// CUDA kernels of the collective ops (graph/ops_collective.cc) on NCCL: AllReduce packs its
// bucket into one device buffer, reduces it with one ncclAllReduce on the backend's stream
// (so it is ordered with the kernels around it and a captured step records it), and
// unpacks. NCCL's communicator is the backend's (CudaBackend::Nccl), set up over MPI.
// The hold flag of an accumulating program lives on the device; reading it would stall
// the stream, so on CUDA every micro-batch reduces (the held results are never applied).
#include <cuda_runtime_api.h>

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
#else
absl::StatusOr<void*> CudaBackend::Nccl() {
  return absl::FailedPreconditionError(
      "this mpc was built without NCCL (libnccl was not found beside the CUDA toolkit), so data-parallel jobs run "
      "on the CPU only: use --device cpu, or rebuild with NCCL");
}
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

}  // namespace

void RegisterCudaCollectiveKernels(KernelRegistry& r) {
  r.Register("AllReduce", "cuda", DType::kF32, CudaAllReduce::Create);
  r.Register("AllReduceInPlace", "cuda", DType::kF32, CudaAllReduce::Create);
}

}  // namespace mpc::cuda

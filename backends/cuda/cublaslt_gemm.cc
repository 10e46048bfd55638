// CublasLtGemm and the Gemm kernels (f32, bf16, f16) on it.
#include "backends/cuda/cublaslt_gemm.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_status.h"
#include "base/status_macros.h"

namespace mpc::cuda {
namespace {

absl::StatusOr<cudaDataType_t> CudaType(DType d) {
  switch (d) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return absl::UnimplementedError(absl::StrCat("cuBLASLt GEMM: dtype ", DTypeName(d), " not supported yet"));
  }
}

template <typename T>
absl::Status SetDescAttr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v, const char* what) {
  return CublasStatus(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), what);
}

}  // namespace

CublasLtGemm::~CublasLtGemm() {
  if (lt_d_) cublasLtMatrixLayoutDestroy(lt_d_);
  if (lt_b_) cublasLtMatrixLayoutDestroy(lt_b_);
  if (lt_a_) cublasLtMatrixLayoutDestroy(lt_a_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
}

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(CudaBackend& backend, const LtGemmSpec& s) {
  std::unique_ptr<CublasLtGemm> g(new CublasLtGemm());
  g->backend_ = &backend;
  g->alpha_ = s.alpha;
  g->bias_ = s.bias;
  MPC_ASSIGN_OR_RETURN(g->lt_, backend.CublasLt());
  MPC_ASSIGN_OR_RETURN(cudaDataType_t ab_type, CudaType(s.operand));
  MPC_ASSIGN_OR_RETURN(cudaDataType_t d_type, CudaType(s.out));

  const cublasComputeType_t compute =
      s.tf32 && s.operand == DType::kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&g->desc_, compute, CUDA_R_32F));
  // Swapped operands: cuBLASLt's A is our B (op = tb), its B is our A (op = ta).
  const cublasOperation_t op_a = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_TRANSA, op_a, "cublasLtMatmulDescSetAttribute(TRANSA)"));
  MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_TRANSB, op_b, "cublasLtMatmulDescSetAttribute(TRANSB)"));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (s.bias) epi = s.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (s.relu) epi = CUBLASLT_EPILOGUE_RELU;
  MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, epi, "cublasLtMatmulDescSetAttribute(EPILOGUE)"));
  if (s.bias && s.bias_dtype != s.out) {
    MPC_ASSIGN_OR_RETURN(cudaDataType_t bias_type, CudaType(s.bias_dtype));
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type,
                                    "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)"));
  }

  // Stored matrices in column-major terms. Our row-major B: [K,N] (tb=0) is the
  // column-major N x K with ld N; [N,K] (tb=1) is K x N with ld K. Likewise A.
  const uint64_t a_rows = s.tb ? s.k : s.n, a_cols = s.tb ? s.n : s.k;
  const uint64_t b_rows = s.ta ? s.m : s.k, b_cols = s.ta ? s.k : s.m;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&g->lt_a_, ab_type, a_rows, a_cols, a_rows));
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&g->lt_b_, ab_type, b_rows, b_cols, b_rows));
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&g->lt_d_, d_type, s.n, s.m, s.n));

  cublasLtMatmulPreference_t pref = nullptr;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  g->workspace_bytes_ = CudaBackend::kCublasLtWorkspaceBytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &g->workspace_bytes_, sizeof(g->workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(g->lt_, g->desc_, g->lt_a_, g->lt_b_, g->lt_d_, g->lt_d_, pref, 1, &result,
                                        &returned);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  const std::string what = absl::StrCat("M=", s.m, " N=", s.n, " K=", s.k, " tA=", s.ta, " tB=", s.tb, ", ",
                                        DTypeName(s.operand), " operands, ", DTypeName(s.out), " output",
                                        s.bias ? absl::StrCat(", ", DTypeName(s.bias_dtype), " bias") : "",
                                        s.relu ? ", ReLU" : "", s.tf32 ? ", TF32" : "");
  if (st != CUBLAS_STATUS_SUCCESS) {
    return CublasStatus(st, absl::StrCat("cublasLtMatmulAlgoGetHeuristic(", what, ")").c_str());
  }
  if (returned == 0) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt offers no algorithm for ", what));
  }
  g->algo_ = result.algo;
  return g;
}

absl::Status CublasLtGemm::Run(const void* a, const void* b, const void* bias, void* y) {
  if (bias_) {
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias,
                                    "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  }
  // Swapped: cuBLASLt's A is our B, its B our A; C aliases D with beta = 0.
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt_, desc_, &alpha_, b, lt_a_, a, lt_b_, &beta_, y, lt_d_, y, lt_d_,
                                            &algo_, backend_->cublaslt_workspace(), workspace_bytes_,
                                            backend_->stream()));
  return absl::OkStatus();
}

namespace {

class CudaGemmKernel : public Kernel {
 public:
  explicit CudaGemmKernel(std::unique_ptr<CublasLtGemm> gemm, bool bias) : gemm_(std::move(gemm)), bias_(bias) {}
  absl::Status Run(KernelContext& ctx) override {
    const void* bias = bias_ ? ctx.inputs[2].data : nullptr;
    return gemm_->Run(ctx.inputs[0].data, ctx.inputs[1].data, bias, ctx.outputs[0].data);
  }

 private:
  std::unique_ptr<CublasLtGemm> gemm_;
  bool bias_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateGemm(const Node& node, Backend& backend) {
  MPC_ASSIGN_OR_RETURN(CudaBackend* cuda, AsCuda(backend));
  const Shape& a = node.inputs[0]->shape;
  const Shape& b = node.inputs[1]->shape;
  const Shape& y = node.outputs[0]->shape;
  if (a.size() != 2 || b.size() != 2 || y.size() != 2) {
    return absl::UnimplementedError("Gemm with operands of rank other than 2 is not yet on CUDA");
  }
  LtGemmSpec s;
  s.ta = node.attrs.GetInt("transA", 0) != 0;
  s.tb = node.attrs.GetInt("transB", 0) != 0;
  s.m = y[0];
  s.n = y[1];
  s.k = s.ta ? a[0] : a[1];
  s.alpha = node.attrs.GetFloat("alpha", 1.0f);
  const float beta = node.attrs.GetFloat("beta", 1.0f);
  const std::string act = node.attrs.GetString("mpc_activation", "");
  if (!act.empty() && act != "Relu") {
    return absl::UnimplementedError(absl::StrCat("Gemm with mpc_activation=", act, " is not yet on CUDA"));
  }
  s.relu = act == "Relu";
  s.tf32 = node.attrs.GetInt("mpc_tf32", 0) != 0 && cuda->capabilities().tf32;
  s.operand = node.inputs[0]->dtype;
  s.out = node.outputs[0]->dtype;
  if (node.inputs[1]->dtype != s.operand) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm operands differ in dtype: ", DTypeName(s.operand), " and ",
                                                   DTypeName(node.inputs[1]->dtype)));
  }
  if (s.out != s.operand && s.out != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("Gemm with ", DTypeName(s.operand), " operands and ",
                                                 DTypeName(s.out), " output is not yet on CUDA"));
  }
  const Value* c = node.inputs.size() > 2 ? node.inputs[2] : nullptr;
  if (c && beta != 0.0f) {
    const bool row = c->shape == Shape{s.n} || c->shape == Shape{1, s.n};
    if (!row || beta != 1.0f) {
      return absl::UnimplementedError(absl::StrCat(
          "Gemm with C of shape ", ShapeToString(c->shape), " and beta=", beta,
          " is not yet on CUDA (only a row bias [N] or [1,N] with beta=1, via the bias epilogue)"));
    }
    s.bias = true;
    s.bias_dtype = c->dtype;
  }
  MPC_ASSIGN_OR_RETURN(auto gemm, CublasLtGemm::Create(*cuda, s));
  return std::unique_ptr<Kernel>(new CudaGemmKernel(std::move(gemm), s.bias));
}

}  // namespace
}  // namespace mpc::cuda

namespace mpc {

void RegisterCudaGemmKernels(KernelRegistry& r) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    r.Register("Gemm", "cuda", d, cuda::CreateGemm);
  }
}

}  // namespace mpc

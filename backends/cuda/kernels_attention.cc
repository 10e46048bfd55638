// CUDA FusedAttention and FusedAttentionGrad (graph/ops_attention.cc) in bf16 and f16 on
// cuDNN's fused flash attention (scaled dot-product attention, "SDPA"), reached through
// cudnn-frontend's graph API (header-only, pinned in scripts/deps/cudnn-frontend.txt):
//   FusedAttention      cuDNN's SDPA forward in training mode: Y, and the softmax statistics
//                       cuDNN keeps for its backward, Stats_i = log sum_j exp(s_ij) in f32
//                       (natural log), which is the op's Stats ([B,H,Sq] here, [B,H,Sq,1] in
//                       cuDNN: the same memory).
//   FusedAttentionGrad  cuDNN's SDPA backward from dY, Q, K, V, Y and Stats: dQ, dK, dV (the
//                       bias gets no gradient).
// cuDNN scales the scores, adds the bias, then masks (causal: cuDNN's diagonal band with
// right bound 0, top-left aligned, PyTorch's is_causal), as the op defines s_ij. Internally
// f32 (scores, softmax, accumulation), rounded once to the output dtype.
//
// Operands: Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv], row-major, D and Dv multiples of 8 up
// to 256: what fuse-attention makes; anything else is an error naming the shape. No f32
// kernel: cuDNN's fused attention is 16-bit only, and fuse-attention asks HasKernel for the
// dtype, so f32 attention stays the unfused chain on CUDA.
//
// Bias: cuDNN reads a bias [1 or B, 1 or H, Sq, Sk] whose rows start 16-byte aligned. Any
// other broadcast shape (a key-padding mask [B,1,1,Sk], a single row [1,1,1,Sk]), or Sk not a
// multiple of 8, is first laid out that way (rows padded to 8 elements) by a copy
// (attention_bias.cu) into scratch, every step: its values may change from step to step.
//
// Plans: building a cuDNN plan takes tens of milliseconds or more, so it happens when the
// kernel is created, and the plans live in a cache on the backend keyed by everything they
// depend on (direction, dtype, shapes, scale bits, causal, bias layout, determinism): the
// layers of a model with the same attention share one plan, and a step builds nothing. Run
// only enqueues work on the backend's stream, so a step with attention can be captured
// as a CUDA graph.
//
// Scratch: cuDNN's workspace and the laid-out bias are pieces of the backend's one
// convolution scratch buffer (kernels run one after another on the stream), reserved at
// creation.
//
// Determinism: the backward asks for cuDNN's deterministic algorithm first (results that
// repeat from run to run, as the CPU's and the convolutions' do) and takes the other one
// where cuDNN has no deterministic plan for the case; MPC_CUDA_ATTENTION_DETERMINISTIC=0
// asks for the fastest only.
//
// Not verified on a device yet: rows whose every position is masked (an all -inf bias row);
// the CPU reference gives Y = 0 and Stats = -inf there.
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/attention_bias.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "base/status_macros.h"

namespace mpc::cuda {
namespace {

namespace fe = cudnn_frontend;

constexpr char kForwardOp[] = "FusedAttention";
constexpr char kBackwardOp[] = "FusedAttentionGrad";
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kRowAlign = 8;  // elements: 16 bytes of bf16 / f16

// The variant pack's ids of the graph's tensors.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kBias, kDO, kDQ, kDK, kDV };

// Everything a plan depends on, read from the node.
struct Problem {
  bool backward = false;
  DType dtype = DType::kBF16;
  int64_t b = 0, h = 0, sq = 0, sk = 0, d = 0, dv = 0;
  float scale = 1;
  bool causal = false;
  bool has_bias = false;
  Shape bias_shape;    // the node's bias, left-padded to rank 4
  int64_t bias_b = 1;  // the bias cuDNN reads: [bias_b, bias_h, sq, sk] ...
  int64_t bias_h = 1;
  int64_t bias_row = 0;        // ... with rows bias_row elements apart
  bool bias_laid_out = false;  // copied into scratch first (else read where it is)
  bool deterministic = false;  // asked for (backward)

  std::string Key() const {
    uint32_t scale_bits = 0;
    std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
    return absl::StrCat(backward ? "bwd" : "fwd", "|", DTypeName(dtype), "|", b, ",", h, ",", sq, ",", sk, ",", d, ",",
                        dv, "|", scale_bits, "|", causal, "|",
                        has_bias ? absl::StrCat(bias_b, ",", bias_h, ",", bias_row) : "-", "|", deterministic);
  }

  std::string Describe() const {
    return absl::StrCat(
        backward ? kBackwardOp : kForwardOp, " of Q [", b, ",", h, ",", sq, ",", d, "], K [", b, ",", h, ",", sk, ",",
        d, "], V [", b, ",", h, ",", sk, ",", dv, "], ", DTypeName(dtype), ", scale ", absl::StrFormat("%g", scale),
        causal ? ", causal" : "",
        has_bias ? absl::StrCat(", bias ", ShapeToString(bias_shape), bias_laid_out ? " (laid out for cuDNN)" : "")
                 : "");
  }
};

// A built cuDNN graph (one execution plan) and the workspace it needs.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
};

// The backend's plans (CudaBackend::attention_plans()).
struct PlanCache {
  std::mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<const Plan>> plans;
};

const char* FeCodeName(fe::error_code_t c) {
  switch (c) {
    case fe::error_code_t::OK:
      return "OK";
    case fe::error_code_t::ATTRIBUTE_NOT_SET:
      return "ATTRIBUTE_NOT_SET";
    case fe::error_code_t::SHAPE_DEDUCTION_FAILED:
      return "SHAPE_DEDUCTION_FAILED";
    case fe::error_code_t::INVALID_TENSOR_NAME:
      return "INVALID_TENSOR_NAME";
    case fe::error_code_t::INVALID_VARIANT_PACK:
      return "INVALID_VARIANT_PACK";
    case fe::error_code_t::GRAPH_NOT_SUPPORTED:
      return "GRAPH_NOT_SUPPORTED";
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
      return "GRAPH_EXECUTION_PLAN_CREATION_FAILED";
    case fe::error_code_t::GRAPH_EXECUTION_FAILED:
      return "GRAPH_EXECUTION_FAILED";
    case fe::error_code_t::HEURISTIC_QUERY_FAILED:
      return "HEURISTIC_QUERY_FAILED";
    case fe::error_code_t::UNSUPPORTED_GRAPH_FORMAT:
      return "UNSUPPORTED_GRAPH_FORMAT";
    case fe::error_code_t::CUDA_API_FAILED:
      return "CUDA_API_FAILED";
    case fe::error_code_t::CUDNN_BACKEND_API_FAILED:
      return "CUDNN_BACKEND_API_FAILED";
    case fe::error_code_t::INVALID_CUDA_DEVICE:
      return "INVALID_CUDA_DEVICE";
    case fe::error_code_t::HANDLE_ERROR:
      return "HANDLE_ERROR";
    case fe::error_code_t::INVALID_VALUE:
      return "INVALID_VALUE";
    case fe::error_code_t::NVRTC_COMPILATION_FAILED:
      return "NVRTC_COMPILATION_FAILED";
  }
  return "unknown";
}

// cudnn-frontend's error -> absl::Status. Configurations cuDNN has no plan for are
// Unimplemented (the case is reported, not retried), bad inputs InvalidArgument.
absl::Status FeStatus(fe::error_t e, const std::string& what, const char* step) {
  if (e.is_good()) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (e.get_code()) {
    case fe::error_code_t::GRAPH_NOT_SUPPORTED:
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
    case fe::error_code_t::HEURISTIC_QUERY_FAILED:
    case fe::error_code_t::NVRTC_COMPILATION_FAILED:
      code = absl::StatusCode::kUnimplemented;
      break;
    case fe::error_code_t::ATTRIBUTE_NOT_SET:
    case fe::error_code_t::SHAPE_DEDUCTION_FAILED:
    case fe::error_code_t::INVALID_VARIANT_PACK:
    case fe::error_code_t::INVALID_VALUE:
      code = absl::StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(what, ": cuDNN (cudnn-frontend ", CUDNN_FRONTEND_VERSION / 10000, ".",
                                         CUDNN_FRONTEND_VERSION / 100 % 100, ", cuDNN library ", cudnnGetVersion(),
                                         ") ", step, " failed: ", FeCodeName(e.get_code()), ": ", e.get_message()));
}

std::vector<int64_t> Dense(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

// Builds the cuDNN graph of `p` with `deterministic` (backward) on `handle`: validation,
// the backend's operation graph, heuristics (mode A, then the fallback list) and the
// first plan that builds.
absl::StatusOr<std::shared_ptr<const Plan>> BuildPlan(const Problem& p, bool deterministic, cudnnHandle_t handle,
                                                      const std::string& what) {
  using fe::graph::Tensor_attributes;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(p.dtype == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, Uid uid, std::vector<int64_t> dims) {
    std::vector<int64_t> strides = Dense(dims);
    return g->tensor(Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dims)).set_stride(strides));
  };
  const std::vector<int64_t> q_dims = {p.b, p.h, p.sq, p.d}, k_dims = {p.b, p.h, p.sk, p.d},
                             v_dims = {p.b, p.h, p.sk, p.dv}, o_dims = {p.b, p.h, p.sq, p.dv},
                             stats_dims = {p.b, p.h, p.sq, 1};
  auto Q = tensor("Q", kQ, q_dims);
  auto K = tensor("K", kK, k_dims);
  auto V = tensor("V", kV, v_dims);
  std::shared_ptr<Tensor_attributes> bias;
  if (p.has_bias) {
    bias = g->tensor(Tensor_attributes()
                         .set_name("Bias")
                         .set_uid(kBias)
                         .set_dim({p.bias_b, p.bias_h, p.sq, p.sk})
                         .set_stride({p.bias_h * p.sq * p.bias_row, p.sq * p.bias_row, p.bias_row, 1}));
  }
  if (!p.backward) {
    auto options =
        fe::graph::SDPA_attributes().set_name("mpc_attention").set_generate_stats(true).set_attn_scale(p.scale);
    if (p.causal) {
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    }
    if (bias) options.set_bias(bias);
    auto [O, stats] = g->sdpa(Q, K, V, options);
    O->set_output(true).set_uid(kO).set_dim(o_dims).set_stride(Dense(o_dims));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims)
        .set_stride(Dense(stats_dims));
  } else {
    auto O = tensor("O", kO, o_dims);
    auto dO = tensor("dO", kDO, o_dims);
    auto stats = tensor("Stats", kStats, stats_dims);
    stats->set_data_type(fe::DataType_t::FLOAT);
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("mpc_attention_backward")
                       .set_attn_scale(p.scale)
                       .set_deterministic_algorithm(deterministic);
    if (p.causal) {
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    }
    if (bias) options.set_bias(bias);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, options);
    dQ->set_output(true).set_uid(kDQ).set_dim(q_dims).set_stride(Dense(q_dims));
    dK->set_output(true).set_uid(kDK).set_dim(k_dims).set_stride(Dense(k_dims));
    dV->set_output(true).set_uid(kDV).set_dim(v_dims).set_stride(Dense(v_dims));
  }
  MPC_RETURN_IF_ERROR(
      FeStatus(g->build(handle, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), what, "building the plan"));
  auto plan = std::make_shared<Plan>();
  MPC_RETURN_IF_ERROR(FeStatus(g->get_workspace_size(plan->workspace_bytes), what, "get_workspace_size"));
  plan->graph = std::move(g);
  return std::shared_ptr<const Plan>(std::move(plan));
}

// The plan of `p` from the backend's cache, built on a miss. The backward tries the
// deterministic algorithm first when p asks for it.
absl::StatusOr<std::shared_ptr<const Plan>> CachedPlan(CudaBackend& cuda, const Problem& p, cudnnHandle_t handle,
                                                       const std::string& what) {
  std::shared_ptr<void>& slot = cuda.attention_plans();
  if (!slot) slot = std::make_shared<PlanCache>();
  auto* cache = static_cast<PlanCache*>(slot.get());
  const std::string key = p.Key();
  std::lock_guard<std::mutex> lock(cache->mu);
  if (auto it = cache->plans.find(key); it != cache->plans.end()) return it->second;
  absl::StatusOr<std::shared_ptr<const Plan>> plan;
  // cudnn-frontend reports through its return values, but its lower layers may throw
  // (std::bad_alloc, a cudnnException): nothing may escape into the engine.
  try {
    plan = BuildPlan(p, p.deterministic, handle, what);
    // Any failure: cuDNN may say "not supported" at any step (support surface, heuristics,
    // the backend's finalize), not always with the same code.
    if (!plan.ok() && p.backward && p.deterministic) {
      absl::StatusOr<std::shared_ptr<const Plan>> fallback = BuildPlan(p, false, handle, what);
      if (fallback.ok()) {
        plan = std::move(fallback);
      } else {
        plan = absl::Status(fallback.status().code(),
                            absl::StrCat(fallback.status().message(),
                                         " (and with the deterministic algorithm: ", plan.status().message(), ")"));
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": cudnn-frontend threw while building the plan: ", e.what()));
  }
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        absl::StrCat(plan.status().message(),
                                     ". cuDNN has no fused-attention plan for this case on this device and library; "
                                     "the shapes and versions above say which (fuse-attention should not have "
                                     "made this op for this backend: report it)"));
  }
  cache->plans.emplace(key, *plan);
  return *plan;
}

// MPC_CUDA_ATTENTION_DETERMINISTIC: 1 (default) or 0.
absl::StatusOr<bool> WantDeterministic() {
  const char* env = std::getenv("MPC_CUDA_ATTENTION_DETERMINISTIC");
  if (!env || std::string(env) == "1" || std::string(env).empty()) return true;
  if (std::string(env) == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat("MPC_CUDA_ATTENTION_DETERMINISTIC is '", env,
                                                 "'; use 1 (deterministic backward where cuDNN has one, the default) "
                                                 "or 0 (the fastest)"));
}

bool Present(const Node& node, size_t i) { return i < node.inputs.size() && node.inputs[i] != nullptr; }

absl::Status Bad(const Node& node, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("cuda ", node.op, " kernel for node '", node.name, "': ", what));
}

// Reads and checks the node: Q, K, V at inputs q, q+1, q+2, the bias at input `bias`.
absl::StatusOr<Problem> ProblemOf(const Node& node, bool backward) {
  const size_t q = backward ? 1 : 0, bias = backward ? 6 : 3;
  const size_t outputs = backward ? 3 : 2;
  if (!Present(node, q) || !Present(node, q + 1) || !Present(node, q + 2) || (backward && !Present(node, 0)) ||
      (backward && (!Present(node, 4) || !Present(node, 5))) || node.outputs.size() < outputs) {
    return Bad(node, backward ? "needs dY, Q, K, V, Y, Stats (and an optional Bias) and three outputs"
                              : "needs Q, K, V (and an optional Bias) and two outputs");
  }
  const Shape& qs = node.inputs[q]->shape;
  const Shape& ks = node.inputs[q + 1]->shape;
  const Shape& vs = node.inputs[q + 2]->shape;
  Problem p;
  p.backward = backward;
  p.dtype = node.inputs[q]->dtype;
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) {
    return absl::UnimplementedError(absl::StrCat("cuda ", node.op, " kernel for node '", node.name, "': dtype ",
                                                 DTypeName(p.dtype),
                                                 ": cuDNN's fused attention runs bf16 and f16 only (autocast the "
                                                 "attention to one of them; f32 attention runs unfused)"));
  }
  if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4 || ks[0] != qs[0] || vs[0] != qs[0] || ks[1] != qs[1] ||
      vs[1] != qs[1] || ks[3] != qs[3] || vs[2] != ks[2]) {
    return Bad(node, absl::StrCat("Q ", ShapeToString(qs), ", K ", ShapeToString(ks), " and V ", ShapeToString(vs),
                                  " are not [B,H,Sq,D], [B,H,Sk,D], [B,H,Sk,Dv]: cuDNN's fused attention takes rank-4 "
                                  "operands only (fuse-attention makes only those)"));
  }
  p.b = qs[0];
  p.h = qs[1];
  p.sq = qs[2];
  p.d = qs[3];
  p.sk = ks[2];
  p.dv = vs[3];
  for (int64_t dim : {p.d, p.dv}) {
    if (dim % kRowAlign != 0 || dim > kMaxHeadDim) {
      return Bad(node, absl::StrCat("head dims D = ", p.d, ", Dv = ", p.dv,
                                    ": cuDNN's fused attention needs multiples of 8 up to 256 (fuse-attention leaves "
                                    "other head dims unfused)"));
    }
  }
  if (p.b * p.h * p.sq * p.sk == 0 || p.d == 0) {
    return Bad(node, absl::StrCat("Q ", ShapeToString(qs), " and K ", ShapeToString(ks),
                                  " have an empty extent, which cuDNN's fused attention does not take"));
  }
  for (size_t i : {q + 1, q + 2}) {
    if (node.inputs[i]->dtype != p.dtype) return Bad(node, "Q, K and V must have one dtype");
  }
  const Shape o_shape = {p.b, p.h, p.sq, p.dv};
  if (backward) {
    const Value* dy = node.inputs[0];
    const Value* y = node.inputs[4];
    const Value* stats = node.inputs[5];
    if (dy->shape != o_shape || y->shape != o_shape || dy->dtype != p.dtype || y->dtype != p.dtype) {
      return Bad(node, absl::StrCat("dY ", ShapeToString(dy->shape), " and Y ", ShapeToString(y->shape),
                                    " must both be ", ShapeToString(o_shape), " in ", DTypeName(p.dtype)));
    }
    if (stats->dtype != DType::kF32 || NumElements(stats->shape) != p.b * p.h * p.sq) {
      return Bad(node, absl::StrCat("Stats is ", ShapeToString(stats->shape), " ", DTypeName(stats->dtype),
                                    "; cuDNN's backward reads the forward's f32 [", p.b, ",", p.h, ",", p.sq, "]"));
    }
    for (size_t i = 0; i < 3; ++i) {
      const Value* out = node.outputs[i];
      const Value* like = node.inputs[q + i];
      if (!out || out->shape != like->shape || out->dtype != p.dtype) {
        return Bad(node, "dQ, dK and dV must have the shapes and dtype of Q, K and V");
      }
    }
  } else {
    const Value* y = node.outputs[0];
    const Value* stats = node.outputs[1];
    if (!y || !stats || y->shape != o_shape || y->dtype != p.dtype || stats->dtype != DType::kF32 ||
        NumElements(stats->shape) != p.b * p.h * p.sq) {
      return Bad(node, absl::StrCat("outputs must be Y ", ShapeToString(o_shape), " ", DTypeName(p.dtype),
                                    " and Stats [", p.b, ",", p.h, ",", p.sq, "] f32"));
    }
  }
  if (!node.attrs.Has("scale")) return Bad(node, "has no 'scale' attribute (fuse-attention always sets it)");
  p.scale = node.attrs.GetFloat("scale", 1.0f);
  p.causal = node.attrs.GetInt("causal", 0) != 0;

  p.has_bias = Present(node, bias);
  if (p.has_bias) {
    const Value* bv = node.inputs[bias];
    if (bv->dtype != p.dtype || bv->shape.size() > 4) {
      return Bad(node, absl::StrCat("Bias ", ShapeToString(bv->shape), " ", DTypeName(bv->dtype),
                                    " must have Q's dtype (", DTypeName(p.dtype), ") and rank 4 at most"));
    }
    p.bias_shape = Shape(4 - bv->shape.size(), 1);
    p.bias_shape.insert(p.bias_shape.end(), bv->shape.begin(), bv->shape.end());
    const Shape scores = {p.b, p.h, p.sq, p.sk};
    for (int i = 0; i < 4; ++i) {
      if (p.bias_shape[i] != 1 && p.bias_shape[i] != scores[i]) {
        return Bad(node, absl::StrCat("Bias ", ShapeToString(bv->shape), " does not broadcast to the scores ",
                                      ShapeToString(scores)));
      }
    }
    p.bias_b = p.bias_shape[0];
    p.bias_h = p.bias_shape[1];
    // cuDNN broadcasts over batch and heads; rows and columns must be there, 16-byte aligned.
    p.bias_laid_out = p.bias_shape[2] != p.sq || p.bias_shape[3] != p.sk || p.sk % kRowAlign != 0;
    p.bias_row = p.bias_laid_out ? (p.sk + kRowAlign - 1) / kRowAlign * kRowAlign : p.sk;
  }
  return p;
}

class CudnnAttentionKernel : public Kernel {
 public:
  template <bool kBackward>
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    std::unique_ptr<CudnnAttentionKernel> k(new CudnnAttentionKernel());
    MPC_RETURN_IF_ERROR(k->Init(node, backend, kBackward));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    char* scratch = static_cast<char*>(backend_->conv_workspace());
    void* workspace = plan_->workspace_bytes > 0 ? scratch : nullptr;
    const size_t q = p_.backward ? 1 : 0;
    const void* bias = nullptr;
    if (p_.has_bias) {
      bias = ctx.inputs[p_.backward ? 6 : 3].data;
      if (p_.bias_laid_out) {
        void* laid_out = scratch + bias_offset_;
        MPC_RETURN_IF_ERROR(bias_copy_.Launch(bias, laid_out, stream_));
        bias = laid_out;
      }
      pack_[kBias] = const_cast<void*>(bias);
    }
    pack_[kQ] = ctx.inputs[q].data;
    pack_[kK] = ctx.inputs[q + 1].data;
    pack_[kV] = ctx.inputs[q + 2].data;
    if (p_.backward) {
      pack_[kDO] = ctx.inputs[0].data;
      pack_[kO] = ctx.inputs[4].data;
      pack_[kStats] = ctx.inputs[5].data;
      pack_[kDQ] = ctx.outputs[0].data;
      pack_[kDK] = ctx.outputs[1].data;
      pack_[kDV] = ctx.outputs[2].data;
    } else {
      pack_[kO] = ctx.outputs[0].data;
      pack_[kStats] = ctx.outputs[1].data;
    }
    try {
      return FeStatus(plan_->graph->execute(handle_, pack_, workspace), what_, "execute");
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat(what_, ": cudnn-frontend threw in execute: ", e.what()));
    }
  }

 private:
  CudnnAttentionKernel() = default;

  absl::Status Init(const Node& node, Backend& backend, bool backward) {
    // The node first: its errors need no device (and tests check them without one).
    MPC_ASSIGN_OR_RETURN(p_, ProblemOf(node, backward));
    if (backward) {
      MPC_ASSIGN_OR_RETURN(p_.deterministic, WantDeterministic());
    }
    what_ = absl::StrCat("cuda ", node.op, " kernel for node '", node.name, "' (", p_.Describe(), ")");
    MPC_ASSIGN_OR_RETURN(backend_, AsCuda(backend));
    stream_ = backend_->stream();
    if (!backend_->capabilities().fused_attention) {
      return absl::UnimplementedError(absl::StrCat(
          what_, ": ", backend_->capabilities().device, " with cuDNN ", cudnnGetVersion(),
          " has no fused attention (it needs sm_80 or newer and cuDNN 9); compile the model for this backend, whose "
          "capabilities leave attention unfused"));
    }
    MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(backend_->device()));
    MPC_ASSIGN_OR_RETURN(handle_, backend_->Cudnn());
    MPC_ASSIGN_OR_RETURN(plan_, CachedPlan(*backend_, p_, handle_, what_));

    // The scratch: [cuDNN workspace | laid-out bias], each piece 256-byte aligned.
    auto round = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
    int64_t used = round(plan_->workspace_bytes);
    if (p_.has_bias && p_.bias_laid_out) {
      const Shape laid_out = {p_.bias_b, p_.bias_h, p_.sq, p_.sk};
      MPC_ASSIGN_OR_RETURN(bias_copy_, BiasBroadcast::Make(p_.bias_shape, laid_out, p_.bias_row, DTypeSize(p_.dtype),
                                                           what_ + ": bias layout"));
      bias_offset_ = used;
      used += round(p_.bias_b * p_.bias_h * p_.sq * p_.bias_row * static_cast<int64_t>(DTypeSize(p_.dtype)));
    }
    return backend_->ReserveConvWorkspace(static_cast<size_t>(used));
  }

  Problem p_;
  std::string what_;  // the kernel and its attention, for error messages
  CudaBackend* backend_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t handle_ = nullptr;    // the backend's, bound to its stream
  std::shared_ptr<const Plan> plan_;  // shared with the backend's cache
  BiasBroadcast bias_copy_;
  int64_t bias_offset_ = 0;                  // where the laid-out bias sits in the scratch
  std::unordered_map<int64_t, void*> pack_;  // the variant pack, rewritten each run
};

}  // namespace

void RegisterCudaAttentionKernels(KernelRegistry& r) {
  for (DType d : {DType::kBF16, DType::kF16}) {
    r.Register(kForwardOp, "cuda", d, CudnnAttentionKernel::Create<false>);
    r.Register(kBackwardOp, "cuda", d, CudnnAttentionKernel::Create<true>);
  }
}

}  // namespace mpc::cuda

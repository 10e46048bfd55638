// What a device can run, as the compiler sees it: the dtypes its GEMMs run natively, FP8
// and TF32 tensor cores, the GEMM dimension multiple it prefers per dtype, and which
// (op, dtype) kernels exist. Backends describe themselves with it; passes read only it,
// never a backend, so every pass is testable on the CPU with a made-up capability set.
// It lives in graph/, the lowest layer both passes/ and backends/ build on.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/dtype.h"

namespace mpc {

struct Capabilities {
  std::string device;                 // "cpu", "cuda:0 (NVIDIA H100 ...)"
  std::vector<DType> native_compute;  // dtypes whose GEMMs run natively
  bool fp8 = false;
  // FP8 GEMMs with group scales (one per row, 1x128 tiles, 128x128 blocks: cuBLASLt's scale
  // modes, sm_90), so fp8-lower may lower the rowwise and block recipes too.
  bool fp8_group_scales = false;
  bool tf32 = false;
  // The multi-tensor optimizer updates and FindNonFinite read bf16/f16 gradients (widening
  // as they load), so fold-gradient-casts may drop the gradients' Casts to f32.
  bool updates_read_16bit_gradients = false;
  std::map<DType, int> pad_multiple;  // preferred GEMM dim multiple per compute dtype
  // Per dtype, the smallest output plane (OH * OW) from which the backend's 2-D
  // convolutions run faster on channels-last activations (passes/channels_last.h); a dtype
  // without an entry stays channels-first.
  std::map<DType, int64_t> channels_last_min_plane;
  // Batched MatMuls read operands and write results through any axis order (mpc_perm_*,
  // graph/matmul_layout.h), so fold-batch-transposes may drop attention's head transposes.
  bool matmul_permuted_operands = false;
  // LayerNormalization writes a narrower Y than its X (mpc_output_dtype) and LayerNormGrad
  // adds a gradient into its dX (6th input) and writes dX's column sums and 16-bit copy
  // (outputs 3 and 4), so fuse-layer-norm-edges may fold the Cast after a normalisation
  // and the residual gradient sum, bias gradient and Cast after its gradient.
  bool layer_norm_fused_edges = false;
  // Attention runs faster as one Attention / AttentionGrad op (a fused flash-attention
  // kernel such as cuDNN's) than as the exported MatMul, softmax, MatMul chain, so
  // fuse-attention makes one of it where HasKernel says the dtype is there. The CPU keeps
  // its own path (fuse-softmax, fold-batch-transposes, triangular operands).
  bool fused_attention = false;
  // Whether the backend has a kernel for (op, dtype); null means "assume yes" (fake
  // capability sets in pass tests).
  std::function<bool(const std::string& op, DType dtype)> has_kernel;
  bool HasKernel(const std::string& op, DType dtype) const { return !has_kernel || has_kernel(op, dtype); }
  bool Native(DType d) const;
  int PadMultiple(DType d) const;
};

// The alignment of every activation's offset in the arena, which the memory planner
// guarantees and kernels may rely on (vector loads, cuBLASLt's 16-byte rule).
constexpr int64_t kArenaAlignment = 64;

}  // namespace mpc

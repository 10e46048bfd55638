// The layer-sized expansions of graph/onnx_expand.h: normalisations and attention that ONNX
// (opsets 18-23) defines as one op and mpc imports as the ops it already differentiates,
// paints and runs on every backend (the same decompositions ONNX's function bodies give):
//   RMSNormalization(X, scale)   (23) X * Reciprocal(Sqrt(ReduceMean(X*X over axis..) + eps))
//                                * scale, in f32 (stash_type 1) when X is 16-bit.
//   GroupNormalization(X, scale, bias)  (18, 21) per-(example, group) mean and variance of X
//                                viewed as [N, G, C/G * spatial]; scale and bias per channel
//                                (21) or per group (18, told apart by their length).
//   InstanceNormalization(X, scale, B)  GroupNormalization with one group per channel.
//   Attention(Q, K, V, mask?)    (23) softmax(scale * Q K^T + mask) V over 4-D [B, heads, S, d]
//                                or 3-D [B, S, heads*d] operands (q_num_heads, kv_num_heads),
//                                grouped-query heads repeated, is_causal, bool (keep) or float
//                                (added) masks; written as fuse-softmax's attention pattern so
//                                backends with MaskedSoftmax run it as one op. No KV cache
//                                (past_key/past_value), softcap or qk_matmul_output_mode.
//   RotaryEmbedding(X, cos, sin, position_ids?)  (23) the caches gathered at the positions,
//                                X's first rotary_embedding_dim features rotated in halves (or
//                                interleaved pairs): x1 cos - x2 sin, x1 sin + x2 cos.
//   Resize(X, roi, scales|sizes) (13, 18, 19) nearest or linear over the last two axes as
//                                Y = R_h X R_w^T with constant interpolation matrices built for
//                                the coordinate transform (half_pixel, pytorch_half_pixel,
//                                align_corners, asymmetric) and nearest_mode: exact, and its
//                                gradient is MatMul's.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/attributes.h"
#include "graph/graph_builder.h"

namespace mpc {

absl::StatusOr<Value*> ExpandRmsNormalization(GraphBuilder& b, const std::vector<Value*>& inputs,
                                              const AttrMap& attrs, const std::string& where);
absl::StatusOr<Value*> ExpandGroupNormalization(GraphBuilder& b, const std::vector<Value*>& inputs,
                                                const AttrMap& attrs, bool instance, const std::string& where);
absl::StatusOr<Value*> ExpandRotaryEmbedding(GraphBuilder& b, const std::vector<Value*>& inputs, const AttrMap& attrs,
                                             const std::string& where);
absl::StatusOr<Value*> ExpandResize(GraphBuilder& b, const std::vector<Value*>& inputs, const AttrMap& attrs,
                                    const std::string& where);
absl::StatusOr<Value*> ExpandAttention(GraphBuilder& b, const std::vector<Value*>& inputs, const AttrMap& attrs,
                                       const std::string& where);

}  // namespace mpc

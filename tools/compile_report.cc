// JSON and text renderings of a compiled program's pass report (see compile_report.h).
#include "tools/compile_report.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/metrics.h"

namespace mpc {

namespace {

// The data-parallel pass's buckets: {"ranks":N,"buckets":[{"node":..,"bytes":..,"params":[..]}]}.
std::string DataParallelJson(const CompileResults& r) {
  std::vector<std::string> buckets;
  for (const DataParallelResult::Bucket& b : r.data_parallel.buckets) {
    std::vector<std::string> params;
    for (const std::string& p : b.params) params.push_back(absl::StrCat("\"", JsonEscape(p), "\""));
    buckets.push_back(absl::StrCat("{\"node\":\"", JsonEscape(b.node), "\",\"bytes\":", b.bytes, ",\"params\":[",
                                   absl::StrJoin(params, ","), "]}"));
  }
  return absl::StrCat("{\"ranks\":", r.data_parallel.world_size, ",\"zero_stage\":", r.data_parallel.zero_stage,
                      ",\"buckets\":[", absl::StrJoin(buckets, ","), "]}");
}

// The recompute pass: policy, block inputs, what it recomputed and what that costs.
std::string RecomputeJson(const RecomputeResult& rc) {
  std::vector<std::string> boundaries;
  for (const std::string& b : rc.boundaries) boundaries.push_back(absl::StrCat("\"", JsonEscape(b), "\""));
  return absl::StrFormat(
      "\"recompute\":{\"policy\":\"%s\",\"boundaries_from\":\"%s\",\"boundaries\":[%s],\"saved\":%d,"
      "\"saved_bytes\":%d,\"recomputed\":%d,\"recomputed_bytes\":%d,\"cloned_nodes\":%d,\"extra_flops\":%.0f,"
      "\"step_flops\":%.0f,\"blocks_recomputed\":%d,\"chosen_for_limit_mb\":%g},",
      rc.policy, JsonEscape(rc.boundaries_from), absl::StrJoin(boundaries, ","), rc.saved, rc.saved_bytes,
      rc.recomputed, rc.recomputed_bytes, rc.cloned_nodes, rc.extra_flops, rc.step_flops, rc.blocks_recomputed,
      rc.chosen_for_limit_mb);
}

}  // namespace

std::string CompileReportJson(const Program& p) {
  const CompileResults& r = p.results;
  std::vector<std::string> passes;
  for (const PassReport& pass : p.report) {
    passes.push_back(absl::StrFormat("{\"name\":\"%s\",\"changed\":%s,\"skipped\":%s,\"ms\":%.3f,\"nodes_after\":%d}",
                                     pass.name, pass.changed ? "true" : "false", pass.skipped ? "true" : "false",
                                     pass.ms, pass.nodes_after));
  }
  std::vector<std::string> nodes;
  for (const PaintDecision& d : r.autocast.paint) {
    nodes.push_back(absl::StrFormat("{\"name\":\"%s\",\"op\":\"%s\",\"dtype\":\"%s\",\"reason\":\"%s\"}",
                                    JsonEscape(d.node), d.op, DTypeName(d.dtype), JsonEscape(d.reason)));
  }
  std::vector<std::string> gelu;
  for (const FuseGeluResult::Fusion& f : r.fuse_gelu.fused) {
    gelu.push_back(absl::StrFormat("{\"node\":\"%s\",\"approximate\":\"%s\",\"nodes_replaced\":%d}", JsonEscape(f.node),
                                   f.approximate, f.nodes_replaced));
  }
  std::vector<std::string> silu;
  for (const std::string& node : r.fuse_silu.fused) silu.push_back(absl::StrCat("\"", JsonEscape(node), "\""));
  std::vector<std::string> rms_norm;
  for (const FuseRmsNormResult::Fusion& f : r.fuse_rms_norm.fused) {
    rms_norm.push_back(absl::StrFormat("{\"node\":\"%s\",\"scaled\":%s,\"nodes_replaced\":%d}", JsonEscape(f.node),
                                       f.scaled ? "true" : "false", f.chain_nodes));
  }
  std::vector<std::string> attention, attention_skipped;
  for (const FuseAttentionResult::Fusion& f : r.fuse_attention.fused) {
    attention.push_back(absl::StrFormat("{\"node\":\"%s\",\"causal\":%s,\"biased\":%s,\"scale\":%.9g,\"nodes_replaced\":%d}",
                                        JsonEscape(f.node), f.causal ? "true" : "false", f.biased ? "true" : "false",
                                        f.scale, f.nodes_replaced));
  }
  for (const FuseAttentionResult::Skip& s : r.fuse_attention.skipped) {
    attention_skipped.push_back(
        absl::StrFormat("{\"softmax\":\"%s\",\"reason\":\"%s\"}", JsonEscape(s.softmax), JsonEscape(s.reason)));
  }
  std::vector<std::string> softmax;
  for (const FuseSoftmaxResult::Fusion& f : r.fuse_softmax.fused) {
    softmax.push_back(absl::StrFormat("{\"node\":\"%s\",\"masked\":%s,\"scale\":%.9g,\"nodes_replaced\":%d}",
                                      JsonEscape(f.node), f.masked ? "true" : "false", f.scale, f.nodes_replaced));
  }
  std::vector<std::string> channels_last;
  for (const std::string& node : r.channels_last.converted) {
    channels_last.push_back(absl::StrCat("\"", JsonEscape(node), "\""));
  }
  std::vector<std::string> padding;
  for (const PadDimsResult::Padding& d : r.pad_dims.padding) {
    padding.push_back(absl::StrFormat("{\"value\":\"%s\",\"dim\":%d,\"from\":%d,\"to\":%d}", JsonEscape(d.value), d.dim,
                                      d.from, d.to));
  }
  std::vector<std::string> fp8;
  for (const Fp8Result::Gemm& d : r.fp8.gemms) {
    fp8.push_back(absl::StrFormat(
        "{\"node\":\"%s\",\"format_a\":\"%s\",\"format_b\":\"%s\",\"scaling_a\":\"%s\",\"scaling_b\":\"%s\","
        "\"forward\":\"%s\"}",
        JsonEscape(d.node), d.format_a, d.format_b, d.scaling_a, d.scaling_b, JsonEscape(d.forward_node)));
  }
  std::vector<std::string> fp8_skipped;
  for (const auto& [node, reason] : r.fp8.skipped) {
    fp8_skipped.push_back(absl::StrFormat("{\"node\":\"%s\",\"reason\":\"%s\"}", JsonEscape(node), JsonEscape(reason)));
  }
  std::vector<std::string> fp8_lowered, fp8_emulated;
  for (const std::string& node : r.fp8_lower.lowered) fp8_lowered.push_back(absl::StrCat("\"", JsonEscape(node), "\""));
  for (const auto& [node, reason] : r.fp8_lower.emulated) {
    fp8_emulated.push_back(
        absl::StrFormat("{\"node\":\"%s\",\"reason\":\"%s\"}", JsonEscape(node), JsonEscape(reason)));
  }
  std::vector<std::string> fp8_accumulation;
  int fp8_fast = 0;
  for (const Fp8LowerResult::Decision& d : r.fp8_lower.decisions) {
    if (!d.lowered) continue;
    fp8_fast += d.fast_accumulation;
    fp8_accumulation.push_back(absl::StrFormat("{\"node\":\"%s\",\"fast\":%s,\"why\":\"%s\"}", JsonEscape(d.node),
                                               d.fast_accumulation ? "true" : "false", JsonEscape(d.accumulation)));
  }
  std::vector<std::string> tf32;
  for (const Tf32Result::Marked& m : r.tf32.marked) {
    tf32.push_back(absl::StrFormat("{\"node\":\"%s\",\"op\":\"%s\"}", JsonEscape(m.node), m.op));
  }
  // What is trained and how: frozen parameters (no gradient in the program), each update's
  // group, gradient accumulation and the weight average.
  std::vector<std::string> frozen, updates, averaged;
  for (const std::string& name : r.autodiff.frozen) frozen.push_back(absl::StrCat("\"", JsonEscape(name), "\""));
  for (const OptimizerResult::ParamUpdate& u : r.optimizer.updates) {
    updates.push_back(absl::StrFormat("{\"param\":\"%s\",\"group\":%d,\"weight_decay\":%s,\"lr_scale\":%s}",
                                      JsonEscape(u.param), u.group, JsonNumber(u.weight_decay),
                                      JsonNumber(u.lr_scale)));
  }
  for (const auto& [param, state] : r.ema.averaged) averaged.push_back(absl::StrCat("\"", JsonEscape(param), "\""));
  const std::string training =
      p.loss_output.empty()
          ? std::string()
          : absl::StrCat("\"training\":{\"frozen\":[", absl::StrJoin(frozen, ","), "],\"updates\":[",
                         absl::StrJoin(updates, ","), "],\"accumulate_steps\":", r.grad_accumulation.steps,
                         ",\"ema\":[", absl::StrJoin(averaged, ","), "],\"data_parallel\":", DataParallelJson(r), "},");
  // How the importer classified every initializer (graph/onnx_initializer_roles.h).
  std::vector<std::string> initializers;
  for (const InitializerRole& role : p.initializer_roles) {
    initializers.push_back(absl::StrFormat("{\"name\":\"%s\",\"kind\":\"%s\",\"reason\":\"%s\"}",
                                           JsonEscape(role.name), role.kind, JsonEscape(role.reason)));
  }
  const MemoryPlan& m = r.memory_plan.plan;
  return absl::StrCat(
      "{", training, "\"initializers\":[", absl::StrJoin(initializers, ","), "],", "\"passes\":[", absl::StrJoin(passes, ","), "],", "\"nodes\":[", absl::StrJoin(nodes, ","), "],",
      absl::StrFormat("\"casts_inserted\":%d,\"compute_dtype\":\"%s\",", r.autocast.casts_inserted,
                      DTypeName(r.autocast.compute_dtype)),
      "\"fused_gelu\":[", absl::StrJoin(gelu, ","), "],", "\"fused_silu\":[", absl::StrJoin(silu, ","), "],", "\"fused_rms_norm\":[", absl::StrJoin(rms_norm, ","), "],", "\"fused_softmax\":[", absl::StrJoin(softmax, ","), "],",
      "\"fused_attention\":[", absl::StrJoin(attention, ","), "],\"attention_left_unfused\":[",
      absl::StrJoin(attention_skipped, ","), "],",
      absl::StrFormat("\"folded_batch_transposes\":{\"operands\":%d,\"results\":%d},",
                      r.fold_batch_transposes.operand_transposes, r.fold_batch_transposes.result_transposes),
      absl::StrFormat("\"triangular_operands\":{\"zero_above\":%d,\"zero_below\":%d},",
                      r.triangular_operands.zero_above, r.triangular_operands.zero_below),
      absl::StrFormat("\"fused_layer_norm_edges\":{\"narrowed_outputs\":%d,\"accumulated_grads\":%d,"
                      "\"summed_columns\":%d,\"narrowed_grads\":%d},",
                      r.fuse_layer_norm_edges.narrowed_outputs, r.fuse_layer_norm_edges.accumulated_grads,
                      r.fuse_layer_norm_edges.summed_columns, r.fuse_layer_norm_edges.narrowed_grads),
      "\"padding\":[", absl::StrJoin(padding, ","), "],", "\"channels_last\":{\"converted\":[",
      absl::StrJoin(channels_last, ","), absl::StrFormat("],\"transposes\":%d},", r.channels_last.transposes),
      r.fp8.recipe.empty() ? "" : absl::StrCat("\"fp8_recipe\":\"", r.fp8.recipe, "\","),
      "\"fp8\":[", absl::StrJoin(fp8, ","), "],\"fp8_skipped\":[", absl::StrJoin(fp8_skipped, ","), "],",
      "\"fp8_lowered\":[", absl::StrJoin(fp8_lowered, ","), "],\"fp8_emulated\":[", absl::StrJoin(fp8_emulated, ","),
      "],\"fp8_accumulation\":[", absl::StrJoin(fp8_accumulation, ","), "],", r.fp8.fallback.empty() ? "" : absl::StrCat("\"fp8_fallback\":\"", JsonEscape(r.fp8.fallback), "\","),
      "\"tf32\":[", absl::StrJoin(tf32, ","), "],",
      absl::StrFormat("\"padding_extra\":{\"flops_pct\":%.3f,\"param_bytes_pct\":%.3f},", r.pad_dims.extra_flops_pct,
                      r.pad_dims.extra_bytes_pct),
      absl::StrFormat("\"memory\":{\"planned_peak_bytes\":%d,\"unplanned_bytes\":%d,\"persistent_bytes\":%d,"
                      "\"unshared_activation_bytes\":%d},",
                      m.peak_bytes, m.unplanned_bytes, m.persistent_bytes, m.total_activation_bytes),
      RecomputeJson(r.recompute),
      absl::StrFormat("\"model\":{\"forward_nodes\":%d,\"parameters\":%d,\"batch_size\":%d},", p.forward_nodes,
                      p.parameter_count, p.batch_size),
      absl::StrFormat("\"program\":{\"nodes\":%d,\"values\":%d}", p.graph->nodes().size(), p.graph->values().size()),
      "}\n");
}

std::string CompileSummaryText(const Program& p) {
  const CompileResults& r = p.results;
  std::string out = absl::StrFormat("%-16s %8s %10s %8s\n", "pass", "changed", "ms", "nodes");
  for (const PassReport& pass : p.report) {
    absl::StrAppendFormat(&out, "%-16s %8s %10.2f %8d\n", pass.name,
                          pass.skipped ? "skipped" : (pass.changed ? "yes" : "no"), pass.ms, pass.nodes_after);
  }
  int64_t converted = 0, forward = 0;
  for (const PaintDecision& d : r.autocast.paint) {
    if (d.reason == "inserted cast") continue;
    ++forward;
    converted += d.dtype != DType::kF32 && d.op != "Cast";
  }
  if (!r.fuse_gelu.fused.empty()) {
    int64_t replaced = 0;
    for (const FuseGeluResult::Fusion& f : r.fuse_gelu.fused) replaced += f.nodes_replaced;
    absl::StrAppendFormat(&out, "fuse-gelu: %d GELUs written out in %d nodes now one Gelu op each (approximate=%s)\n",
                          r.fuse_gelu.fused.size(), replaced, r.fuse_gelu.fused[0].approximate);
  }
  if (!r.fuse_silu.fused.empty()) {
    absl::StrAppendFormat(&out, "fuse-silu: %d x * Sigmoid(x) products now one Silu op each\n",
                          r.fuse_silu.fused.size());
  }
  if (!r.fuse_rms_norm.fused.empty()) {
    int64_t replaced = 0;
    for (const FuseRmsNormResult::Fusion& f : r.fuse_rms_norm.fused) replaced += f.chain_nodes;
    absl::StrAppendFormat(&out, "fuse-rms-norm: %d RMSNorms written out in %d nodes now one RmsNorm op each\n",
                          r.fuse_rms_norm.fused.size(), replaced);
  }
  if (const FoldBatchTransposesResult& t = r.fold_batch_transposes; t.operand_transposes + t.result_transposes > 0) {
    absl::StrAppendFormat(&out,
                          "fold-batch-transposes: %d Transposes read in place by the MatMuls after them, %d written in "
                          "place by the MatMul before them\n",
                          t.operand_transposes, t.result_transposes);
  }
  if (const TriangularOperandsResult& t = r.triangular_operands; t.zero_above + t.zero_below > 0) {
    absl::StrAppendFormat(&out,
                          "triangular-operands: %d MatMuls read an A zero above its diagonal (causal attention's "
                          "P, dS), %d read one zero below it (P^T, dS^T); the zeros' products are skipped\n",
                          t.zero_above, t.zero_below);
  }
  if (const FuseLayerNormEdgesResult& e = r.fuse_layer_norm_edges;
      e.narrowed_outputs + e.accumulated_grads + e.summed_columns + e.narrowed_grads > 0) {
    absl::StrAppendFormat(&out,
                          "fuse-layer-norm-edges: %d LayerNormalizations write their Cast's dtype themselves; "
                          "LayerNormGrads add the residual gradient into dX (%d), sum dX's columns (%d) and write "
                          "its 16-bit copy (%d)\n",
                          e.narrowed_outputs, e.accumulated_grads, e.summed_columns, e.narrowed_grads);
  }
  if (!r.fuse_attention.fused.empty()) {
    int64_t replaced = 0, causal = 0, biased = 0;
    for (const FuseAttentionResult::Fusion& f : r.fuse_attention.fused) {
      replaced += f.nodes_replaced;
      causal += f.causal;
      biased += f.biased;
    }
    absl::StrAppendFormat(&out,
                          "fuse-attention: %d attentions written out in %d nodes now one FusedAttention op each (%d "
                          "causal, %d with a bias)\n",
                          r.fuse_attention.fused.size(), replaced, causal, biased);
  }
  for (const FuseAttentionResult::Skip& s : r.fuse_attention.skipped) {
    absl::StrAppendFormat(&out, "fuse-attention: left '%s' unfused: %s\n", s.softmax, s.reason);
  }
  if (!r.fuse_softmax.fused.empty()) {
    int64_t replaced = 0, masked = 0;
    for (const FuseSoftmaxResult::Fusion& f : r.fuse_softmax.fused) {
      replaced += f.nodes_replaced;
      masked += f.masked;
    }
    absl::StrAppendFormat(&out,
                          "fuse-softmax: %d softmaxes with their scale%s (%d nodes) now one MaskedSoftmax op each\n",
                          r.fuse_softmax.fused.size(), masked ? " and mask" : "", replaced);
  }
  if (r.autocast.compute_dtype == DType::kF32) {
    absl::StrAppendFormat(&out, "autocast: precision %s, no node converted\n", r.tf32.enabled ? "tf32" : "f32");
  } else {
    absl::StrAppendFormat(&out, "autocast: %d of %d nodes converted to %s, %d casts inserted\n", converted, forward,
                          DTypeName(r.autocast.compute_dtype), r.autocast.casts_inserted);
  }
  if (!r.pad_dims.padding.empty()) {
    absl::StrAppendFormat(&out, "pad-dims: %d dimensions padded; +%.2f%% GEMM FLOPs, +%.2f%% parameter bytes\n",
                          r.pad_dims.padding.size(), r.pad_dims.extra_flops_pct, r.pad_dims.extra_bytes_pct);
  }
  if (!r.channels_last.converted.empty()) {
    absl::StrAppendFormat(&out,
                          "channels-last: %d convolutions, normalizations and pools run on [N, H, W, C]; %d "
                          "layout transposes at the ends\n",
                          r.channels_last.converted.size(), r.channels_last.transposes);
  }
  if (!r.fp8.fallback.empty()) {
    absl::StrAppendFormat(&out, "fp8: %s\n", r.fp8.fallback);
  } else if (!r.fp8.gemms.empty() || !r.fp8.skipped.empty()) {
    std::vector<std::string> forward;
    int64_t backward = 0;
    for (const Fp8Result::Gemm& d : r.fp8.gemms) {
      if (d.node == d.forward_node)
        forward.push_back(d.node);
      else
        ++backward;
    }
    absl::StrAppendFormat(&out, "fp8: %d of %d forward GEMMs in FP8 (%s) + %d backward; %d left in %s; recipe %s\n",
                          forward.size(), forward.size() + r.fp8.skipped.size(), absl::StrJoin(forward, ", "), backward,
                          r.fp8.skipped.size(), DTypeName(r.autocast.compute_dtype), r.fp8.recipe);
    if (!r.fp8_lower.lowered.empty() || !r.fp8_lower.emulated.empty()) {
      // Only on a backend with FP8 tensor cores; elsewhere every FP8 GEMM is emulated.
      int fp8_fast = 0;
      for (const Fp8LowerResult::Decision& d : r.fp8_lower.decisions) fp8_fast += d.lowered && d.fast_accumulation;
      absl::StrAppendFormat(&out,
                            "fp8: %d GEMMs run as FP8 tensor-core GEMMs (%d forward with fast accumulation, %d "
                            "promoted), %d emulated%s\n",
                            r.fp8_lower.lowered.size(), fp8_fast, r.fp8_lower.lowered.size() - fp8_fast,
                            r.fp8_lower.emulated.size(),
                            r.fp8_lower.emulated.empty() ? ""
                                                         : absl::StrCat(" (e.g. ", r.fp8_lower.emulated[0].first, ": ",
                                                                        r.fp8_lower.emulated[0].second, ")"));
    }
  }
  if (r.tf32.enabled) {
    std::map<std::string, int64_t> by_op;
    for (const Tf32Result::Marked& m : r.tf32.marked) ++by_op[m.op];
    std::vector<std::string> counts;
    for (const auto& [op, count] : by_op) counts.push_back(absl::StrCat(count, " ", op));
    absl::StrAppendFormat(&out, "tf32: %d f32 GEMMs/convolutions run in TF32%s\n", r.tf32.marked.size(),
                          counts.empty() ? "" : absl::StrCat(" (", absl::StrJoin(counts, ", "), ")"));
  }
  // Every initializer, grouped by what the import made of it and why.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> roles;
  for (const InitializerRole& role : p.initializer_roles) roles[{role.kind, role.reason}].push_back(role.name);
  for (const auto& [kind_reason, names] : roles) {
    absl::StrAppendFormat(&out, "import: %d %s (%s): %s\n", names.size(),
                          kind_reason.first == "trained" ? "trained" : absl::StrCat("not trained, ", kind_reason.first),
                          kind_reason.second, absl::StrJoin(names, ", "));
  }
  if (!r.autodiff.frozen.empty()) {
    absl::StrAppendFormat(&out, "autodiff: %d parameters frozen (no gradient, no update): %s\n",
                          r.autodiff.frozen.size(), absl::StrJoin(r.autodiff.frozen, ", "));
  }
  int grouped = 0;
  for (const OptimizerResult::ParamUpdate& u : r.optimizer.updates) grouped += u.group >= 0;
  if (grouped > 0) {
    absl::StrAppendFormat(&out, "optimizer: %d of %d parameters set by parameter groups\n", grouped,
                          r.optimizer.updates.size());
  }
  if (r.grad_accumulation.steps > 1) {
    absl::StrAppendFormat(&out, "accumulate-gradients: %d micro-batches of %d per optimizer step\n",
                          r.grad_accumulation.steps, p.batch_size);
  }
  if (!r.ema.averaged.empty()) absl::StrAppendFormat(&out, "ema: %d parameters averaged\n", r.ema.averaged.size());
  if (r.data_parallel.world_size > 1) {
    int64_t bytes = 0;
    for (const DataParallelResult::Bucket& b : r.data_parallel.buckets) bytes += b.bytes;
    const bool zero = r.data_parallel.zero_stage >= 1;
    // ZeRO-2/3 with accumulation scatter every micro-batch; otherwise once per step.
    const int micro_batches = std::max(1, r.grad_accumulation.steps);
    const bool every_micro_batch = r.data_parallel.zero_stage >= 2 && micro_batches > 1;
    absl::StrAppendFormat(&out,
                          "data-parallel: %d ranks, %d examples each; gradients summed in %d %s bucket%s "
                          "(%.2f MiB per %s)%s, plus the loss\n",
                          r.data_parallel.world_size, p.batch_size, r.data_parallel.buckets.size(),
                          zero ? "ReduceScatter" : "AllReduce", r.data_parallel.buckets.size() == 1 ? "" : "s",
                          bytes / 1048576.0,
                          every_micro_batch ? absl::StrCat("micro-batch, ", micro_batches, " per step") : "step",
                          r.data_parallel.fp8_amax_node.empty() ? "" : ", FP8 amaxes (max)");
    for (const DataParallelResult::Bucket& b : r.data_parallel.buckets) {
      absl::StrAppendFormat(&out, "  %s: %.2f MiB, %d gradients (%s .. %s)\n", b.node, b.bytes / 1048576.0,
                            b.params.size(), b.params.front(), b.params.back());
    }
    if (zero) {
      // What ZeRO-1 saves: the optimizer state each rank keeps, against all of it (the
      // sliced gradient accumulators and weight averages are not optimizer state).
      int64_t kept = 0, whole = 0;
      for (const auto& v : p.graph->values()) {
        if (v->sharded_from.empty() || v->kind != ValueKind::kState) continue;  // ZeRO-3's parameters: below
        if (absl::EndsWith(v->name, ".grad_accum") || absl::EndsWith(v->name, ".ema")) continue;
        kept += static_cast<int64_t>(v->bytes());
        whole += NumElements(v->sharded_from) * static_cast<int64_t>(DTypeSize(v->dtype));
      }
      absl::StrAppendFormat(&out,
                            "zero-%d: each rank keeps and updates its slice of the optimizer state (%.2f of %.2f MiB) "
                            "and %s%s\n",
                            r.data_parallel.zero_stage, kept / 1048576.0, whole / 1048576.0,
                            r.data_parallel.zero_stage == 3 ? "updates its slices of the weights in place"
                                                            : "all-gathers the updated weights",
                            r.data_parallel.zero_stage >= 2
                                ? "; each bucket is reduce-scattered as soon as its gradients exist, which frees them"
                                : "");
      const ShardParametersResult& z3 = r.shard_parameters;
      if (!z3.sharded.empty()) {
        absl::StrAppendFormat(&out,
                              "zero-3: %d parameters held as this rank's slice (%.2f MiB whole), gathered whole "
                              "before their forward and backward readers: %d AllGathers, %d of them of the bf16/fp16 "
                              "copy\n",
                              z3.sharded.size(), z3.sharded_bytes / 1048576.0, z3.gathers, z3.gathers_16bit);
      }
    }
  }
  const RecomputeResult& rc = r.recompute;
  const std::string chosen =
      rc.chosen_for_limit_mb > 0 ? absl::StrFormat(" (AUTO: the least that fits limit_mb %g)", rc.chosen_for_limit_mb) : "";
  if (rc.policy == "none" && !chosen.empty()) absl::StrAppend(&out, "recompute: none", chosen, "\n");
  if (rc.policy != "none") {
    const std::string blocks =
        rc.policy == "full" && rc.blocks_recomputed < static_cast<int>(rc.boundaries.size())
            ? absl::StrFormat(", the first %d of %d blocks", rc.blocks_recomputed, rc.boundaries.size())
            : "";
    absl::StrAppendFormat(&out,
                          "recompute: %s%s%s; %d of %d saved activations recomputed in the backward (%.2f of %.2f "
                          "MiB), %d forward nodes run again, +%.1f%% FLOPs per step\n",
                          rc.policy, blocks, chosen, rc.recomputed, rc.saved, rc.recomputed_bytes / 1048576.0,
                          rc.saved_bytes / 1048576.0, rc.cloned_nodes,
                          rc.step_flops > 0 ? 100.0 * rc.extra_flops / rc.step_flops : 0.0);
    if (!rc.boundaries.empty()) {
      absl::StrAppendFormat(&out, "  %d block inputs kept (%s): %s\n", rc.boundaries.size(), rc.boundaries_from,
                            absl::StrJoin(rc.boundaries, ", "));
    }
  }
  const MemoryPlan& m = r.memory_plan.plan;
  absl::StrAppendFormat(&out,
                        "model: %d nodes, %d parameters (batch %d)\n"
                        "program: %d nodes; activations planned into %.2f MiB (%.2f MiB without reuse); "
                        "%.2f MiB outside the arena (parameters, state, inputs, constants)\n",
                        p.forward_nodes, p.parameter_count, p.batch_size, p.graph->nodes().size(),
                        m.peak_bytes / 1048576.0, m.total_activation_bytes / 1048576.0, m.unplanned_bytes / 1048576.0);
  return out;
}

}  // namespace mpc

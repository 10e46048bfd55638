// Engine::Parity: the spec trained in FP32 and in a lower precision side by side.
//
// Two engines run the same schedule from the same initial weights on the same batches
// (same spec, same seed; the batches are checked to be equal every step), so their
// losses can be compared step by step. A per-step loss difference says *that* the runs
// part ways, not where: at the probe steps a third engine, in the lower precision, is
// given the FP32 run's exact training state and batch and runs that one step beside it,
// every node output copied to the host as it is written. Its errors are therefore the
// errors of one step of the lower-precision program on identical inputs, not drift
// accumulated over earlier steps, and the first output past its dtype's tolerance (in
// execution order) is where the divergence starts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/engine_impl.h"
#include "engine/spec.h"
#include "graph/multi_tensor_update.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

// A node output as the host saw it right after the node ran.
struct Captured {
  std::vector<double> values;
  const Node* node = nullptr;
};

// Copies every floating-point output of every node (updates excepted: they rewrite state
// in place and their outputs are not values of the step).
class CaptureObserver : public StepObserver {
 public:
  absl::Status AfterNode(const Node& node, const KernelContext& ctx, Backend& backend) override {
    const OpDef* def = OpRegistry::Global().Find(node.op);
    if (def && def->has_side_effects) return absl::OkStatus();
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const Value* v = node.outputs[i];
      const TensorView& view = ctx.outputs[i];
      if (!v || !IsFloating(v->dtype) || view.data == nullptr) continue;
      Tensor host(view.dtype, view.shape);
      if (host.bytes() > 0) MPC_RETURN_IF_ERROR(backend.CopyToHost(host.raw(), view.data, host.bytes()));
      Captured& c = captured_[v->name];
      c.node = &node;
      c.values.resize(static_cast<size_t>(host.num_elements()));
      for (int64_t k = 0; k < host.num_elements(); ++k) c.values[static_cast<size_t>(k)] = host.GetAsDouble(k);
    }
    return absl::OkStatus();
  }
  const absl::flat_hash_map<std::string, Captured>& captured() const { return captured_; }
  void Clear() { captured_.clear(); }

 private:
  absl::flat_hash_map<std::string, Captured> captured_;
};

// The numerics contract's tolerance per dtype (docs/numerics.md).
double ToleranceOf(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1e-1;
    default:
      return tf32 ? 1e-3 : 1e-5;
  }
}

// Per value of `program`, the loosest tolerance among its own dtype and everything it
// depends on: an f32 softmax after a bf16 GEMM is held to bf16's tolerance, not f32's.
// An FP8 GEMM (mpc_fp8, or lowered to Fp8Gemm) and a TF32 GEMM (mpc_tf32) widen it too.
absl::flat_hash_map<const Value*, double> InheritedTolerances(const Program& program) {
  absl::flat_hash_map<const Value*, double> tol;
  auto of = [&](const Value* v) {
    auto it = tol.find(v);
    return it != tol.end() ? it->second : ToleranceOf(v->dtype, false);
  };
  for (const Node* n : program.results.memory_plan.order) {
    double t = 0;
    for (const Value* in : n->inputs) {
      if (in) t = std::max(t, of(in));
    }
    if (n->op == "Fp8Gemm" || n->attrs.GetInt("mpc_fp8", 0) != 0) t = std::max(t, 1e-1);
    if (n->attrs.GetInt("mpc_tf32", 0) != 0) t = std::max(t, 1e-3);
    for (const Value* out : n->outputs) {
      if (out) tol[out] = std::max(t, ToleranceOf(out->dtype, false));
    }
  }
  return tol;
}

// The values that carry the loss scale: everything computed from the scale before the
// gradients are unscaled (the backward pass, under loss scaling).
absl::flat_hash_set<const Value*> ScaledValues(const Program& program) {
  absl::flat_hash_set<const Value*> scaled;
  const Value* scale = program.results.loss_scaling.loss_scale;
  if (!scale) return scaled;
  scaled.insert(scale);
  for (const Node* n : program.results.memory_plan.order) {
    const OpDef* def = OpRegistry::Global().Find(n->op);
    if (n->op == "UnscaleGradients" || n->op == "UpdateLossScale" || (def && def->has_side_effects)) continue;
    bool from_scale = false;
    for (const Value* in : n->inputs) from_scale = from_scale || (in && scaled.contains(in));
    if (!from_scale) continue;
    for (const Value* out : n->outputs) {
      if (out) scaled.insert(out);
    }
  }
  return scaled;
}

// The gradient each parameter's optimizer update reads, found on the update nodes of
// the final program (passes after autodiff replace gradient values: casts folded into
// GEMM outputs, unscaling, clipping).
std::map<std::string, const Value*> AppliedGradients(const Program& program) {
  std::map<std::string, const Value*> grads;
  auto add = [&](const Node& n, const UpdateTensorInputs& t) {
    if (t.param >= 0 && t.grad >= 0 && n.inputs[t.param] && n.inputs[t.grad]) {
      grads[n.inputs[t.param]->name] = n.inputs[t.grad];
    }
  };
  for (const Node* n : program.results.memory_plan.order) {
    if (IsMultiTensorUpdate(*n)) {
      auto layout = MultiUpdateLayoutOf(*n);
      if (!layout.ok()) continue;
      for (const UpdateTensorInputs& t : layout->tensors) add(*n, t);
    } else if (n->op == "SgdUpdate" || n->op == "AdamWUpdate") {
      auto t = SingleUpdateInputsOf(*n);
      if (t.ok()) add(*n, *t);
    }
  }
  return grads;
}

// The magnitude a value's error is measured against. Normally the reference's own RMS.
// But an op that sums terms of both signs can cancel them almost exactly (the bias
// gradient of a convolution followed by batch normalization is zero in exact arithmetic):
// its reference is then rounding noise and an error relative to it means nothing. When
// such an op's output is below 1e-3 of its inputs' magnitude, the inputs' magnitude is
// used instead (and the value marked as cancelled); reshapes and casts of it inherit that.
struct Scale {
  double rms = 0;
  bool cancelled = false;
};

double Rms(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x * x;
  return v.empty() ? 0 : std::sqrt(sum / static_cast<double>(v.size()));
}

bool Sums(const std::string& op) {
  return absl::StrContains(op, "Reduce") || op == "Add" || op == "Sub" || op == "Sum";
}

bool MovesData(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity" ||
         op == "Cast" || op == "Transpose" || op == "SliceTo" || op == "PadTo";
}

absl::flat_hash_map<std::string, Scale> ReferenceScales(const Program& f32, const CaptureObserver& ref) {
  absl::flat_hash_map<std::string, Scale> scales;
  for (const Node* n : f32.results.memory_plan.order) {
    Scale in;
    for (const Value* v : n->inputs) {
      auto it = v ? scales.find(v->name) : scales.end();
      if (it != scales.end() && it->second.rms >= in.rms) in = it->second;
    }
    for (const Value* v : n->outputs) {
      auto c = v ? ref.captured().find(v->name) : ref.captured().end();
      if (c == ref.captured().end()) continue;
      Scale s{Rms(c->second.values), false};
      if ((Sums(n->op) && s.rms < 1e-3 * in.rms) || (MovesData(n->op) && in.cancelled)) s = {in.rms, true};
      scales[v->name] = s;
    }
  }
  return scales;
}

// RMS(out - ref) / scale: with scale = RMS(ref), the norm-wise relative error
// ||out - ref|| / ||ref|| of the numerics contract.
double RelativeError(const std::vector<double>& out, const std::vector<double>& ref, double divide_out_by,
                     double scale) {
  double diff = 0;
  bool out_bad = false, ref_bad = false;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = out[i] / divide_out_by;
    out_bad = out_bad || !std::isfinite(o);
    ref_bad = ref_bad || !std::isfinite(ref[i]);
    diff += (o - ref[i]) * (o - ref[i]);
  }
  if (out_bad && !ref_bad) return INFINITY;
  if (ref_bad) return out_bad ? 0 : INFINITY;  // both saw the overflow, or only FP32 did
  const double rms_diff = ref.empty() ? 0 : std::sqrt(diff / static_cast<double>(ref.size()));
  if (scale == 0) return rms_diff == 0 ? 0 : INFINITY;
  return rms_diff / scale;
}

// Backward: created by autodiff, or computed from a value of the backward pass (a cast
// the FP8 pass put after a backward GEMM).
absl::flat_hash_set<const Node*> BackwardNodes(const Program& program) {
  absl::flat_hash_set<const Node*> backward;
  for (const Node* n : program.results.memory_plan.order) {
    auto it = program.node_origin.find(n->id);
    bool b = it != program.node_origin.end() && it->second == "autodiff";
    for (const Value* in : n->inputs) b = b || (in && in->producer && backward.contains(in->producer));
    if (b) backward.insert(n);
  }
  return backward;
}

// The node that computed a value, looking through casts (autocast and the FP8 pass cast
// a GEMM's output and give the cast the original name).
const Node* ComputingNode(const Value& v) {
  const Node* n = v.producer;
  while (n && n->op == "Cast" && !n->inputs.empty() && n->inputs[0] && n->inputs[0]->producer) {
    n = n->inputs[0]->producer;
  }
  return n;
}

std::string FusedActivation(const Value& v) {
  const Node* n = ComputingNode(v);
  return n ? n->attrs.GetString("mpc_activation", "") : "";
}

// The name of the FP32 program's value that `v` (an output of `node` in the other program)
// computes. Usually its own name; but the epilogue fusion (a Gemm that applies its ReLU,
// mpc_activation) may run in one program and not in the other (an FP8 GEMM has no
// epilogue), so a GEMM output named X is post-activation in one and pre-activation in the
// other. The unfused program's activation output then corresponds to the fused X, and
// the unfused X to nothing. A value a pass made and named ("fuse-epilogues/Reshape_2:0")
// is another tensor when the pass numbered its nodes differently in the two programs (it
// rewrote other GEMMs): it corresponds only when both were made by the same op from inputs
// of the same names. "" when there is no counterpart.
bool SameComputation(const Value& a, const Value& b) {
  const Node* x = a.producer;
  const Node* y = b.producer;
  if (!x || !y) return !x && !y;
  if (x->op != y->op || x->inputs.size() != y->inputs.size()) return false;
  for (size_t i = 0; i < x->inputs.size(); ++i) {
    const Value* p = x->inputs[i];
    const Value* q = y->inputs[i];
    if ((p == nullptr) != (q == nullptr) || (p && p->name != q->name)) return false;
  }
  return true;
}

std::string CounterpartIn(const Program& f32, const Program& other, const Node& node, const Value& v) {
  const Value* same = f32.graph->FindValue(v.name);
  // (a pass's own names start with its name: a Cast that took a GEMM's name is not one)
  auto origin = other.node_origin.find(node.id);
  const bool pass_made = origin != other.node_origin.end() && origin->second != "model" &&
                         absl::StartsWith(v.name, origin->second + "/");
  if (same && pass_made && !SameComputation(*same, v)) same = nullptr;
  if (same && FusedActivation(*same) == FusedActivation(v)) return v.name;
  if (node.inputs.size() == 1 && node.inputs[0]) {
    const Value* x = f32.graph->FindValue(node.inputs[0]->name);
    if (x && FusedActivation(*x) == node.op && FusedActivation(*node.inputs[0]).empty()) return x->name;
  }
  return "";
}

// Compares what the lower-precision probe computed with FP32's, value by value.
ParityProbe CompareStep(const Program& f32, const CaptureObserver& ref, const Program& other,
                        const CaptureObserver& out, double loss_scale) {
  ParityProbe probe;
  const absl::flat_hash_map<const Value*, double> tolerance = InheritedTolerances(other);
  const absl::flat_hash_set<const Value*> scaled = ScaledValues(other);
  const absl::flat_hash_map<std::string, Scale> scales = ReferenceScales(f32, ref);
  const absl::flat_hash_set<const Node*> backward = BackwardNodes(other);
  std::map<std::string, const PaintDecision*> paint;
  for (const PaintDecision& d : other.results.autocast.paint) paint.emplace(d.node, &d);
  auto row = [&](const std::string& name, const Value* v, const Captured& o, const Captured& r,
                 const std::string& ref_name) {
    ParityValue p;
    p.value = name;
    // Named after the node that computed it (a GEMM rather than the cast after it).
    const Node* computing = ComputingNode(*v) ? ComputingNode(*v) : o.node;
    p.node = computing->name;
    p.op = computing->op;
    p.dtype = DTypeName(v->dtype);
    p.elements = static_cast<int64_t>(o.values.size());
    auto sc = scales.find(ref_name);
    const Scale scale = sc != scales.end() ? sc->second : Scale{Rms(r.values), false};
    p.relative_error = RelativeError(o.values, r.values, scaled.contains(v) ? loss_scale : 1.0, scale.rms);
    p.cancelled = scale.cancelled;
    auto t = tolerance.find(v);
    p.tolerance = t != tolerance.end() ? t->second : ToleranceOf(v->dtype, false);
    auto origin = other.node_origin.find(computing->id);
    p.origin = origin != other.node_origin.end() ? origin->second : "model";
    p.phase = backward.contains(o.node) ? "backward" : "forward";
    auto decision = paint.find(computing->name);
    if (decision != paint.end()) p.reason = decision->second->reason;
    return p;
  };
  for (const Node* n : other.results.memory_plan.order) {
    for (const Value* v : n->outputs) {
      if (!v) continue;
      auto o = out.captured().find(v->name);
      if (o == out.captured().end()) continue;
      // The FP32 value this one computes: the same name, unless a fusion gave the name
      // another meaning in one of the programs.
      const std::string ref_name = CounterpartIn(f32, other, *n, *v);
      auto r = ref_name.empty() ? ref.captured().end() : ref.captured().find(ref_name);
      if (r == ref.captured().end() || r->second.values.size() != o->second.values.size()) {
        ++probe.not_compared;
        continue;
      }
      probe.values.push_back(row(v->name, v, o->second, r->second, ref_name));
      const ParityValue& last = probe.values.back();
      if (!(last.relative_error <= last.tolerance)) {
        const int index = static_cast<int>(probe.values.size()) - 1;
        if (probe.first_past_tolerance < 0) probe.first_past_tolerance = index;
        const bool gemm = last.op == "Gemm" || last.op == "MatMul" || last.op == "Fp8Gemm";
        if (gemm && probe.first_gemm_past_tolerance < 0) probe.first_gemm_past_tolerance = index;
      }
    }
  }
  const std::map<std::string, const Value*> ref_grads = AppliedGradients(f32);
  for (const auto& [param, grad] : AppliedGradients(other)) {
    auto r = ref_grads.find(param);
    if (r == ref_grads.end()) continue;
    auto o_cap = out.captured().find(grad->name);
    auto r_cap = ref.captured().find(r->second->name);
    if (o_cap == out.captured().end() || r_cap == ref.captured().end() ||
        o_cap->second.values.size() != r_cap->second.values.size()) {
      continue;
    }
    probe.gradients.push_back(row(param, grad, o_cap->second, r_cap->second, r->second->name));
  }
  return probe;
}

// Writes `from`'s training state into `to`: every persistent tensor both programs hold
// that is not precision-specific (master weights, optimizer state, step counters; the
// low-precision weight copies follow their master weights), in `to`'s (padded) layout.
absl::Status CopyTrainingState(const Engine::Impl& from, Engine::Impl& to) {
  for (const Value* v : to.train_exec->PersistentValues()) {
    if (IsPrecisionState(v->name)) continue;
    auto t = from.ReadModelShaped(v->name);
    if (!t.ok()) continue;  // only `to` has it
    Tensor value = *std::move(t);
    if (!v->logical_shape.empty()) value = value.PaddedTo(v->shape);
    MPC_RETURN_IF_ERROR(to.train_exec->WritePersistent(v->name, value));
  }
  return absl::OkStatus();
}

// The precision-specific state (loss scale, FP8 scaling history) `from` has reached.
absl::Status CopyPrecisionState(const Engine::Impl& from, Engine::Impl& to) {
  for (const Value* v : to.train_exec->PersistentValues()) {
    if (!IsPrecisionState(v->name) || absl::EndsWith(v->name, ".lowp")) continue;
    MPC_ASSIGN_OR_RETURN(Tensor t, from.train_exec->ReadPersistent(v->name));
    MPC_RETURN_IF_ERROR(to.train_exec->WritePersistent(v->name, t));
  }
  return absl::OkStatus();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

bool SameBatch(const Engine::Impl& a, const Engine::Impl& b) {
  return a.feature_batch.bytes() == b.feature_batch.bytes() && a.label_batch.bytes() == b.label_batch.bytes() &&
         std::memcmp(a.feature_batch.raw(), b.feature_batch.raw(), a.feature_batch.bytes()) == 0 &&
         std::memcmp(a.label_batch.raw(), b.label_batch.raw(), a.label_batch.bytes()) == 0;
}

}  // namespace

absl::StatusOr<ParityReport> Engine::Parity(const ParityOptions& options) {
  if (options.precision.empty()) {
    return absl::InvalidArgumentError("parity: no precision to compare with f32; pass --precision bf16|fp16|fp8|tf32");
  }
  MPC_ASSIGN_OR_RETURN(const PrecisionSpec::Compute compute, ParsePrecision(options.precision));
  if (compute == PrecisionSpec::F32) {
    return absl::InvalidArgumentError(
        "parity: --precision f32 compares FP32 with itself; pass the precision to check: bf16, fp16, fp8 or tf32");
  }
  if (options.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("parity: --steps ", options.steps, " is negative"));
  }
  EngineOptions base = options.engine;
  base.use_checkpoint_dir = false;
  base.resume = base.resume_if_present = base.overwrite_checkpoints = false;
  base.metrics_path.clear();
  base.check_numerics = false;
  base.tensor_stats_every_n_steps = 0;
  EngineOptions f32_options = base, other_options = base;
  f32_options.precision = "f32";
  other_options.precision = options.precision;
  // The FP32 run picks the device ("auto" resolved once); the others follow it.
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Engine> f32, Create(f32_options));
  other_options.device = absl::StartsWith(f32->impl_->backend->name(), "cuda") ? "cuda" : "cpu";
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Engine> other, Create(other_options));
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Engine> probe, Create(other_options));
  Impl& a = *f32->impl_;
  Impl& b = *other->impl_;
  Impl& q = *probe->impl_;
  // The same initial weights, whatever each program's layout.
  MPC_RETURN_IF_ERROR(CopyTrainingState(a, b));

  ParityReport report;
  report.precision = options.precision;
  // FP8: the recipe the other program compiled with (the spec's, or --fp8-recipe's).
  if (!b.train_program.results.fp8.recipe.empty()) report.precision += " (" + b.train_program.results.fp8.recipe + ")";
  report.steps = options.steps > 0 ? std::min(options.steps, a.total_steps) : a.total_steps;
  report.planned_peak_bytes_f32 = f32->planned_peak_bytes();
  report.planned_peak_bytes_other = other->planned_peak_bytes();
  std::vector<int64_t> probes = options.probe_steps;
  if (probes.empty()) probes = {1, report.steps};
  for (int64_t s : probes) {
    if (s < 1 || s > report.steps) {
      return absl::InvalidArgumentError(
          absl::StrCat("parity: probe step ", s, " is outside the run's steps 1..", report.steps));
    }
  }
  std::sort(probes.begin(), probes.end());
  probes.erase(std::unique(probes.begin(), probes.end()), probes.end());

  CaptureObserver ref_capture, out_capture;
  std::vector<double> ms_f32, ms_other;
  size_t next_probe = 0;
  for (int64_t step = 1; step <= report.steps; ++step) {
    const bool probing = next_probe < probes.size() && probes[next_probe] == step;
    if (probing) {
      // The probe engine takes the FP32 run's state, position and step, and the
      // lower-precision run's loss scale and FP8 history.
      MPC_RETURN_IF_ERROR(CopyTrainingState(a, q));
      MPC_RETURN_IF_ERROR(CopyPrecisionState(b, q));
      q.batches->Seek(a.batches->epoch(), a.batches->batch_in_epoch());
      q.step = a.step;
      a.step_observer = &ref_capture;
      q.step_observer = &out_capture;
    }
    const auto t0 = std::chrono::steady_clock::now();
    MPC_ASSIGN_OR_RETURN(StepMetrics ma, f32->Step());
    const auto t1 = std::chrono::steady_clock::now();
    MPC_ASSIGN_OR_RETURN(StepMetrics mb, other->Step());
    const auto t2 = std::chrono::steady_clock::now();
    if (!SameBatch(a, b)) {
      return absl::InternalError(absl::StrCat("parity: the two runs drew different batches at step ", step,
                                              "; this is a bug in mpc, please report it with the spec"));
    }
    report.loss_f32.push_back(ma.loss);
    report.loss_other.push_back(mb.loss);
    report.skipped_other.push_back(mb.skipped);
    if (probing) {
      double scale = 1;
      if (const Value* s = q.train_program.results.loss_scaling.loss_scale) {
        MPC_ASSIGN_OR_RETURN(Tensor t, q.train_exec->ReadPersistent(s->name));
        scale = t.GetAsDouble(0);
      }
      MPC_ASSIGN_OR_RETURN(StepMetrics mq, probe->Step());
      ParityProbe p = CompareStep(a.train_program, ref_capture, q.train_program, out_capture, scale);
      p.step = step;
      p.loss_f32 = ma.loss;
      p.loss_other = mq.loss;
      report.probes.push_back(std::move(p));
      a.step_observer = q.step_observer = nullptr;
      ref_capture.Clear();
      out_capture.Clear();
      ++next_probe;
    } else {
      ms_f32.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      ms_other.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
  }
  report.step_ms_f32 = Median(ms_f32);
  report.step_ms_other = Median(ms_other);
  MPC_ASSIGN_OR_RETURN(report.eval_f32, f32->Evaluate());
  MPC_ASSIGN_OR_RETURN(report.eval_other, other->Evaluate());
  for (const std::string& n : other->notices()) report.notices.push_back(n);
  // What the precision changed in the program: a run that compares f32 with a precision
  // the passes did not apply (FP8 on a model without eligible GEMMs) must say so.
  const CompileResults& r = b.train_program.results;
  if (compute == PrecisionSpec::FP8) {
    int64_t forward = 0;
    for (const Fp8Result::Gemm& g : r.fp8.gemms) forward += g.node == g.forward_node;
    std::string note = r.fp8.fallback.empty()
                           ? absl::StrCat("fp8: ", forward, " forward GEMMs (and ", r.fp8.gemms.size() - forward,
                                          " backward) in FP8, ", r.fp8.skipped.size(), " left in bf16")
                           : absl::StrCat("fp8: ", r.fp8.fallback);
    for (const auto& [node, why] : r.fp8.skipped) absl::StrAppend(&note, "; ", node, ": ", why);
    report.notices.push_back(note);
  } else if (compute == PrecisionSpec::TF32) {
    report.notices.push_back(absl::StrCat("tf32: ", r.tf32.marked.size(), " f32 GEMMs/convolutions run in TF32"));
  }
  return report;
}

}  // namespace mpc

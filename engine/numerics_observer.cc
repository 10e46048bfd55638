// NumericsObserver (see numerics_observer.h).
#include "engine/numerics_observer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/float8.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

// Inputs listed in full in an error; beyond it only those holding non-finite values.
constexpr size_t kMaxInputsShown = 6;

// A tensor the kernel wrote, copied to the host.
absl::StatusOr<Tensor> ToHost(const TensorView& view, Backend& backend) {
  Tensor host(view.dtype, view.shape);
  if (host.bytes() > 0) MPC_RETURN_IF_ERROR(backend.CopyToHost(host.raw(), view.data, host.bytes()));
  return host;
}

struct Summary {
  double min = INFINITY, max = -INFINITY, amax = 0;
  int64_t nan = 0, pos_inf = 0, neg_inf = 0, zeros = 0, subnormal = 0;
};

Summary Summarize(const Tensor& t) {
  Summary s;
  const double smallest_normal = t.dtype() == DType::kF16    ? 6.103515625e-05
                                 : t.dtype() == DType::kBF16 ? 1.1754943508222875e-38
                                                             : 0.0;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = t.GetAsDouble(i);
    if (std::isnan(v)) {
      ++s.nan;
      continue;
    }
    if (std::isinf(v)) {
      ++(v > 0 ? s.pos_inf : s.neg_inf);
      continue;
    }
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    s.amax = std::max(s.amax, std::fabs(v));
    if (v == 0) ++s.zeros;
    if (v != 0 && std::fabs(v) < smallest_normal) ++s.subnormal;
  }
  return s;
}

std::string Describe(const Value& v) {
  const std::string type = absl::StrCat(DTypeName(v.dtype), ShapeToString(v.shape));
  switch (v.kind) {
    case ValueKind::kActivation:
      return absl::StrCat("'", v.name, "' ", type, " from node '", v.producer ? v.producer->name : "?", "'");
    default:
      return absl::StrCat("'", v.name, "' ", type, " (", ValueKindName(v.kind), ")");
  }
}

std::string Stats(const Summary& s) {
  const int64_t bad = s.nan + s.pos_inf + s.neg_inf;
  std::string out = s.min <= s.max ? absl::StrFormat("min %.6g, max %.6g, amax %.6g", s.min, s.max, s.amax)
                                   : std::string("no finite value");
  absl::StrAppend(&out, ", ", bad, " non-finite");
  if (bad > 0) absl::StrAppend(&out, " (", s.nan, " NaN, ", s.pos_inf, " +inf, ", s.neg_inf, " -inf)");
  return out;
}

}  // namespace

NumericsObserver::NumericsObserver(const std::vector<Node*>& order, const std::map<int, std::string>& origins,
                                   bool loss_scaled)
    : origins_(origins), loss_scaled_(loss_scaled) {
  for (const Node* n : order) {
    const OpDef* def = OpRegistry::Global().Find(n->op);
    Phase p = Phase::kForward;
    if (def && def->has_side_effects) {
      p = Phase::kUpdate;
    } else if (Origin(*n) == "autodiff") {
      p = Phase::kBackward;
    } else {
      for (const Value* in : n->inputs) {
        if (in && in->producer && phase_.contains(in->producer) && phase_.at(in->producer) == Phase::kBackward) {
          p = Phase::kBackward;
        }
      }
    }
    phase_[n] = p;
  }
}

std::string NumericsObserver::Origin(const Node& node) const {
  auto it = origins_.find(node.id);
  return it == origins_.end() ? "model" : it->second;
}

const char* NumericsObserver::PhaseOf(const Node& node) const {
  auto it = phase_.find(&node);
  if (it == phase_.end()) return "forward";
  switch (it->second) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kUpdate:
      return "update";
  }
  return "forward";
}

void NumericsObserver::BeginStep(int64_t step, bool check, bool stats) {
  step_ = step;
  check_ = check;
  stats_on_ = stats;
  overflow_node_.clear();
  stats_.clear();
}

absl::Status NumericsObserver::AfterNode(const Node& node, const KernelContext& ctx, Backend& backend) {
  if (check_) MPC_RETURN_IF_ERROR(Check(node, ctx, backend));
  if (stats_on_) MPC_RETURN_IF_ERROR(Collect(node, ctx, backend));
  return absl::OkStatus();
}

absl::Status NumericsObserver::Check(const Node& node, const KernelContext& ctx, Backend& backend) {
  const auto it = phase_.find(&node);
  const Phase phase = it == phase_.end() ? Phase::kForward : it->second;
  // After an expected overflow the step is skipped: its gradients and gated updates are
  // not finite by design.
  if (!overflow_node_.empty() && phase != Phase::kForward) return absl::OkStatus();
  // What the node wrote: its outputs, or the state an update rewrote in place.
  std::vector<std::pair<const Value*, const TensorView*>> written;
  for (size_t i = 0; i < node.outputs.size(); ++i) written.emplace_back(node.outputs[i], &ctx.outputs[i]);
  if (phase == Phase::kUpdate) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Value* in = node.inputs[i];
      if (in && in->persistent()) written.emplace_back(in, &ctx.inputs[i]);
    }
  }
  for (const auto& [value, view] : written) {
    if (!IsFloating(value->dtype)) continue;
    MPC_ASSIGN_OR_RETURN(Tensor host, ToHost(*view, backend));
    if (host.NonFiniteCount() == 0) continue;
    if (phase == Phase::kBackward && loss_scaled_) {
      overflow_node_ = node.name;  // expected under loss scaling; the step is skipped
      return absl::OkStatus();
    }
    const Summary bad = Summarize(host);
    // The float inputs' statistics, fetched once: they decide whether this is a fault and
    // are what the error shows.
    std::vector<std::optional<Summary>> input_stats(node.inputs.size());
    bool input_carries_infinity = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Value* in = node.inputs[i];
      if (!in || !IsFloating(in->dtype)) continue;
      MPC_ASSIGN_OR_RETURN(Tensor x, ToHost(ctx.inputs[i], backend));
      input_stats[i] = Summarize(x);
      input_carries_infinity = input_carries_infinity || input_stats[i]->pos_inf + input_stats[i]->neg_inf > 0;
    }
    // Infinities a model carries by design (an additive -inf attention mask in a constant
    // or buffer) flow on through the ops that read them: an infinity is a fault only when
    // every input was finite. A NaN always is.
    if (bad.nan == 0 && input_carries_infinity) continue;
    // The inputs with their statistics; of a node with many (a fused update), those that
    // hold non-finite values and the first few.
    std::vector<std::string> inputs;
    int64_t finite_left_out = 0;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Value* in = node.inputs[i];
      if (!in) continue;
      std::string line = Describe(*in);
      bool finite = true;
      if (input_stats[i]) {
        const Summary& s = *input_stats[i];
        finite = s.nan + s.pos_inf + s.neg_inf == 0;
        absl::StrAppend(&line, ": ", Stats(s));
      }
      if (finite && inputs.size() >= kMaxInputsShown) {
        ++finite_left_out;
        continue;
      }
      inputs.push_back(line);
    }
    if (finite_left_out > 0) inputs.push_back(absl::StrCat("and ", finite_left_out, " more inputs, all finite"));
    const std::string origin = Origin(node);
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step_, ": the first non-finite value of the step is in ",
        value->producer == &node ? "output" : "state", " '", value->name, "' of node '", node.name, "' (", node.op,
        ", ", DTypeName(value->dtype), ", ", PhaseOf(node), ", ",
        origin == "model" ? "from the model" : absl::StrCat("created by pass '", origin, "'"), "): ", bad.nan, " NaN, ",
        bad.pos_inf, " +inf, ", bad.neg_inf, " -inf of ", host.num_elements(), " values. Its inputs: ",
        absl::StrJoin(inputs, "; "), ". Every node that ran before it in this step produced finite values"));
  }
  return absl::OkStatus();
}

absl::Status NumericsObserver::Collect(const Node& node, const KernelContext& ctx, Backend& backend) {
  const auto it = phase_.find(&node);
  if (it != phase_.end() && it->second == Phase::kUpdate) return absl::OkStatus();
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const Value* out = node.outputs[i];
    if (!IsFloating(out->dtype)) continue;
    MPC_ASSIGN_OR_RETURN(Tensor host, ToHost(ctx.outputs[i], backend));
    const Summary s = Summarize(host);
    TensorStats t;
    t.tensor = out->name;
    t.node = node.name;
    t.op = node.op;
    t.phase = PhaseOf(node);
    t.dtype = DTypeName(out->dtype);
    t.elements = host.num_elements();
    t.amax = s.amax;
    t.min = s.min <= s.max ? s.min : 0;
    t.max = s.min <= s.max ? s.max : 0;
    t.zero_fraction = t.elements ? static_cast<double>(s.zeros) / t.elements : 0;
    t.nonfinite = s.nan + s.pos_inf + s.neg_inf;
    if (out->dtype == DType::kF16 || out->dtype == DType::kBF16) {
      t.subnormal_fraction = t.elements ? static_cast<double>(s.subnormal) / t.elements : 0;
    }
    if (node.op == "Fp8Quantize" && i == 0) {
      // q = code(x * scale) * scale_inv: a non-zero x whose q is 0 underflowed; |x * scale|
      // beyond the format's largest value saturated.
      MPC_ASSIGN_OR_RETURN(Tensor x, ToHost(ctx.inputs[0], backend));
      MPC_ASSIGN_OR_RETURN(Tensor scale, ToHost(ctx.inputs[1], backend));
      const double fp8_max = node.attrs.GetString("format", "e4m3") == "e5m2" ? kF8E5M2Max : kF8E4M3Max;
      const double sc = scale.GetAsDouble(0);
      int64_t under = 0, saturated = 0;
      for (int64_t k = 0; k < t.elements; ++k) {
        const double xv = x.GetAsDouble(k);
        under += xv != 0 && host.GetAsDouble(k) == 0;
        saturated += std::fabs(xv * sc) > fp8_max;
      }
      t.fp8_underflow_fraction = t.elements ? static_cast<double>(under) / t.elements : 0;
      t.fp8_saturated_fraction = t.elements ? static_cast<double>(saturated) / t.elements : 0;
    }
    stats_.push_back(std::move(t));
  }
  return absl::OkStatus();
}

}  // namespace mpc

// The op-numerics cases of the channels-last ops (mpc_channels_last = 1, set by
// passes/channels_last.h): every 2-D case of Conv, ConvGradInput, ConvGradWeight, MaxPool,
// MaxPoolGrad, BatchNormalization and BatchNormGrad in the Conv and Norm families, again
// with its activations ([N, C, H, W] inputs and outputs) stored [N, H, W, C]. The
// reference is the channels-first case's own: activations transposed to channels-first,
// the reference run, its activation output transposed back. Gradient cases differentiate
// through the channels-last backward ops autodiff builds from the forward ones.
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "graph/ops_conv_util.h"
#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

struct Layout {
  std::vector<int> inputs;  // the activation inputs
  bool output = true;       // output 0 is an activation
};

// Per op: which operands are activations (the rest are weights and per-channel vectors).
const absl::flat_hash_map<std::string, Layout>& Activations() {
  static const auto* layouts = new absl::flat_hash_map<std::string, Layout>{
      {"Conv", {{0}}},           {"ConvGradInput", {{0}}},      {"ConvGradWeight", {{0, 1}, false}}, {"MaxPool", {{0}}},
      {"MaxPoolGrad", {{0, 1}}}, {"BatchNormalization", {{0}}}, {"BatchNormGrad", {{0, 1}}},
  };
  return *layouts;
}

bool TwoDimensional(const OpCase& c, const Layout& l) {
  for (int i : l.inputs) {
    if (c.inputs[i].shape.size() != 4) return false;
  }
  return true;
}

OpCase ChannelsLastCase(const OpCase& base, const Layout& l) {
  OpCase c = base;
  c.name = absl::StrCat("ChannelsLast_", base.name);
  c.attrs.Set("mpc_channels_last", int64_t{1});
  if (c.op == "ConvGradInput") {
    c.attrs.Set("input_shape", conv::ChannelsLastView(c.attrs.GetInts("input_shape", {})));
  }
  for (int i : l.inputs) {
    In& in = c.inputs[i];
    in.shape = conv::ChannelsLastView(in.shape);
    if (in.value.shape().size() == 4) in.value = RefTranspose(in.value, conv::ToChannelsLastPerm(4));
  }
  if (base.ref) {
    c.ref = [ref = base.ref, l](const std::vector<Tensor>& in) {
      std::vector<Tensor> first = in;
      for (int i : l.inputs) first[i] = RefTranspose(in[i], conv::ToChannelsFirstPerm(4));
      std::vector<Tensor> out = ref(first);
      if (l.output) out[0] = RefTranspose(out[0], conv::ToChannelsLastPerm(4));
      return out;
    };
  }
  return c;
}

std::vector<OpCase> ChannelsLastCases() {
  std::vector<OpCase> cases;
  for (const char* family : {"Conv", "Norm"}) {
    for (const OpCase& base : FamilyCases(family)) {
      auto it = Activations().find(base.op);
      if (it == Activations().end() || base.tf32 || !TwoDimensional(base, it->second)) continue;
      cases.push_back(ChannelsLastCase(base, it->second));
    }
  }
  return cases;
}

}  // namespace

MPC_REGISTER_OP_CASES(ChannelsLast, ChannelsLastCases);

}  // namespace mpc::opcases

// ONNX's backend node tests against mpc: every generated case (tools/onnx_node_tests,
// written into the build directory) whose ops are all in mpc's op registry is imported,
// compiled for evaluation in f32 and run on the CPU backend through the inference entry
// point (engine/inference.h); each output is compared with ONNX's expected data.
//
// Each case is one parameterised gtest and ends in one of:
//   PASS         every output matches: floats |got - want| <= atol + rtol * |want| per
//                element (ONNX's defaults, rtol 1e-3, atol 1e-7; one ulp, 2^-7, for bf16
//                outputs, whose rounding ONNX 1.12's reference truncates) and, for f32/f64,
//                ||got - want|| / ||want|| < 1e-5 (docs/numerics.md's f32 tolerance); NaN only
//                where expected; integers and bools exactly.
//   FAIL         wrong numbers, shapes or dtypes, or an error that is not Unimplemented.
//   UNSUPPORTED  a form mpc deliberately does not support: the compiler returned
//                UnimplementedError (message kept), or the importer rejected the opset:
//                below 13, a model is read as opset 17 only when none of its ops has
//                changed definition since (e.g. Conv-11, Xor-7 qualify; Softmax-11 not).
//   SKIP         not claimed: the case uses an op mpc does not register, its expected
//                output is random (training-mode Dropout draws from numpy's generator),
//                or its input data contradicts the model's declared input types.
// Inputs that configure an op (Reshape's shape, Slice's starts, axes, ...) are fed as graph
// inputs by ONNX; mpc compiles static shapes, so the harness bakes them into the model as
// initializers first and says so in the reason column.
// Any FAIL fails the test. The table of all cases and the counts per status are printed
// and written to <build>/onnx_node_conformance.txt.
//
// MPC_ONNX_NODE_TESTS=DIR overrides the case directory (DIR/test_*/model.onnx). The cases at
// opsets 18-23 (onnx 1.23) are committed in tests/conformance/onnx_node_18_23 and run too,
// named opset18_23/test_*.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/inference.h"
#include "graph/onnx_expand.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

#ifndef MPC_ONNX_NODE_TEST_DIR
#define MPC_ONNX_NODE_TEST_DIR ""
#endif
#ifndef MPC_CONFORMANCE_REPORT
#define MPC_CONFORMANCE_REPORT ""
#endif

namespace mpc {
namespace {

namespace fs = std::filesystem;

constexpr double kRtol = 1e-3;  // onnx.backend.test.runner's defaults
constexpr double kAtol = 1e-7;
constexpr double kRtolBf16 = 1.0 / 128;  // one bf16 ulp
constexpr double kNormRel = 1e-5;        // docs/numerics.md: f32 results vs the reference

std::string CaseDir() {
  const char* env = std::getenv("MPC_ONNX_NODE_TESTS");
  return env && *env ? std::string(env) : std::string(MPC_ONNX_NODE_TEST_DIR);
}

// The cases at opsets 18-23, from onnx 1.23 (Debian's 1.12 stops at 17), are committed:
// tools/onnx_node_tests/gen_onnx_node_tests_18_23.py. Their names carry this prefix.
constexpr char kNewOpsetPrefix[] = "opset18_23/";

std::string NewOpsetCaseDir() { return std::string(MPC_SOURCE_DIR) + "/tests/conformance/onnx_node_18_23"; }

fs::path CasePath(const std::string& name) {
  if (absl::StartsWith(name, kNewOpsetPrefix)) return fs::path(NewOpsetCaseDir()) / name.substr(strlen(kNewOpsetPrefix));
  return fs::path(CaseDir()) / name;
}

std::vector<std::string> DiscoverCases() {
  std::vector<std::string> cases;
  std::error_code ec;
  for (const auto& [dir, prefix] : {std::pair<std::string, std::string>{CaseDir(), ""},
                                    std::pair<std::string, std::string>{NewOpsetCaseDir(), kNewOpsetPrefix}}) {
    if (dir.empty() || !fs::is_directory(dir, ec)) continue;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.is_directory() && fs::exists(entry.path() / "model.onnx")) {
        cases.push_back(prefix + entry.path().filename().string());
      }
    }
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

// ---- TensorProto files ------------------------------------------------------------

template <typename Dst, typename Field>
void CopyTyped(const Field& field, Tensor& out) {
  for (int i = 0; i < field.size(); ++i) out.data<Dst>()[i] = static_cast<Dst>(field.Get(i));
}

absl::StatusOr<Tensor> FromProto(const onnx::TensorProto& proto, const std::string& what) {
  // numpy has no bfloat16: ONNX stores bf16 test data as uint16 bit patterns.
  const int32_t type = proto.data_type() == onnx::TensorProto::UINT16 ? onnx::TensorProto::BFLOAT16 : proto.data_type();
  auto dtype = DTypeFromOnnx(type);
  if (!dtype.ok()) return absl::Status(dtype.status().code(), absl::StrCat(what, ": ", dtype.status().message()));
  Shape shape(proto.dims().begin(), proto.dims().end());
  Tensor t(*dtype, shape);
  const int64_t n = NumElements(shape);
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != t.bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": raw_data has ", proto.raw_data().size(), " bytes, expected ", t.bytes()));
    }
    if (n > 0) std::memcpy(t.raw(), proto.raw_data().data(), t.bytes());
    return t;
  }
  int have = 0;
  switch (*dtype) {
    case DType::kF32:
      have = proto.float_data_size();
      break;
    case DType::kF64:
      have = proto.double_data_size();
      break;
    case DType::kI64:
      have = proto.int64_data_size();
      break;
    default:
      have = proto.int32_data_size();
      break;
  }
  if (have != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", have, " values for shape ", ShapeToString(shape)));
  }
  switch (*dtype) {
    case DType::kF32:
      CopyTyped<float>(proto.float_data(), t);
      break;
    case DType::kF64:
      CopyTyped<double>(proto.double_data(), t);
      break;
    case DType::kI64:
      CopyTyped<int64_t>(proto.int64_data(), t);
      break;
    case DType::kI32:
      CopyTyped<int32_t>(proto.int32_data(), t);
      break;
    case DType::kF16:
    case DType::kBF16:
      CopyTyped<uint16_t>(proto.int32_data(), t);
      break;  // bit patterns
    default:
      CopyTyped<uint8_t>(proto.int32_data(), t);
      break;  // u8, bool, f8
  }
  return t;
}

absl::StatusOr<Tensor> ReadTensorPb(const fs::path& path, std::string* name) {
  std::ifstream in(path, std::ios::binary);
  onnx::TensorProto proto;
  if (!in || !proto.ParseFromIstream(&in)) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a TensorProto"));
  }
  *name = proto.name();
  return FromProto(proto, path.filename().string());
}

// input_K.pb / output_K.pb of one data set, in K order.
absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadTensors(const fs::path& dir,
                                                                        const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (int k = 0;; ++k) {
    const fs::path p = dir / absl::StrCat(prefix, "_", k, ".pb");
    if (!fs::exists(p)) break;
    std::string name;
    MPC_ASSIGN_OR_RETURN(Tensor t, ReadTensorPb(p, &name));
    out.emplace_back(name, std::move(t));
  }
  return out;
}

// ---- Comparison ---------------------------------------------------------------------

// Cases whose reference is less precise than the comparison below, by name, with why; for
// them only ONNX's own element-wise tolerance applies, and 16-bit outputs may differ by two
// ulps. Each was looked at: mpc's result is the more exact one.
struct LooserCase {
  const char* name;
  const char* why;
};
constexpr LooserCase kLooserCases[] = {
    // The expected output is written with four decimals (0.2841 for 2.5564 / 9).
    {"opset18_23/test_averagepool_2d_ceil_last_window_starts_on_pad", "expected values rounded to 4 decimals"},
    // ONNX's reference rounds Q*sqrt(scale), K*sqrt(scale), the scores and the probabilities
    // to the 16-bit dtype; mpc computes 16-bit attention in f32 and rounds once.
    {"opset18_23/test_attention_4d_causal_bf16", "16-bit intermediates rounded by the reference"},
    {"opset18_23/test_attention_4d_attn_mask_causal_bf16", "16-bit intermediates rounded by the reference"},
    {"opset18_23/test_attention_3d_causal_bf16", "16-bit intermediates rounded by the reference"},
    {"opset18_23/test_attention_4d_causal_fp16", "16-bit intermediates rounded by the reference"},
};

bool IsLooserCase(const std::string& name) {
  for (const LooserCase& c : kLooserCases) {
    if (name == c.name) return true;
  }
  return false;
}

// Empty when `got` matches `want`; otherwise why not (the largest error and where).
// `looser`: see kLooserCases.
std::string Mismatch(const Tensor& got, const Tensor& want, bool looser = false) {
  if (got.dtype() != want.dtype()) {
    return absl::StrCat("dtype ", DTypeName(got.dtype()), ", expected ", DTypeName(want.dtype()));
  }
  if (got.shape() != want.shape()) {
    return absl::StrCat("shape ", ShapeToString(got.shape()), ", expected ", ShapeToString(want.shape()));
  }
  const int64_t n = want.num_elements();
  if (!IsFloating(want.dtype())) {
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(static_cast<const char*>(got.raw()) + i * DTypeSize(got.dtype()),
                      static_cast<const char*>(want.raw()) + i * DTypeSize(want.dtype()),
                      DTypeSize(want.dtype())) != 0) {
        return absl::StrFormat("element %d is %g, expected %g (exact match required)", i, got.GetAsDouble(i),
                               want.GetAsDouble(i));
      }
    }
    return "";
  }
  // bf16 results may differ from the reference by one bf16 ulp (2^-7 relative, above ONNX's
  // 1e-3): ONNX 1.12's FLOAT_to_BFLOAT16 reference truncates, mpc rounds to nearest even.
  const bool sixteen_bit = want.dtype() == DType::kBF16 || want.dtype() == DType::kF16;
  const double rtol = (want.dtype() == DType::kBF16 ? kRtolBf16 : kRtol) * (looser && sixteen_bit ? 2 : 1);
  double max_err = 0, diff2 = 0, ref2 = 0;
  int64_t worst = -1, bad = 0, first_bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double a = got.GetAsDouble(i), b = want.GetAsDouble(i);
    bool ok;
    double err = 0;
    if (std::isnan(b) || std::isnan(a)) {
      ok = std::isnan(a) && std::isnan(b);
      err = ok ? 0 : INFINITY;
    } else if (std::isinf(b) || std::isinf(a)) {
      ok = a == b;
      err = ok ? 0 : INFINITY;
    } else {
      err = std::fabs(a - b);
      ok = err <= kAtol + rtol * std::fabs(b);
      diff2 += err * err;
      ref2 += b * b;
    }
    if (worst < 0 || err > max_err) {
      max_err = err;
      worst = i;
    }
    if (!ok && first_bad < 0) first_bad = i;
    bad += !ok;
  }
  const double norm_rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  const bool norm_checked = !looser && (want.dtype() == DType::kF32 || want.dtype() == DType::kF64);
  if (bad == 0 && (!norm_checked || norm_rel < kNormRel)) return "";
  std::string why = absl::StrFormat(
      "max |error| %.3g at element %d (got %.9g, expected %.9g); "
      "||error||/||expected|| %.3g",
      max_err, worst, got.GetAsDouble(worst), want.GetAsDouble(worst), norm_rel);
  if (bad > 0) {
    absl::StrAppend(&why, absl::StrFormat("; %d of %d elements outside rtol %g atol %g, first at %d", bad, n, rtol,
                                          kAtol, first_bad));
  } else {
    absl::StrAppend(&why, absl::StrFormat(" exceeds %g", kNormRel));
  }
  return why;
}

// ---- One case -------------------------------------------------------------------------

struct CaseResult {
  std::string name;
  std::string ops;
  std::string status;  // PASS FAIL UNSUPPORTED SKIP
  std::string reason;
  std::string note;  // how the harness adapted the case (inputs baked in)
  double ms = 0;
};

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s;
}

// A value's content when the case fixes it: a fed input, an initializer or a Constant.
std::optional<Tensor> KnownValue(const onnx::ModelProto& model, const std::map<std::string, Tensor>& feeds,
                                 const std::string& name) {
  if (auto it = feeds.find(name); it != feeds.end()) return it->second;
  for (const auto& init : model.graph().initializer()) {
    if (init.name() != name) continue;
    auto t = FromProto(init, name);
    if (t.ok()) return *std::move(t);
  }
  for (const auto& node : model.graph().node()) {
    if (node.op_type() == "Constant" && node.output_size() == 1 && node.output(0) == name) {
      for (const auto& a : node.attribute()) {
        if (a.name() == "value") {
          auto t = FromProto(a.t(), name);
          if (t.ok()) return *std::move(t);
        }
      }
    }
  }
  return std::nullopt;
}

// Empty when every fed input has the dtype and static dimensions its graph input declares;
// otherwise which does not (a few ONNX 1.12 cases feed data of another shape).
std::string InconsistentInput(const onnx::ModelProto& model, const std::map<std::string, Tensor>& feeds) {
  for (const auto& in : model.graph().input()) {
    auto it = feeds.find(in.name());
    if (it == feeds.end() || !in.type().has_tensor_type()) continue;
    const auto& tt = in.type().tensor_type();
    const Tensor& t = it->second;
    auto dtype = DTypeFromOnnx(tt.elem_type());
    bool ok = dtype.ok() && *dtype == t.dtype();
    if (ok && tt.has_shape()) {
      ok = tt.shape().dim_size() == static_cast<int>(t.shape().size());
      for (int d = 0; ok && d < tt.shape().dim_size(); ++d) {
        ok = !tt.shape().dim(d).has_dim_value() || tt.shape().dim(d).dim_value() == t.shape()[d];
      }
    }
    if (!ok) {
      std::vector<std::string> dims;
      for (const auto& d : tt.shape().dim()) dims.push_back(d.has_dim_value() ? absl::StrCat(d.dim_value()) : "?");
      return absl::StrCat("input '", in.name(), "' is declared ", dtype.ok() ? DTypeName(*dtype) : "?", "[",
                          absl::StrJoin(dims, ","), "] but its data is ", DTypeName(t.dtype()),
                          ShapeToString(t.shape()));
    }
  }
  return "";
}

// Training-mode Dropout with a nonzero ratio: ONNX's expected output comes from numpy's
// random generator, which no other implementation reproduces.
bool RandomReference(const onnx::ModelProto& model, const std::map<std::string, Tensor>& feeds) {
  for (const auto& node : model.graph().node()) {
    if (node.op_type() != "Dropout" || node.input_size() < 3 || node.input(2).empty()) continue;
    auto training = KnownValue(model, feeds, node.input(2));
    if (!training || training->num_elements() != 1 || training->GetAsDouble(0) == 0) continue;
    double ratio = 0.5;
    if (node.input_size() >= 2 && !node.input(1).empty()) {
      auto r = KnownValue(model, feeds, node.input(1));
      if (r && r->num_elements() == 1) ratio = r->GetAsDouble(0);
    }
    if (ratio != 0) return true;
  }
  return false;
}

// Inputs that configure an op rather than carry data (target shapes, axes, split sizes,
// ratios, bounds). mpc compiles static shapes, so it needs them constant; ONNX's node
// tests feed them as graph inputs. The harness bakes those inputs into the model as
// initializers with the case's values before compiling (the table says which), so the
// op's numerics are tested instead of reporting every such case as unsupported.
struct ConfigSlot {
  const char* op;
  int index;
};
constexpr ConfigSlot kConfigSlots[] = {
    {"Reshape", 1},         {"Expand", 1}, {"Tile", 1},   {"Squeeze", 1}, {"Unsqueeze", 1}, {"Slice", 1},
    {"Slice", 2},           {"Slice", 3},  {"Slice", 4},  {"Split", 1},   {"ReduceSum", 1}, {"Dropout", 1},
    {"Dropout", 2},         {"Clip", 1},   {"Clip", 2},   {"Pad", 1},     {"Pad", 2},       {"Pad", 3},
    {"ConstantOfShape", 0}, {"Range", 0},  {"Range", 1},  {"Range", 2},   {"OneHot", 1},    {"TopK", 1},
    {"CumSum", 1},          {"Resize", 1}, {"Resize", 2}, {"Resize", 3},  {"ReduceMean", 1}, {"Trilu", 1},
};

bool IsConfigSlot(const std::string& op, int index) {
  for (const ConfigSlot& slot : kConfigSlots) {
    if (op == slot.op && index == slot.index) return true;
  }
  return false;
}

// Graph inputs (by name) that feed a configuration slot of some node.
std::set<std::string> ConfigInputs(const onnx::ModelProto& model) {
  std::set<std::string> graph_inputs, out;
  for (const auto& in : model.graph().input()) graph_inputs.insert(in.name());
  for (const auto& node : model.graph().node()) {
    for (int i = 0; i < node.input_size(); ++i) {
      if (graph_inputs.count(node.input(i)) && IsConfigSlot(node.op_type(), i)) out.insert(node.input(i));
    }
  }
  return out;
}

CaseResult RunCase(const std::string& name) {
  CaseResult r;
  r.name = name;
  const auto start = std::chrono::steady_clock::now();
  auto done = [&](const std::string& status, const std::string& reason) {
    r.status = status;
    r.reason = OneLine(reason.empty() ? r.note : r.note.empty() ? reason : absl::StrCat(reason, " [", r.note, "]"));
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  const fs::path dir = CasePath(name);
  onnx::ModelProto model;
  {
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    if (!in || !model.ParseFromIstream(&in)) return done("FAIL", "model.onnx does not parse as a ModelProto");
  }
  // Which ops, and whether mpc claims them.
  std::set<std::string> ops, unregistered;
  for (const auto& node : model.graph().node()) {
    const std::string domain = node.domain().empty() || node.domain() == "ai.onnx" ? "" : node.domain();
    const std::string op = domain.empty() ? node.op_type() : absl::StrCat(domain, ".", node.op_type());
    ops.insert(op);
    if (op == "Constant") continue;
    const OpDef* def = domain.empty() ? OpRegistry::Global().Find(op) : nullptr;
    const bool expanded = domain.empty() && HasOnnxExpansion(op);  // imported as mpc ops (graph/onnx_expand.h)
    if (!expanded && (def == nullptr || !def->domain.empty())) unregistered.insert(op);
  }
  r.ops = ops.empty() ? "-" : absl::StrJoin(ops, "+");
  if (!unregistered.empty()) {
    return done("SKIP", absl::StrCat("not claimed: op ", absl::StrJoin(unregistered, ", "), " not registered"));
  }
  // The importer decides about the opset, op by op (graph/onnx_opsets.h): a case whose op
  // means, at the case's opset, a definition mpc does not read (Softmax-11, an opset below
  // the table's first row) is rejected with a message naming it, which makes it UNSUPPORTED.
  // Import + compile happen on the first Run; their Unimplemented errors are UNSUPPORTED.
  auto classify = [&](const absl::Status& st, const std::string& stage) {
    const bool unsupported =
        st.code() == absl::StatusCode::kUnimplemented || absl::StrContains(st.message(), "whose definition there mpc does not read") ||
        absl::StrContains(st.message(), "; mpc reads opsets up to");
    return done(unsupported ? "UNSUPPORTED" : "FAIL",
                absl::StrCat(stage, ": ", absl::StatusCodeToString(st.code()), ": ", st.message()));
  };
  absl::flat_hash_set<std::string> initializers;
  for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
  std::vector<std::string> input_names;  // input_K.pb feeds the K-th of these (ONNX's runner)
  for (const auto& in : model.graph().input()) {
    if (!initializers.contains(in.name())) input_names.push_back(in.name());
  }
  const std::set<std::string> config = ConfigInputs(model);
  InferenceOptions options;
  options.device = "cpu";
  options.precision = "f32";
  options.follow_model_training_mode = true;  // ONNX's expected data follows training_mode
  // The model as it is (parsed, checked, its inputs and outputs described) before any data.
  if (auto session = InferenceSession::FromFile((dir / "model.onnx").string(), options); !session.ok()) {
    return classify(session.status(), "load");
  }

  int sets = 0;
  for (int s = 0;; ++s) {
    const fs::path data = dir / absl::StrCat("test_data_set_", s);
    if (!fs::is_directory(data)) break;
    ++sets;
    auto inputs = ReadTensors(data, "input");
    if (!inputs.ok()) return classify(inputs.status(), absl::StrCat("data set ", s, " inputs"));
    auto expected = ReadTensors(data, "output");
    if (!expected.ok()) return classify(expected.status(), absl::StrCat("data set ", s, " outputs"));
    if (inputs->size() != input_names.size()) {
      return done("FAIL", absl::StrCat("the case has ", inputs->size(), " inputs; the model declares ",
                                       input_names.size(), " graph inputs"));
    }
    std::map<std::string, Tensor> all;
    for (size_t k = 0; k < input_names.size(); ++k) all[input_names[k]] = (*inputs)[k].second;
    if (const std::string bad = InconsistentInput(model, all); !bad.empty()) {
      return done("SKIP", absl::StrCat("not claimed: the case contradicts its model: ", bad));
    }
    if (RandomReference(model, all)) {
      return done("SKIP",
                  "not claimed: training-mode Dropout with a nonzero ratio; the expected output is "
                  "numpy's random draw (mpc runs Dropout in inference mode)");
    }
    // Configuration inputs become initializers holding this data set's values.
    onnx::ModelProto bound = model;
    std::map<std::string, Tensor> feeds;
    std::vector<std::string> folded;
    {
      auto* g = bound.mutable_graph();
      google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
      for (const auto& in : g->input()) {
        if (config.count(in.name()) && all.count(in.name())) continue;
        *kept.Add() = in;
      }
      g->mutable_input()->Swap(&kept);
      for (size_t k = 0; k < input_names.size(); ++k) {
        const std::string& in = input_names[k];
        if (!config.count(in)) {
          feeds[in] = all[in];
          continue;
        }
        std::ifstream pb(data / absl::StrCat("input_", k, ".pb"), std::ios::binary);
        onnx::TensorProto* init = g->add_initializer();
        if (!init->ParseFromIstream(&pb)) return done("FAIL", absl::StrCat("input_", k, ".pb does not parse"));
        init->set_name(in);
        folded.push_back(in);
      }
    }
    if (!folded.empty() && r.note.empty()) {
      r.note = absl::StrCat("config input", folded.size() > 1 ? "s " : " ", absl::StrJoin(folded, ","), " baked in");
    }
    auto session = InferenceSession::FromBytes(bound.SerializeAsString(), options, (dir / "model.onnx").string());
    if (!session.ok()) return classify(session.status(), "load");
    auto outputs = (*session)->Run(feeds);
    if (!outputs.ok()) return classify(outputs.status(), "run");
    if (outputs->size() != expected->size()) {
      return done("FAIL", absl::StrCat(outputs->size(), " outputs, expected ", expected->size()));
    }
    for (size_t k = 0; k < expected->size(); ++k) {
      const std::string why = Mismatch((*outputs)[k].value, (*expected)[k].second, IsLooserCase(name));
      if (!why.empty()) {
        return done("FAIL", absl::StrCat("data set ", s, " output ", k, " '", (*outputs)[k].name, "': ", why));
      }
    }
  }
  if (sets == 0) return done("FAIL", "no test_data_set_* directory");
  return done("PASS", "");
}

// ---- Results table ------------------------------------------------------------------------

std::vector<CaseResult>& Results() {
  static auto* results = new std::vector<CaseResult>();
  return *results;
}

class ReportEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    std::vector<CaseResult>& results = Results();
    if (results.empty()) return;
    std::sort(results.begin(), results.end(), [](const CaseResult& a, const CaseResult& b) { return a.name < b.name; });
    size_t name_w = 4, ops_w = 2;
    for (const CaseResult& r : results) {
      name_w = std::max(name_w, r.name.size());
      ops_w = std::min<size_t>(std::max(ops_w, r.ops.size()), 40);
    }
    std::map<std::string, int> counts;
    double total_ms = 0;
    std::ostringstream table;
    table << absl::StrFormat("%-*s  %-*s  %-11s  %s\n", name_w, "case", ops_w, "op", "status", "reason");
    for (const CaseResult& r : results) {
      counts[r.status]++;
      total_ms += r.ms;
      table << absl::StrFormat("%-*s  %-*s  %-11s  %s\n", name_w, r.name, ops_w, r.ops, r.status, r.reason);
    }
    std::string summary = absl::StrFormat(
        "ONNX node tests: %d cases: PASS %d, FAIL %d, UNSUPPORTED %d, SKIP (not claimed) %d; %.1f s in cases\n",
        results.size(), counts["PASS"], counts["FAIL"], counts["UNSUPPORTED"], counts["SKIP"], total_ms / 1000);
    std::map<std::string, int> newer;  // the opset 18-23 cases alone
    int newer_total = 0;
    for (const CaseResult& r : results) {
      if (absl::StartsWith(r.name, kNewOpsetPrefix)) ++newer[r.status], ++newer_total;
    }
    summary += absl::StrFormat("  of which opsets 18-23 (onnx 1.23): %d cases: PASS %d, FAIL %d, UNSUPPORTED %d, SKIP %d\n",
                               newer_total, newer["PASS"], newer["FAIL"], newer["UNSUPPORTED"], newer["SKIP"]);
    std::printf("%s%s", table.str().c_str(), summary.c_str());
    const std::string report = MPC_CONFORMANCE_REPORT;
    if (!report.empty()) {
      std::ofstream out(report);
      out << table.str() << summary;
      std::printf("table written to %s\n", report.c_str());
    }
    std::fflush(stdout);
  }
};

const auto* const kReport = ::testing::AddGlobalTestEnvironment(new ReportEnvironment());

// ---- Tests ----------------------------------------------------------------------------------

TEST(OnnxNodeConformance, CasesWereGenerated) {
  const std::vector<std::string> cases = DiscoverCases();
  EXPECT_GT(cases.size(), 100u) << "no ONNX node test cases under '" << CaseDir()
                                << "'; the build generates them (ninja onnx_node_test_data) with "
                                   "tools/onnx_node_tests/gen_onnx_node_tests.py and Debian's python3-onnx";
}

class OnnxNodeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxNodeTest, MatchesOnnx) {
  CaseResult r = RunCase(GetParam());
  Results().push_back(r);
  if (r.status == "FAIL") {
    ADD_FAILURE() << r.name << " (" << r.ops << "): " << r.reason;
  } else if (r.status == "UNSUPPORTED") {
    GTEST_SKIP() << "UNSUPPORTED: " << r.reason;
  } else if (r.status == "SKIP") {
    GTEST_SKIP() << r.reason;
  }
}

INSTANTIATE_TEST_SUITE_P(Onnx, OnnxNodeTest, ::testing::ValuesIn(DiscoverCases()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnnxNodeTest);

}  // namespace
}  // namespace mpc

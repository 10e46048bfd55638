// mpc: the compiler tool. `mpc compile` loads a model and a training spec, runs the
// pass pipeline up to memory-plan and reports what every pass did; it can dump the
// graph between passes and write the lowered program as ONNX (our ops in domain mpc).
// `mpc run` runs a model's forward graph on .npy inputs (engine/inference.h) and writes
// every output as DIR/NAME.npy. `mpc parity` trains a spec in FP32 and in a lower
// precision side by side and reports where they part ways (Engine::Parity).
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "engine/dataset.h"
#include "engine/device.h"
#include "engine/inference.h"
#include "engine/memory_budget.h"
#include "engine/mpc.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "graph/onnx_export.h"
#include "tools/compile_report.h"
#include "tools/flag_normalize.h"
#include "tools/parity_report.h"

ABSL_FLAG(std::string, model, "", "ONNX model; overrides the spec's `model`");
ABSL_FLAG(std::string, spec, "", "training spec (mpc.TrainSpec, protobuf text) (required)");
ABSL_FLAG(std::string, report, "", "write the JSON pass report here");
ABSL_FLAG(std::string, dump_after, "", "dump the graph (text and DOT) after each pass whose name matches this regex");
ABSL_FLAG(std::string, dump_dir, "", "directory for --dump-after files");
ABSL_FLAG(std::string, disable_passes, "", "comma-separated pass names to skip");
ABSL_FLAG(std::string, o, "", "write the compiled training program as ONNX (domain mpc for our ops)");
ABSL_FLAG(std::string, device, "", "compile for this backend's capabilities (cpu, cuda); overrides the spec");
ABSL_FLAG(std::string, precision, "", "f32, tf32, bf16, fp16 or fp8; overrides the spec's precision.compute");
ABSL_FLAG(std::string, fp8_recipe, "",
          "delayed, current, rowwise or block: the FP8 scaling recipe with --precision fp8; overrides the spec's "
          "fp8.recipe");
ABSL_FLAG(std::string, recompute, "",
          "none, selective, full or auto (the least that fits memory.limit_mb): activations recomputed in the "
          "backward instead of kept; overrides the spec's memory.recompute");
ABSL_FLAG(std::string, loss_scaling, "", "off, dynamic or static:S; overrides the spec's loss_scaling");
ABSL_FLAG(int32_t, pad_multiple, 0,
          "pad Gemm, MatMul and Conv weights to this multiple (1: no padding); overrides the spec");
ABSL_FLAG(bool, fused_attention, false,
          "compile attention to one FusedAttention op even on the CPU (whose own path is faster): the graph a GPU "
          "with fused attention runs, to check its numerics here");
ABSL_FLAG(bool, eval, false, "compile the evaluation program instead of the training program");
ABSL_FLAG(int32_t, ranks, 1,
          "mpc compile: the training program of rank 0 of a data-parallel job of this many ranks (its share of "
          "the batch, the AllReduce buckets); with more than one, also the per-rank memory table");
ABSL_FLAG(bool, memory_table, false,
          "mpc compile: print per-rank memory (weights, gradients, optimizer state, activations, communication) "
          "for each ZeRO stage and recomputation policy (on by default with --ranks > 1)");
ABSL_FLAG(std::vector<std::string>, input, {},
          "mpc run: NAME=FILE.npy feeds graph input NAME; repeat the flag once per input");
ABSL_FLAG(std::string, output_dir, "", "mpc run: write each graph output here as NAME.npy (created if missing)");
ABSL_FLAG(bool, check_numerics, false,
          "mpc run: check every op's outputs and fail at the first NaN/inf, naming the op");
ABSL_FLAG(int64_t, steps, 0, "mpc parity: steps of both runs (0: the spec's whole schedule)");
ABSL_FLAG(std::vector<std::string>, probe_steps, {},
          "mpc parity: 1-based steps at which every node output is compared (default: the first and the last)");
ABSL_FLAG(double, max_accuracy_drop, 0.01,
          "mpc parity: exit 1 when the lower precision's final accuracy is more than this below FP32's "
          "(0.01 = one point)");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "mpc: error: %s\n", message.c_str());
  return 1;
}

int Compile() {
  const std::string spec_path = absl::GetFlag(FLAGS_spec);
  if (spec_path.empty()) return Fail("--spec is required; see mpc --help");
  auto spec = mpc::LoadTrainSpec(spec_path);
  if (!spec.ok()) return Fail(std::string(spec.status().message()));
  if (auto st = mpc::ApplySpecOverrides(
          {absl::GetFlag(FLAGS_precision), absl::GetFlag(FLAGS_loss_scaling), absl::GetFlag(FLAGS_pad_multiple),
           false, 0, absl::GetFlag(FLAGS_fp8_recipe), absl::GetFlag(FLAGS_recompute)},
          &*spec);
      !st.ok()) {
    return Fail(std::string(st.message()));
  }
  const std::string spec_dir = std::filesystem::path(spec_path).parent_path().string();
  mpc::ProgramOptions options;
  options.model_path =
      absl::GetFlag(FLAGS_model).empty() ? mpc::ResolvePath(spec_dir, spec->model()) : absl::GetFlag(FLAGS_model);
  if (options.model_path.empty()) return Fail("no model: set `model` in the spec or pass --model");
  options.training = !absl::GetFlag(FLAGS_eval);
  const int ranks = absl::GetFlag(FLAGS_ranks);
  if (ranks < 1) return Fail(absl::StrCat("--ranks ", ranks, ": must be >= 1"));
  if (options.training && spec->batch_size() % ranks != 0) {
    return Fail(absl::StrCat("--ranks ", ranks, ": the batch of ", spec->batch_size(), " does not split evenly"));
  }
  options.world_size = options.training ? ranks : 1;
  options.batch_size = spec->batch_size() / options.world_size;
  // The training data's shapes, as mpc-train reads them: one class per position for a
  // sequence model's labels, and the extents that bind the model's symbolic dimensions.
  if (spec->has_train_data()) {
    auto data = mpc::LoadDataSource(spec->train_data(), spec_dir, "train_data");
    if (!data.ok()) return Fail(std::string(data.status().message()));
    auto row = [](const mpc::Tensor& t) { return mpc::Shape(t.shape().begin() + 1, t.shape().end()); };
    if (spec->loss().type() == mpc::LossSpec::SOFTMAX_CROSS_ENTROPY) options.label_row = row(data->labels);
    options.input_rows[spec->features_input()] = row(data->features);
    for (const mpc::NamedArray& more : data->more_inputs) options.input_rows[more.input] = row(more.values);
  }
  options.pipeline.dump_after = absl::GetFlag(FLAGS_dump_after);
  options.pipeline.dump_dir = absl::GetFlag(FLAGS_dump_dir);
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_disable_passes), ',', absl::SkipEmpty())) {
    options.pipeline.disabled.insert(std::string(name));
  }
  options.fused_attention = absl::GetFlag(FLAGS_fused_attention);
  const std::string device = absl::GetFlag(FLAGS_device).empty() ? spec->device() : absl::GetFlag(FLAGS_device);
  auto backend = mpc::CreateBackend(device);
  if (!backend.ok()) return Fail(std::string(backend.status().message()));
  auto program = mpc::CompileProgram(*spec, (*backend)->capabilities(), options);
  if (!program.ok()) return Fail(std::string(program.status().message()));

  std::fputs(mpc::CompileSummaryText(*program).c_str(), stdout);
  if (options.training && (ranks > 1 || absl::GetFlag(FLAGS_memory_table))) {
    auto rows = mpc::MemoryConfigurations(*spec, (*backend)->capabilities(), options);
    if (!rows.ok()) return Fail(std::string(rows.status().message()));
    std::fputs(mpc::MemoryTableText(*rows, ranks, spec->memory().limit_mb()).c_str(), stdout);
  }
  const std::string report_path = absl::GetFlag(FLAGS_report);
  if (!report_path.empty()) {
    if (auto st = mpc::WriteFileAtomically(report_path, mpc::CompileReportJson(*program)); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  const std::string out_path = absl::GetFlag(FLAGS_o);
  if (!out_path.empty()) {
    mpc::ExportOptions eo;
    eo.metadata["mpc.pass_report"] = mpc::CompileReportJson(*program);
    if (auto st = mpc::ExportOnnxFile(*program->graph, eo, out_path); !st.ok()) return Fail(std::string(st.message()));
    std::printf("wrote %s\n", out_path.c_str());
  }
  return 0;
}

int FailStatus(const absl::Status& status);

int Parity() {
  mpc::ParityOptions options;
  options.engine.spec_path = absl::GetFlag(FLAGS_spec);
  if (options.engine.spec_path.empty()) return Fail("mpc parity: --spec is required; see mpc --help");
  options.precision = absl::GetFlag(FLAGS_precision);
  if (options.precision.empty()) {
    return Fail("mpc parity: --precision is required: the precision to compare with f32 (bf16, fp16, fp8, tf32)");
  }
  options.engine.model_path = absl::GetFlag(FLAGS_model);
  options.engine.device = absl::GetFlag(FLAGS_device);
  options.engine.loss_scaling = absl::GetFlag(FLAGS_loss_scaling);
  options.engine.fp8_recipe = absl::GetFlag(FLAGS_fp8_recipe);
  options.engine.recompute = absl::GetFlag(FLAGS_recompute);
  options.engine.pad_multiple = absl::GetFlag(FLAGS_pad_multiple);
  options.steps = absl::GetFlag(FLAGS_steps);
  for (const std::string& s : absl::GetFlag(FLAGS_probe_steps)) {
    int64_t step = 0;
    if (!absl::SimpleAtoi(s, &step)) {
      return Fail(absl::StrFormat("--probe-steps: '%s' is not a step number; pass e.g. --probe-steps 1,100", s));
    }
    options.probe_steps.push_back(step);
  }
  const double max_drop = absl::GetFlag(FLAGS_max_accuracy_drop);
  if (!(max_drop >= 0)) return Fail("--max-accuracy-drop must be >= 0 (accuracy units: 0.01 is one point)");
  auto report = mpc::Engine::Parity(options);
  if (!report.ok()) return FailStatus(report.status());
  std::fputs(mpc::ParityReportText(*report, max_drop).c_str(), stdout);
  const std::string report_path = absl::GetFlag(FLAGS_report);
  if (!report_path.empty()) {
    if (auto st = mpc::WriteFileAtomically(report_path, mpc::ParityReportJson(*report, max_drop)); !st.ok()) {
      return FailStatus(st);
    }
  }
  std::fflush(stdout);  // the report before the verdict on stderr
  if (mpc::AccuracyDrop(*report) > max_drop) {
    return Fail(absl::StrFormat("mpc parity: %s's accuracy is %.2f points below f32's (--max-accuracy-drop %.2f)",
                                options.precision, 100 * mpc::AccuracyDrop(*report), 100 * max_drop));
  }
  return 0;
}

// A status as one line: some messages (the ONNX checker's) span several.
int FailStatus(const absl::Status& status) {
  std::string line(status.message());
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return Fail(line);
}

// An output name as a file name: path separators and other odd characters become '_'.
std::string FileNameFor(const std::string& name) {
  std::string out = name.empty() ? std::string("output") : name;
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  }
  if (out == "." || out == "..") out = "output";
  return out;
}

int RunModel(const std::vector<std::string>& input_args) {
  const std::string model = absl::GetFlag(FLAGS_model);
  const std::string out_dir = absl::GetFlag(FLAGS_output_dir);
  if (model.empty())
    return Fail("mpc run: --model is required; usage: mpc run --model M --input NAME=FILE.npy ... --output-dir DIR");
  if (out_dir.empty()) return Fail("mpc run: --output-dir is required (where each output is written as NAME.npy)");
  if (!absl::GetFlag(FLAGS_spec).empty()) return Fail("mpc run takes no --spec; pass the model with --model");
  std::vector<std::pair<std::string, std::string>> input_files;
  std::set<std::string> names;
  for (const std::string& arg : input_args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
      return Fail(absl::StrFormat("--input '%s': expected NAME=FILE.npy (graph input name, '=', .npy file)", arg));
    }
    const std::string name = arg.substr(0, eq);
    if (!names.insert(name).second) return Fail(absl::StrFormat("--input: input '%s' is given twice", name));
    input_files.emplace_back(name, arg.substr(eq + 1));
  }
  mpc::InferenceOptions options;
  options.device = absl::GetFlag(FLAGS_device).empty() ? "cpu" : absl::GetFlag(FLAGS_device);
  options.precision = absl::GetFlag(FLAGS_precision).empty() ? "f32" : absl::GetFlag(FLAGS_precision);
  options.check_numerics = absl::GetFlag(FLAGS_check_numerics);
  options.pad_multiple = absl::GetFlag(FLAGS_pad_multiple);
  auto session = mpc::InferenceSession::FromFile(model, options);
  if (!session.ok()) return FailStatus(session.status());
  for (const std::string& notice : (*session)->notices()) std::fprintf(stderr, "mpc run: note: %s\n", notice.c_str());
  std::map<std::string, mpc::Tensor> feeds;
  for (const auto& [name, file] : input_files) {
    auto tensor = mpc::ReadNpy(file);
    if (!tensor.ok())
      return FailStatus(
          absl::Status(tensor.status().code(), absl::StrCat("--input ", name, ": ", tensor.status().message())));
    // .npy has no bf16: a bf16 model input takes a float32 (or float64) array, rounded to
    // nearest even on the way in.
    for (const mpc::TensorSignature& sig : (*session)->inputs()) {
      const mpc::DType given = tensor->dtype();
      if (sig.name == name && sig.dtype == mpc::DType::kBF16 &&
          (given == mpc::DType::kF32 || given == mpc::DType::kF64)) {
        std::fprintf(stderr, "mpc run: note: input '%s' is bf16 in the model; the %s array was rounded to bf16\n",
                     name.c_str(), mpc::DTypeName(given));
        *tensor = tensor->CastTo(mpc::DType::kBF16);
      }
    }
    feeds.emplace(name, *std::move(tensor));
  }
  auto outputs = (*session)->Run(feeds);
  if (!outputs.ok()) return FailStatus(outputs.status());

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec || !std::filesystem::is_directory(out_dir)) {
    return Fail(absl::StrFormat("--output-dir %s: cannot create the directory: %s", out_dir,
                                ec ? ec.message() : "a file of that name exists"));
  }
  std::set<std::string> used;
  for (const mpc::NamedTensor& out : *outputs) {
    std::string file = FileNameFor(out.name);
    for (int k = 1; used.count(file); ++k) file = absl::StrFormat("%s_%d", FileNameFor(out.name), k);
    used.insert(file);
    const std::string path = (std::filesystem::path(out_dir) / (file + ".npy")).string();
    // .npy has no bf16 or fp8; those are written as f32 (exactly representable).
    const mpc::DType dtype = out.value.dtype();
    const bool widen = dtype == mpc::DType::kBF16 || dtype == mpc::DType::kF8E4M3 || dtype == mpc::DType::kF8E5M2;
    const mpc::Tensor written = widen ? out.value.CastTo(mpc::DType::kF32) : out.value;
    if (auto st = mpc::WriteNpy(path, written); !st.ok()) return FailStatus(st);
    std::printf("%s: shape %s dtype %s -> %s%s\n", out.name.c_str(), mpc::ShapeToString(out.value.shape()).c_str(),
                mpc::DTypeName(dtype), path.c_str(), widen ? " (written as f32)" : "");
  }
  return 0;
}

// Takes every "--input V" / "--input=V" out of argv (abseil keeps only the last value of a
// repeated flag) and returns the values in order.
std::vector<std::string> ExtractInputFlags(int& argc, char** argv) {
  std::vector<std::string> values;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--input" || arg == "-input") && i + 1 < argc) {
      values.push_back(argv[++i]);
    } else if (arg.rfind("--input=", 0) == 0 || arg.rfind("-input=", 0) == 0) {
      values.push_back(arg.substr(arg.find('=') + 1));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the mpc compiler tool.\n"
      "usage: mpc compile --spec S [--model M] [--report FILE.json] [--dump-after REGEX --dump-dir DIR]\n"
      "                   [--disable-passes a,b] [--fused-attention] [-o FILE.onnx] [--eval] [--precision f32|tf32|bf16|fp16|fp8]\n"
      "                   [--fp8-recipe delayed|current|rowwise|block]\n"
      "       mpc run --model M [--precision P] [--device cpu|cuda|auto] --input NAME=FILE.npy ...\n"
      "               --output-dir DIR [--check-numerics]\n"
      "       mpc parity --spec S --precision bf16|fp16|fp8|tf32 [--fp8-recipe R] [--steps N] [--probe-steps 1,N]\n"
      "                  [--max-accuracy-drop 0.01] [--report FILE.json]");
  auto storage = mpc::NormalizeFlagNames(argc, argv);
  const std::vector<std::string> inputs = ExtractInputFlags(argc, argv);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2)
    return Fail("missing command; usage: mpc compile --spec S ... or mpc run --model M ... (see mpc --help)");
  const std::string command = args[1];
  if (command == "compile") {
    if (!inputs.empty()) return Fail("--input is an option of mpc run, not mpc compile");
    if (args.size() > 2) return Fail(absl::StrFormat("unexpected argument '%s'", args[2]));
    return Compile();
  }
  if (command == "run") {
    if (args.size() > 2) return Fail(absl::StrFormat("unexpected argument '%s'", args[2]));
    return RunModel(inputs);
  }
  if (command == "parity") {
    if (!inputs.empty()) return Fail("--input is an option of mpc run, not mpc parity");
    if (args.size() > 2) return Fail(absl::StrFormat("unexpected argument '%s'", args[2]));
    return Parity();
  }
  return Fail(absl::StrFormat("unknown command '%s'; the commands are: compile, run, parity", command));
}

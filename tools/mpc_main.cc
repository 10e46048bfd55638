// mpc: the compiler tool. `mpc compile` loads a model and a training spec, runs the
// pass pipeline up to memory-plan and reports what every pass did; it can dump the
// graph between passes and write the lowered program as ONNX (our ops in domain mpc).
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "backends/backend.h"
#include "base/file_util.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "graph/onnx_export.h"
#include "passes/autocast.h"
#include "passes/loss_scaling.h"
#include "tools/compile_report.h"
#include "tools/flag_normalize.h"

ABSL_FLAG(std::string, model, "", "ONNX model; overrides the spec's `model`");
ABSL_FLAG(std::string, spec, "", "training spec (mpc.TrainSpec, protobuf text) (required)");
ABSL_FLAG(std::string, report, "", "write the JSON pass report here");
ABSL_FLAG(std::string, dump_after, "", "dump the graph (text and DOT) after each pass whose name matches this regex");
ABSL_FLAG(std::string, dump_dir, "", "directory for --dump-after files");
ABSL_FLAG(std::string, disable_passes, "", "comma-separated pass names to skip");
ABSL_FLAG(std::string, o, "", "write the compiled training program as ONNX (domain mpc for our ops)");
ABSL_FLAG(std::string, device, "", "compile for this backend's capabilities (cpu, cuda); overrides the spec");
ABSL_FLAG(std::string, precision, "", "f32, tf32, bf16, fp16 or fp8; overrides the spec's precision.compute");
ABSL_FLAG(std::string, loss_scaling, "", "off, dynamic or static:S; overrides the spec's loss_scaling");
ABSL_FLAG(int32_t, pad_multiple, 0, "pad GEMM dims to this multiple (1: no padding); overrides the spec");
ABSL_FLAG(bool, eval, false, "compile the evaluation program instead of the training program");

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
  if (!absl::GetFlag(FLAGS_precision).empty()) {
    auto compute = mpc::ParsePrecision(absl::GetFlag(FLAGS_precision));
    if (!compute.ok()) return Fail(std::string(compute.status().message()));
    spec->mutable_precision()->set_compute(*compute);
  }
  if (absl::GetFlag(FLAGS_pad_multiple) > 0) spec->mutable_padding()->set_multiple(absl::GetFlag(FLAGS_pad_multiple));
  if (!absl::GetFlag(FLAGS_loss_scaling).empty()) {
    if (auto st = mpc::ParseLossScalingFlag(absl::GetFlag(FLAGS_loss_scaling), spec->mutable_loss_scaling()); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  const std::string spec_dir = std::filesystem::path(spec_path).parent_path().string();
  mpc::ProgramOptions options;
  options.model_path = absl::GetFlag(FLAGS_model).empty() ? mpc::ResolvePath(spec_dir, spec->model())
                                                          : absl::GetFlag(FLAGS_model);
  if (options.model_path.empty()) return Fail("no model: set `model` in the spec or pass --model");
  options.batch_size = spec->batch_size();
  options.training = !absl::GetFlag(FLAGS_eval);
  options.pipeline.dump_after = absl::GetFlag(FLAGS_dump_after);
  options.pipeline.dump_dir = absl::GetFlag(FLAGS_dump_dir);
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_disable_passes), ',', absl::SkipEmpty())) {
    options.pipeline.disabled.insert(std::string(name));
  }
  const std::string device = absl::GetFlag(FLAGS_device).empty() ? spec->device() : absl::GetFlag(FLAGS_device);
  auto backend = mpc::CreateBackend(device);
  if (!backend.ok()) return Fail(std::string(backend.status().message()));
  auto program = mpc::CompileProgram(*spec, (*backend)->capabilities(), options);
  if (!program.ok()) return Fail(std::string(program.status().message()));

  std::fputs(mpc::CompileSummaryText(*program).c_str(), stdout);
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the mpc compiler tool.\n"
      "usage: mpc compile --spec S [--model M] [--report FILE.json] [--dump-after REGEX --dump-dir DIR]\n"
      "                   [--disable-passes a,b] [-o FILE.onnx] [--eval] [--precision f32|tf32|bf16|fp16|fp8]");
  auto storage = mpc::NormalizeFlagNames(argc, argv);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) return Fail("missing command; usage: mpc compile --spec S ... (see mpc --help)");
  const std::string command = args[1];
  if (command == "compile") {
    if (args.size() > 2) return Fail(absl::StrFormat("unexpected argument '%s'", args[2]));
    return Compile();
  }
  return Fail(absl::StrFormat("unknown command '%s'; the commands are: compile", command));
}

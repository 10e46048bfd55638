// Trains a model in-process through mpc's public API (mpc/mpc.h) and checks the results:
// a few steps lower the evaluation loss, a checkpoint restores the parameters exactly in a
// second engine (which then takes the same next step), the same checkpoint as bytes takes
// that engine back to the saved step (the step again: the same loss), and the ONNX export
// is written.
// Then, with no files at all: a spec built in code as text, the exported model as bytes,
// and batches the program generates itself (Step(batch), Evaluate(batches)), which must
// lower the loss on them. Exits 0 only when all of that holds.
//
//   train_in_process SPEC WORK_DIR [STEPS] [DEVICE]
//
// SPEC is any training spec of a 28x28-image, 10-class model (models/fashion_mlp/
// fashion_mlp.spec works; the generated batches have that shape); WORK_DIR, which must not
// hold checkpoints yet, receives the checkpoint and the exported model.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mpc/mpc.h"

namespace {

// Prints why the example failed and returns the process's exit status.
int Fail(const std::string& what, const absl::Status& status = absl::OkStatus()) {
  std::fprintf(stderr, "train_in_process: FAILED: %s%s%s\n", what.c_str(), status.ok() ? "" : ": ",
               status.ok() ? "" : std::string(status.message()).c_str());
  return 1;
}

// A generated batch of `rows` 28x28 images in 10 classes: each class a brighter band of
// rows, plus noise, so the task is learnable. Deterministic in `seed`.
mpc::Batch MakeBatch(const std::string& input, int64_t rows, uint32_t seed) {
  std::vector<float> images(static_cast<size_t>(rows) * 784);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    seed = seed * 1664525u + 1013904223u;
    labels[r] = (seed >> 16) % 10;
    for (int64_t i = 0; i < 784; ++i) {
      seed = seed * 1664525u + 1013904223u;
      const float noise = static_cast<float>((seed >> 16) % 1000) / 500.0f - 1.0f;
      images[r * 784 + i] = noise + ((i / 28) / 3 == labels[r] ? 0.3f : 0.0f);
    }
  }
  mpc::Batch batch;  // the engine copies what it needs: these vectors may go right after Step
  batch[input] = mpc::HostTensor::Float32({rows, 1, 28, 28}, images);
  batch["labels"] = mpc::HostTensor::Int64({rows}, labels);
  return batch;
}

// Trains a fresh engine (spec text, model bytes) on generated batches; 0 when the loss on
// them went down.
int TrainInMemory(const std::string& onnx_path, const std::string& device) {
  std::ifstream file(onnx_path, std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  mpc::EngineOptions options;
  options.spec_text =
      "loss { type: SOFTMAX_CROSS_ENTROPY }\n"
      "batch_size: 32\n"
      "steps: 40\n"
      "optimizer { adamw { lr: 0.001 } }\n"
      "seed: 7\n";
  options.model_bytes = bytes.str();
  options.external_batches = true;  // no train_data: every batch comes from here
  options.device = device;
  auto engine = mpc::Engine::Create(options);
  if (!engine.ok()) return Fail("Create (in memory)", engine.status());
  const std::string input = (*engine)->InputNames().front();
  std::vector<mpc::Batch> held_out;
  for (uint32_t i = 0; i < 4; ++i) held_out.push_back(MakeBatch(input, 32, 1000 + i));
  auto before = (*engine)->Evaluate(held_out);
  if (!before.ok()) return Fail("Evaluate(batches) before", before.status());
  for (int64_t i = 0; i < (*engine)->total_steps(); ++i) {
    auto step = (*engine)->Step(MakeBatch(input, 32, static_cast<uint32_t>(i)));
    if (!step.ok()) return Fail("Step(batch)", step.status());
  }
  auto after = (*engine)->Evaluate(held_out);
  if (!after.ok()) return Fail("Evaluate(batches) after", after.status());
  std::printf("in memory (spec text, model bytes, %lld generated batches): held-out loss %.4f -> %.4f\n",
              static_cast<long long>((*engine)->step()), before->loss, after->loss);
  if (!(after->loss < before->loss)) return Fail("training on generated batches did not lower their loss");
  // A misuse is an error value, and the engine stays usable.
  mpc::Batch wrong = MakeBatch(input, 16, 0);
  if ((*engine)->Step(wrong).ok()) return Fail("a batch of the wrong size was accepted");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SPEC WORK_DIR [STEPS] [DEVICE]\n", argv[0]);
    return 2;
  }
  const std::string work_dir = argv[2];
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20;
  std::printf("mpc %s (header), training %d steps of %s\n", MPC_VERSION_STRING, steps, argv[1]);

  // C++17: the options are a plain struct, filled field by field. Checkpoints go to the
  // work directory rather than wherever the spec points.
  mpc::EngineOptions options;
  options.spec_path = argv[1];
  options.checkpoint_dir = work_dir + "/checkpoints";
  options.device = argc > 4 ? argv[4] : "cpu";

  auto engine = mpc::Engine::Create(options);
  if (!engine.ok()) return Fail("Create", engine.status());

  // The evaluation loss before and after training: the spec's whole eval set, so the
  // comparison does not depend on which batches the steps happened to draw.
  auto before = (*engine)->Evaluate();
  if (!before.ok()) return Fail("Evaluate before training", before.status());
  for (int i = 0; i < steps; ++i) {
    auto metrics = (*engine)->Step();
    if (!metrics.ok()) return Fail("Step", metrics.status());
    if (i == 0 || i + 1 == steps) {
      std::printf("  step %lld: loss %.4f (lr %.2e)\n", static_cast<long long>(metrics->step), metrics->loss,
                  metrics->lr);
    }
  }
  auto after = (*engine)->Evaluate();
  if (!after.ok()) return Fail("Evaluate after training", after.status());
  std::printf("eval loss %.4f -> %.4f, accuracy %.3f -> %.3f (%lld examples)\n", before->loss, after->loss,
              before->accuracy, after->accuracy, static_cast<long long>(after->examples));
  if (!(after->loss < before->loss)) return Fail("training did not lower the evaluation loss");

  // A checkpoint, and a second engine resuming from it: same step, same parameters, bit
  // for bit (the checkpoint stores the FP32 master weights).
  if (auto status = (*engine)->SaveCheckpoint(options.checkpoint_dir); !status.ok()) {
    return Fail("SaveCheckpoint", status);
  }
  // The same checkpoint as one byte string, nothing on disk (for a database, a message...).
  auto checkpoint_bytes = (*engine)->SaveCheckpointToBytes();
  if (!checkpoint_bytes.ok()) return Fail("SaveCheckpointToBytes", checkpoint_bytes.status());
  // The second engine reads the checkpoint but leaves the directory to the first: a
  // checkpoint directory has one writer at a time (the first holds it until destroyed).
  mpc::EngineOptions resume_options = options;
  resume_options.use_checkpoint_dir = false;
  auto resumed = mpc::Engine::Create(resume_options);
  if (!resumed.ok()) return Fail("Create (second engine)", resumed.status());
  if (auto status = (*resumed)->LoadCheckpoint(options.checkpoint_dir); !status.ok()) {
    return Fail("LoadCheckpoint", status);
  }
  const int64_t saved_step = (*engine)->step();
  if ((*resumed)->step() != saved_step) return Fail("the resumed engine is at another step");
  const std::vector<std::string> names = (*engine)->ParameterNames();
  if (names.empty() || names != (*resumed)->ParameterNames()) return Fail("parameter names differ");
  for (const std::string& name : names) {
    auto trained = (*engine)->GetParameter(name);
    auto restored = (*resumed)->GetParameter(name);
    if (!trained.ok()) return Fail("GetParameter " + name, trained.status());
    if (!restored.ok()) return Fail("GetParameter (resumed) " + name, restored.status());
    const bool identical = trained->size() == restored->size() &&
                           std::memcmp(trained->data(), restored->data(), trained->size() * sizeof(float)) == 0;
    if (!identical) return Fail("parameter " + name + " differs after resuming");
  }
  // Both engines then take the same next step: same batch, same loss (on the CPU, bit for bit).
  auto next = (*engine)->Step();
  auto resumed_next = (*resumed)->Step();
  if (!next.ok()) return Fail("Step after the checkpoint", next.status());
  if (!resumed_next.ok()) return Fail("Step (resumed)", resumed_next.status());
  if (options.device == "cpu" && next->loss != resumed_next->loss) {
    return Fail("the resumed engine's next step has another loss");
  }
  std::printf("checkpoint at step %lld restored: %zu parameters identical, next loss %.6f and %.6f\n",
              static_cast<long long>(saved_step), names.size(), next->loss, resumed_next->loss);
  // The bytes take the resumed engine back to the saved step (and batch): the same step
  // again gives the same loss.
  if (auto status = (*resumed)->LoadCheckpointFromBytes(*checkpoint_bytes); !status.ok()) {
    return Fail("LoadCheckpointFromBytes", status);
  }
  if ((*resumed)->step() != saved_step) return Fail("the engine loaded from bytes is at another step");
  auto again = (*resumed)->Step();
  if (!again.ok()) return Fail("Step after LoadCheckpointFromBytes", again.status());
  if (options.device == "cpu" && again->loss != next->loss) {
    return Fail("the step after LoadCheckpointFromBytes has another loss");
  }
  std::printf("checkpoint bytes (%zu) restored step %lld: next loss %.6f again\n", checkpoint_bytes->size(),
              static_cast<long long>(saved_step), again->loss);

  // The trained model as ONNX, for any ONNX runtime.
  const std::string onnx_path = work_dir + "/trained.onnx";
  if (auto status = (*engine)->ExportOnnx(onnx_path); !status.ok()) return Fail("ExportOnnx", status);
  std::error_code error;
  const auto bytes = std::filesystem::file_size(onnx_path, error);
  if (error || bytes == 0) return Fail("the exported model " + onnx_path + " is missing or empty");
  std::printf("exported %s (%llu bytes)\n", onnx_path.c_str(), static_cast<unsigned long long>(bytes));

  if (int status = TrainInMemory(onnx_path, options.device); status != 0) return status;

  std::printf("train_in_process: OK\n");
  return 0;
}

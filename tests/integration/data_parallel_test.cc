// Data-parallel training under mpirun (docs/distributed.md), on this machine's loopback:
// 2 ranks train as 1 rank does on the same global batch (SGD with momentum, AdamW,
// gradient accumulation: per-step losses and final state within 1e-5); FP8 ranks reduce
// their amaxes and quantize alike; a non-finite
// gradient on one rank skips the step on both (fp16, dynamic scaling); a checkpoint
// written by 2 ranks resumes at 1 and at 2 ranks and continues the uninterrupted run; all
// of it also under ZeRO-1 (sliced optimizer state; 3 ranks for element counts that do
// not split evenly); a
// killed rank and a hung rank end the job within 60 s naming the rank; a batch that does
// not split and ranks with different specs are refused. Skipped in a build without MPI.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunCommand;

// `mpirun -np N mpc-train ARGS`, allowed to run as root (CI) and on more ranks than
// cores; one OpenMP thread per rank so two ranks do not fight over the two cores.
std::string Mpirun(int ranks, const std::string& args) {
  return absl::StrCat("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun -np ", ranks,
                      " --oversubscribe --bind-to none ", MPC_TRAIN_BIN, " ", args, " 2>&1");
}

std::string Train(const std::string& args) { return absl::StrCat(MPC_TRAIN_BIN, " ", args, " 2>&1"); }

struct TrainRecord {
  int64_t step = 0;
  double loss = 0, loss_scale = 0;
  bool skipped = false;
};

// The records of a kind ("train", "eval") of a metrics file, in order.
std::vector<TrainRecord> TrainRecords(const std::string& metrics_path, const std::string& kind = "train") {
  std::vector<TrainRecord> out;
  std::ifstream in(metrics_path);
  auto field = [](const std::string& line, const std::string& name) {
    const size_t at = line.find("\"" + name + "\":");
    if (at == std::string::npos) return std::string();
    const size_t begin = at + name.size() + 3;
    return line.substr(begin, line.find_first_of(",}", begin) - begin);
  };
  for (std::string line; std::getline(in, line);) {
    if (!absl::StrContains(line, "\"kind\":\"" + kind + "\"")) continue;
    TrainRecord r;
    EXPECT_TRUE(absl::SimpleAtoi(field(line, "step"), &r.step)) << line;
    EXPECT_TRUE(absl::SimpleAtod(field(line, "loss"), &r.loss)) << line;
    if (kind == "train") EXPECT_TRUE(absl::SimpleAtod(field(line, "loss_scale"), &r.loss_scale)) << line;
    r.skipped = field(line, "skipped") == "true";
    out.push_back(r);
  }
  return out;
}

// Steps [first, last] of two runs' records have losses within 1e-5 relative.
void ExpectSameLosses(const std::vector<TrainRecord>& got, const std::vector<TrainRecord>& want, int64_t first,
                      int64_t last, const std::string& what) {
  std::map<int64_t, double> by_step;
  for (const TrainRecord& r : got) by_step[r.step] = r.loss;
  for (const TrainRecord& r : want) {
    if (r.step < first || r.step > last) continue;
    ASSERT_TRUE(by_step.count(r.step)) << what << ": no record of step " << r.step;
    EXPECT_NEAR(by_step[r.step], r.loss, 1e-5 * std::abs(r.loss)) << what << ": step " << r.step;
  }
}

// Every parameter and optimizer state of the checkpoint in `dir`, loaded into an engine.
std::map<std::string, std::vector<float>> CheckpointState(const std::string& spec, const std::string& dir) {
  EngineOptions options;
  options.spec_path = spec;
  auto engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  const absl::Status loaded = (*engine)->LoadCheckpoint(dir);
  EXPECT_TRUE(loaded.ok()) << loaded;
  return testing::SnapshotState(**engine);
}

// Each trained tensor within 1e-5 of the other in relative L2 norm (||got - want|| /
// ||want||): the gradient sums of 2 x 32 and 1 x 64 examples round differently, and
// element-wise relative errors say nothing about that where values are near zero (Adam
// turns a gradient of 1e-9 into a step of about lr, whose sign is the rounding's).
// Gradient accumulators are left out: each rank's holds its own micro-batches' sum.
void ExpectSameState(const std::map<std::string, std::vector<float>>& got,
                     const std::map<std::string, std::vector<float>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int compared = 0;
  double largest = 0;
  std::string largest_name;
  for (const auto& [name, values] : want) {
    if (absl::EndsWith(name, ".grad_accum")) continue;
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no '" << name << "'";
    ASSERT_EQ(it->second.size(), values.size()) << what << ": " << name;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const double d = static_cast<double>(it->second[i]) - values[i];
      diff += d * d;
      norm += static_cast<double>(values[i]) * values[i];
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm))
        << what << ": " << name << " differs by " << std::sqrt(diff / std::max(norm, 1e-300)) << " relative";
    ++compared;
    const double relative = std::sqrt(diff / std::max(norm, 1e-300));
    if (relative >= largest) largest = relative, largest_name = name;
  }
  std::printf("%s: largest relative difference %.3g (%s) over %d tensors\n", what.c_str(), largest,
              largest_name.c_str(), compared);
  EXPECT_GE(compared, 6) << what << ": the 6 parameters at least";
}

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef MPC_WITH_MPI
    GTEST_SKIP() << "this mpc is built without MPI (libopenmpi-dev not found at configure time)";
#endif
  }
};

struct Setup {
  std::string name;
  std::string fields;  // optimizer, batch, accumulation, ZeRO
  int ranks = 2;
  // Empty: compared with 1 rank on the same fields. Otherwise compared with a job of the
  // same ranks on these fields (bf16: see the ZeRO-2 cases).
  std::string reference;
};
void PrintTo(const Setup& s, std::ostream* os) { *os << s.name; }

class TwoRanksAsOne : public DataParallelTest, public ::testing::WithParamInterface<Setup> {};

TEST_P(TwoRanksAsOne, SameLossesAndWeightsAsOneRankOnTheGlobalBatch) {
  const std::string spec = testing::WriteFashionMlpSpec(
      "dp_" + GetParam().name,
      absl::StrCat(GetParam().fields, " steps: 20 seed: 5 checkpoint { every_n_steps: 0 at_end: true }"));
  const std::string dir = fs::path(spec).parent_path().string();
  const int ranks = GetParam().ranks;
  const std::string reference_args =
      absl::StrCat("--spec ", spec, " --metrics ", dir, "/one.jsonl --checkpoint_dir ", dir, "/ckpt_one");
  std::string reference_spec = spec;
  if (!GetParam().reference.empty()) {
    reference_spec = testing::WriteFashionMlpSpec(
        "dp_" + GetParam().name + "_reference",
        absl::StrCat(GetParam().reference, " steps: 20 seed: 5 checkpoint { every_n_steps: 0 at_end: true }"));
  }
  const CommandResult one = RunCommand(
      GetParam().reference.empty()
          ? Train(reference_args)
          : Mpirun(ranks, absl::StrCat("--spec ", reference_spec, " --metrics ", dir, "/one.jsonl --checkpoint_dir ",
                                       dir, "/ckpt_one")));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const CommandResult two = RunCommand(Mpirun(
      ranks, absl::StrCat("--spec ", spec, " --metrics ", dir, "/two.jsonl --checkpoint_dir ", dir, "/ckpt_two")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_TRUE(absl::StrContains(two.output, absl::StrCat("data-parallel: ", ranks, " ranks"))) << two.output;

  const std::vector<TrainRecord> want = TrainRecords(dir + "/one.jsonl");
  const std::vector<TrainRecord> got = TrainRecords(dir + "/two.jsonl");
  ASSERT_EQ(want.size(), 20u);
  ASSERT_EQ(got.size(), 20u) << "rank 0 writes every step once";
  ASSERT_GT(want.front().loss, want.back().loss) << "the run must train";
  const std::string versus = GetParam().reference.empty() ? "1" : absl::StrCat(ranks, " on the reference fields");
  ExpectSameLosses(got, want, 1, 20, absl::StrCat(ranks, " ranks vs ", versus));
  // Evaluations (where the fields ask for them: every rank evaluates the whole set, reading
  // the same weights, or under ZeRO-3 gathering them).
  const std::vector<TrainRecord> want_eval = TrainRecords(dir + "/one.jsonl", "eval");
  const std::vector<TrainRecord> got_eval = TrainRecords(dir + "/two.jsonl", "eval");
  ASSERT_EQ(got_eval.size(), want_eval.size());
  for (size_t i = 0; i < want_eval.size(); ++i) {
    EXPECT_NEAR(got_eval[i].loss, want_eval[i].loss, 1e-5 * want_eval[i].loss)
        << "evaluation " << i << " at step " << want_eval[i].step;
  }
  // Under ZeRO-1 the checkpoint holds the optimizer state gathered from the ranks' slices.
  ExpectSameState(CheckpointState(spec, dir + "/ckpt_two"), CheckpointState(reference_spec, dir + "/ckpt_one"),
                  absl::StrCat("final state, ", ranks, " ranks vs ", versus));
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, TwoRanksAsOne,
    ::testing::Values(
        Setup{"sgd_momentum", "batch_size: 64 optimizer { sgd { lr: 0.05 momentum: 0.9 } }"},
        Setup{"adamw", "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } }"},
        Setup{"adamw_accumulate", "batch_size: 32 accumulate_steps: 2 optimizer { adamw { lr: 0.002 } }"},
        // ZeRO-1: sliced optimizer state, clipping over the slices, and 3 ranks,
        // which divide none of the weights' element counts but one (4 of 6 do
        // not split evenly: the last rank's slices are short).
        Setup{"sgd_momentum_zero1",
              "batch_size: 64 optimizer { sgd { lr: 0.05 momentum: 0.9 } } distributed { zero_stage: 1 }"},
        Setup{"adamw_clip_zero1",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } clip_grad_norm: 0.5 } "
              "distributed { zero_stage: 1 }"},
        Setup{"adamw_accumulate_zero1",
              "batch_size: 32 accumulate_steps: 2 optimizer { adamw { lr: 0.002 } } "
              "distributed { zero_stage: 1 }"},
        Setup{"sgd_momentum_zero1_3ranks",
              "batch_size: 96 optimizer { sgd { lr: 0.05 momentum: 0.9 } } distributed { zero_stage: 1 }", 3},
        // ZeRO-2: each bucket reduce-scattered as soon as the backward produced it (small
        // buckets, so the collectives interleave with the backward), at 2 and 4 ranks, f32
        // and bf16, and with full recomputation. bf16 is held to the same ranks without
        // ZeRO (the sums are added in the same rank order, so the slices' updates are
        // exactly the whole update's): against 1 rank a bf16 run parts by ~1e-3 after a few
        // steps whatever the stage, as a weight's bf16 copy rounds the other way when its
        // f32 master differs in the last bits (a different summation order).
        Setup{"adamw_zero2",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } "
              "distributed { zero_stage: 2 bucket_mb: 0.05 }"},
        Setup{"adamw_zero2_4ranks",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } "
              "distributed { zero_stage: 2 bucket_mb: 0.05 }",
              4},
        Setup{"adamw_bf16_zero2",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 } "
              "distributed { zero_stage: 2 bucket_mb: 0.05 }",
              2, "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 }"},
        Setup{"adamw_bf16_zero2_4ranks_recompute_full",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 } "
              "distributed { zero_stage: 2 bucket_mb: 0.05 } memory { recompute: FULL }",
              4, "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 }"},
        // ZeRO-3: the parameters sliced too, gathered before their forward and backward
        // readers (bf16: the cast slice gathered in 16 bits, the same bits as casting the
        // whole weight).
        Setup{"adamw_zero3",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } "
              "distributed { zero_stage: 3 bucket_mb: 0.05 }"},
        Setup{"adamw_zero3_4ranks",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } clip_grad_norm: 0.5 } "
              "distributed { zero_stage: 3 bucket_mb: 0.05 }",
              4},
        Setup{"adamw_bf16_zero3",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 } "
              "distributed { zero_stage: 3 bucket_mb: 0.05 }",
              2, "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 }"},
        // ZeRO-2 and 3 with accumulation: every micro-batch's gradients scattered, each
        // rank summing its slices; bf16 ZeRO-3 held bit for bit to bf16 ZeRO-2 (the same
        // scatters and sums; the gathered bf16 slices are the whole weight's cast).
        Setup{"adamw_accumulate_zero2",
              "batch_size: 32 accumulate_steps: 2 optimizer { adamw { lr: 0.002 } } "
              "distributed { zero_stage: 2 bucket_mb: 0.05 }"},
        Setup{"adamw_clip_accumulate_zero3_4ranks",
              "batch_size: 32 accumulate_steps: 2 optimizer { adamw { lr: 0.002 } clip_grad_norm: 0.5 } "
              "distributed { zero_stage: 3 bucket_mb: 0.05 }",
              4},
        Setup{"adamw_bf16_accumulate_zero3",
              "batch_size: 32 accumulate_steps: 2 optimizer { adamw { lr: 0.002 } } precision { compute: BF16 } "
              "distributed { zero_stage: 3 bucket_mb: 0.05 }",
              2,
              "batch_size: 32 accumulate_steps: 2 optimizer { adamw { lr: 0.002 } } precision { compute: BF16 } "
              "distributed { zero_stage: 2 bucket_mb: 0.05 }"},
        // ZeRO-3 with a weight average (each rank averages its slices; the checkpoint holds
        // the whole averages) and with FP8, delayed and rowwise (the whole weight
        // gathered and quantized as without ZeRO: held bit for bit to the same ranks).
        Setup{"adamw_ema_zero3",
              "batch_size: 64 optimizer { adamw { lr: 0.002 } } ema { decay: 0.9 evaluate: true } "
              "distributed { zero_stage: 3 bucket_mb: 0.05 } " +
                  testing::FashionMlpEvalFields(10, 1000)},
        Setup{"adamw_fp8_zero3",
              "batch_size: 64 optimizer { adamw { lr: 0.002 } } precision { compute: FP8 } "
              "fp8 { include_first_last: true } distributed { zero_stage: 3 bucket_mb: 0.05 }",
              2,
              "batch_size: 64 optimizer { adamw { lr: 0.002 } } precision { compute: FP8 } "
              "fp8 { include_first_last: true }"},
        Setup{"adamw_fp8_rowwise_zero3",
              "batch_size: 64 optimizer { adamw { lr: 0.002 } } precision { compute: FP8 } "
              "fp8 { include_first_last: true recipe: ROWWISE } distributed { zero_stage: 3 bucket_mb: 0.05 }",
              2,
              "batch_size: 64 optimizer { adamw { lr: 0.002 } } precision { compute: FP8 } "
              "fp8 { include_first_last: true recipe: ROWWISE }"},
        Setup{"adamw_bf16_zero3_4ranks_recompute_full",
              "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 } "
              "distributed { zero_stage: 3 bucket_mb: 0.05 } memory { recompute: FULL }",
              4, "batch_size: 64 optimizer { adamw { lr: 0.002 weight_decay: 0.01 } } precision { compute: BF16 }"}),
    [](const ::testing::TestParamInfo<Setup>& info) { return info.param.name; });

TEST_F(DataParallelTest, Fp8RanksQuantizeAlike) {
  // Each rank sees the amaxes of its own rows; reduced (max) before the scale update, they
  // give every rank the scales of the whole batch. The state check before the checkpoint
  // compares every rank's FP8 scales and amax histories (and weights) bit for bit.
  const std::string fields =
      "batch_size: 64 steps: 20 seed: 5 optimizer { adamw { lr: 0.002 } } precision { compute: FP8 } "
      "fp8 { include_first_last: true report_tensor: \".*\" } checkpoint { every_n_steps: 0 at_end: true }";
  const std::string spec = testing::WriteFashionMlpSpec("dp_fp8", fields);
  const std::string dir = fs::path(spec).parent_path().string();
  const CommandResult two = RunCommand(
      Mpirun(2, absl::StrCat("--spec ", spec, " --metrics ", dir, "/two.jsonl --checkpoint_dir ", dir, "/ckpt")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const CommandResult one = RunCommand(Train(absl::StrCat("--spec ", spec, " --metrics ", dir, "/one.jsonl")));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // Step 1 quantizes with the initial scales and the same rows: the same loss; and the
  // amaxes recorded there are the whole batch's, as one process records them.
  std::ifstream a(dir + "/one.jsonl"), b(dir + "/two.jsonl");
  std::string first_one, first_two;
  while (std::getline(a, first_one) && !absl::StrContains(first_one, "\"train\"")) {
  }
  while (std::getline(b, first_two) && !absl::StrContains(first_two, "\"train\"")) {
  }
  ASSERT_TRUE(absl::StrContains(first_one, "grad_output.amax")) << first_one;
  EXPECT_EQ(first_two, first_one) << "step 1 (loss, amaxes, scales) of 2 ranks vs 1";
  // Later steps are not bit-equal to one process, nor expected to be: Adam's first steps
  // move every weight by about lr * sign(gradient), and with FP8-quantized operands many
  // gradient elements are sums that cancel to within rounding of zero, whose sign then
  // follows the summation order (one process accumulating 2 x 32 rows differs from 1 x 64
  // the same way). The trajectories stay within 5% (2.6% at most when this was written).
  const std::vector<TrainRecord> want = TrainRecords(dir + "/one.jsonl"), got = TrainRecords(dir + "/two.jsonl");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i].loss, want[i].loss, 0.05 * want[i].loss) << "step " << i + 1;
}

// The just-in-time recipes keep no state to reduce: each rank scales the tensors it holds
// (its rows), as one process scales its own. 2 ranks stay within 1% of 1 process over 20
// steps (0.1-0.2% when written). SGD: under Adam the runs part like the delayed recipe's above (a sign flip of a
// gradient element that cancels to near zero moves its weight by a whole step either way),
// and block scaling then reached 7.7%.
TEST_F(DataParallelTest, Fp8JustInTimeRecipesOnTwoRanksFollowOneProcess) {
  for (const char* recipe : {"CURRENT", "ROWWISE", "BLOCK"}) {
    SCOPED_TRACE(recipe);
    const std::string fields = absl::StrCat(
        "batch_size: 64 steps: 20 seed: 5 optimizer { sgd { lr: 0.05 } } precision { compute: FP8 } "
        "fp8 { include_first_last: true recipe: ",
        recipe, " } checkpoint { every_n_steps: 0 at_end: true }");
    const std::string spec = testing::WriteFashionMlpSpec(absl::StrCat("dp_fp8_", recipe), fields);
    const std::string dir = fs::path(spec).parent_path().string();
    const CommandResult two = RunCommand(
        Mpirun(2, absl::StrCat("--spec ", spec, " --metrics ", dir, "/two.jsonl --checkpoint_dir ", dir, "/ckpt")));
    ASSERT_EQ(two.exit_code, 0) << two.output;
    const CommandResult one = RunCommand(Train(absl::StrCat("--spec ", spec, " --metrics ", dir, "/one.jsonl")));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const std::vector<TrainRecord> want = TrainRecords(dir + "/one.jsonl"), got = TrainRecords(dir + "/two.jsonl");
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i].loss, want[i].loss, 0.01 * want[i].loss) << "step " << i + 1;
      worst = std::max(worst, std::abs(got[i].loss - want[i].loss) / want[i].loss);
    }
    std::printf("fp8 %s: 2 ranks vs 1, largest relative loss difference over 20 steps %.4f\n", recipe, worst);
  }
}

// fp16 with dynamic scaling; rank 1 alone gets an inf in one gradient at step 4.
void ExpectBothRanksSkipRankOnesFault(const std::string& name, const std::string& extra_fields) {
  const std::string spec = testing::WriteFashionMlpSpec(
      name,
      "batch_size: 64 steps: 8 seed: 2 optimizer { adamw { lr: 0.002 } } precision { compute: FP16 } "
      "debug { inject_nonfinite { step: 3 parameter: \"3.weight\" value: \"inf\" rank: 1 } } "
      "checkpoint { every_n_steps: 0 at_end: true } " +
          extra_fields);
  const std::string dir = fs::path(spec).parent_path().string();
  // The checkpoint at the end checks that both ranks hold bit-identical weights, optimizer
  // state and loss scale: it fails the run if rank 1 had applied its step alone.
  const CommandResult two = RunCommand(
      Mpirun(2, absl::StrCat("--spec ", spec, " --metrics ", dir, "/two.jsonl --checkpoint_dir ", dir, "/ckpt")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const std::vector<TrainRecord> records = TrainRecords(dir + "/two.jsonl");
  ASSERT_EQ(records.size(), 8u);
  for (const TrainRecord& r : records) EXPECT_EQ(r.skipped, r.step == 4) << "step " << r.step;
  EXPECT_EQ(records[4].loss_scale, records[3].loss_scale / 2) << "the scale backs off after the skipped step";
  EXPECT_TRUE(absl::StrContains(two.output, "8 steps (1 skipped)")) << two.output;
}

TEST_F(DataParallelTest, NonFiniteGradientOnOneRankSkipsTheStepOnBoth) {
  ExpectBothRanksSkipRankOnesFault("dp_fp16_fault", "");
}

// Under ZeRO-1 the inf lands in rank 1's slice of the gradient; the flag is still reduced
// (max) before any update, and the weights (gathered from both ranks' slices) agree.
TEST_F(DataParallelTest, NonFiniteGradientOnOneRankSkipsTheStepOnBothUnderZero) {
  ExpectBothRanksSkipRankOnesFault("dp_fp16_fault_zero1", "distributed { zero_stage: 1 }");
}

// Saves at step 10 of a 2-rank job, resumes at 1 rank and at 2 ranks (the same spec,
// `extra_fields` included; and at `also_at` ranks when > 0), and compares steps 11-20 with
// an uninterrupted 1-rank run.
void ExpectResumesAtOneAndAtTwo(const std::string& name, const std::string& extra_fields, int batch = 64,
                                int also_at = 0) {
  // Constant learning rate: the 10-step and 20-step specs schedule the same rates.
  const std::string fields =
      absl::StrCat("batch_size: ", batch, " seed: 7 optimizer { adamw { lr: 0.002 } } ", extra_fields, " ");
  const std::string first =
      testing::WriteFashionMlpSpec(name, fields + "steps: 10 checkpoint { every_n_steps: 0 at_end: true }");
  const std::string dir = fs::path(first).parent_path().string();
  const std::string whole = dir + "/whole.spec";
  {
    std::ifstream in(first);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find("steps: 10");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 9, "steps: 20");
    std::ofstream(whole) << text;
  }
  const CommandResult uninterrupted =
      RunCommand(Train(absl::StrCat("--spec ", whole, " --metrics ", dir, "/whole.jsonl")));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  const CommandResult saved = RunCommand(Mpirun(2, absl::StrCat("--spec ", first, " --checkpoint_dir ", dir, "/ckpt")));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  fs::copy(dir + "/ckpt", dir + "/ckpt_for_one", fs::copy_options::recursive);
  fs::copy(dir + "/ckpt", dir + "/ckpt_for_two", fs::copy_options::recursive);
  if (also_at > 0) fs::copy(dir + "/ckpt", dir + "/ckpt_for_more", fs::copy_options::recursive);

  const CommandResult at_one = RunCommand(Train(absl::StrCat("--spec ", whole, " --resume --checkpoint_dir ", dir,
                                                             "/ckpt_for_one --metrics ", dir, "/one.jsonl")));
  ASSERT_EQ(at_one.exit_code, 0) << at_one.output;
  EXPECT_TRUE(absl::StrContains(at_one.output, "resumed at step 10")) << at_one.output;
  const CommandResult at_two = RunCommand(Mpirun(2, absl::StrCat("--spec ", whole, " --resume --checkpoint_dir ", dir,
                                                                 "/ckpt_for_two --metrics ", dir, "/two.jsonl")));
  ASSERT_EQ(at_two.exit_code, 0) << at_two.output;

  const std::vector<TrainRecord> want = TrainRecords(dir + "/whole.jsonl");
  ASSERT_EQ(want.size(), 20u);
  ASSERT_EQ(TrainRecords(dir + "/one.jsonl").size(), 10u);
  ExpectSameLosses(TrainRecords(dir + "/one.jsonl"), want, 11, 20, "resumed at 1 rank vs uninterrupted");
  ASSERT_EQ(TrainRecords(dir + "/two.jsonl").size(), 10u);
  ExpectSameLosses(TrainRecords(dir + "/two.jsonl"), want, 11, 20, "resumed at 2 ranks vs uninterrupted");
  if (also_at > 0) {
    const CommandResult more = RunCommand(Mpirun(also_at, absl::StrCat("--spec ", whole, " --resume --checkpoint_dir ",
                                                                      dir, "/ckpt_for_more --metrics ", dir,
                                                                      "/more.jsonl")));
    ASSERT_EQ(more.exit_code, 0) << more.output;
    ASSERT_EQ(TrainRecords(dir + "/more.jsonl").size(), 10u);
    ExpectSameLosses(TrainRecords(dir + "/more.jsonl"), want, 11, 20,
                     absl::StrCat("resumed at ", also_at, " ranks vs uninterrupted"));
  }
}

TEST_F(DataParallelTest, CheckpointOfTwoRanksResumesAtOneAndAtTwo) { ExpectResumesAtOneAndAtTwo("dp_resume", ""); }

// ZeRO-1: the checkpoint holds the whole optimizer state, gathered from both ranks'
// slices; 1 rank loads it whole, 2 ranks each take their slice again.
TEST_F(DataParallelTest, ZeroCheckpointOfTwoRanksResumesAtOneAndAtTwo) {
  ExpectResumesAtOneAndAtTwo("dp_resume_zero1", "distributed { zero_stage: 1 }");
}

// ZeRO-2 writes the same whole-tensor checkpoint; with accumulation its sliced gradient
// accumulators too (a step's first micro-batch restarts them, wherever they resume).
TEST_F(DataParallelTest, Zero2CheckpointOfTwoRanksResumesAtOneAndAtTwo) {
  ExpectResumesAtOneAndAtTwo("dp_resume_zero2", "distributed { zero_stage: 2 bucket_mb: 0.05 }");
}
TEST_F(DataParallelTest, Zero2CheckpointWithAccumulationResumesAtOneAndAtTwo) {
  ExpectResumesAtOneAndAtTwo("dp_resume_zero2_accumulate",
                             "accumulate_steps: 2 distributed { zero_stage: 2 bucket_mb: 0.05 }");
}

// The loss scale and FP8 scaling state are the same state in a ZeRO job and in one
// process (a ZeRO job keeps no low-precision weight copies, which follow the master weights
// anyway): an fp16 ZeRO-1 checkpoint resumed by one process carries its grown loss scale.
TEST_F(DataParallelTest, ZeroCheckpointKeepsItsLossScaleInOneProcess) {
  const std::string fields =
      "batch_size: 64 seed: 3 optimizer { adamw { lr: 0.002 } } precision { compute: FP16 } "
      "loss_scaling { mode: DYNAMIC init_scale: 1024 growth_interval: 2 } distributed { zero_stage: 1 } ";
  const std::string spec = testing::WriteFashionMlpSpec(
      "dp_resume_fp16_zero1", fields + "steps: 6 checkpoint { every_n_steps: 0 at_end: true }");
  const std::string dir = fs::path(spec).parent_path().string();
  const CommandResult saved = RunCommand(
      Mpirun(2, absl::StrCat("--spec ", spec, " --metrics ", dir, "/two.jsonl --checkpoint_dir ", dir, "/ckpt")));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const std::string longer = testing::WriteFashionMlpSpec("dp_resume_fp16_zero1_longer", fields + "steps: 7");
  const CommandResult resumed = RunCommand(Train(
      absl::StrCat("--spec ", longer, " --resume --checkpoint_dir ", dir, "/ckpt --metrics ", dir, "/one.jsonl")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(absl::StrContains(resumed.output, "reset")) << resumed.output;
  const std::vector<TrainRecord> before = TrainRecords(dir + "/two.jsonl"), after = TrainRecords(dir + "/one.jsonl");
  ASSERT_EQ(before.size(), 6u);
  ASSERT_EQ(after.size(), 1u);
  ASSERT_GT(before.back().loss_scale, 1024) << "the scale grew";
  EXPECT_GE(after[0].loss_scale, before.back().loss_scale) << "step 7 starts from where step 6 left the scale";
}

// ZeRO-3: the parameters themselves are slices; the checkpoint gathers them whole, and 1, 2
// and 3 ranks (which slice none of the weights evenly) continue the same losses.
TEST_F(DataParallelTest, Zero3CheckpointOfTwoRanksResumesAtOneTwoAndThree) {
  // Batch 48, which 1, 2 and 3 ranks divide. (At 96 with AdamW, 2 ranks part from 1 by 3e-4
  // in the loss after 10 steps with or without ZeRO: Adam's sign-sized steps on gradient
  // elements that cancel to near zero, whose sign follows the summation order.)
  ExpectResumesAtOneAndAtTwo("dp_resume_zero3", "distributed { zero_stage: 3 bucket_mb: 0.05 }", 48, 3);
}

// A model nobody here wrote, exported the way users export it: timm's ViT through
// torch.export (tests/golden/corpus/vit; its batch is fixed at 4). ZeRO-3 with 2 micro-batches
// of 4 per rank on 2 ranks against one process with 4 micro-batches of 4: the same 16
// examples per step, the same losses within 1e-5. (Evaluation defaults to a rank's batch,
// which the fixed-batch export accepts.)
TEST_F(DataParallelTest, Zero3WithAccumulationTrainsAnExportedVitAsOneProcessDoes) {
  const std::string corpus = testing::SourcePath("tests/golden/corpus/vit");
  const std::string dir = testing::MakeTempDir("dp_vit_zero3");
  auto write = [&](const std::string& name, const std::string& fields) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << absl::StrCat(
        "model: \"", corpus, "/dynamo/model.onnx\"\nfeatures_input: \"x\"\n",
        "loss { type: SOFTMAX_CROSS_ENTROPY output: \"linear_8\" }\n", "train_data { npy { features: \"", corpus,
        "/features.npy\" labels: \"", corpus, "/labels.npy\" } shuffle: false }\n",
        "optimizer { adamw { lr: 0.001 weight_decay: 0.01 } } seed: 0 steps: 6 ", fields, "\n");
    return path;
  };
  const std::string one = write("one.spec", "batch_size: 4 accumulate_steps: 4");
  const std::string two =
      write("two.spec", "batch_size: 8 accumulate_steps: 2 distributed { zero_stage: 3 bucket_mb: 0.05 }");
  const CommandResult a = RunCommand(Train(absl::StrCat("--spec ", one, " --metrics ", dir, "/one.jsonl")));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const CommandResult b = RunCommand(Mpirun(2, absl::StrCat("--spec ", two, " --metrics ", dir, "/two.jsonl")));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<TrainRecord> want = TrainRecords(dir + "/one.jsonl");
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(TrainRecords(dir + "/two.jsonl").size(), 6u);
  ExpectSameLosses(TrainRecords(dir + "/two.jsonl"), want, 1, 6, "ViT, ZeRO-3 on 2 ranks vs one process");
}

// Exporting from a ZeRO-3 job: every rank takes part in gathering the sliced weights (and
// their averages), rank 0 writes; the files are byte for byte those of the same ranks
// without ZeRO (whose weights are the same bits).
TEST_F(DataParallelTest, Zero3JobExportsTheWholeModel) {
  const std::string fields = "batch_size: 64 steps: 10 seed: 4 optimizer { adamw { lr: 0.002 } } ema { decay: 0.9 } ";
  std::vector<std::string> dirs;  // without ZeRO, with ZeRO-3
  for (const std::string& zero : {std::string(), std::string("distributed { zero_stage: 3 bucket_mb: 0.05 }")}) {
    const std::string spec = testing::WriteFashionMlpSpec(zero.empty() ? "dp_export" : "dp_export_zero3", fields + zero);
    const std::string dir = dirs.emplace_back(fs::path(spec).parent_path().string());
    const CommandResult run = RunCommand(Mpirun(
        2, absl::StrCat("--spec ", spec, " --export_onnx ", dir, "/model.onnx --export_ema_onnx ", dir, "/ema.onnx")));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, "exported " + dir + "/model.onnx")) << run.output;
  }
  for (const char* file : {"/model.onnx", "/ema.onnx"}) {
    std::ifstream a(dirs[0] + file, std::ios::binary), b(dirs[1] + file, std::ios::binary);
    const std::string want((std::istreambuf_iterator<char>(a)), {}), got((std::istreambuf_iterator<char>(b)), {});
    ASSERT_GT(want.size(), 900000u) << file;
    EXPECT_TRUE(got == want) << file << ": the ZeRO-3 job's export differs from the same ranks' without ZeRO";
  }
}

// memory.limit_mb: the Fashion MLP with AdamW at batch 64 needs 4.03 MiB at 1 rank (its
// weights, gradients and optimizer state alone 3.65). Under a 2 MiB limit it is refused
// there, with no configuration that fits; it trains on 4 ranks with ZeRO-3 and full
// recomputation (1.71 MiB: parameters, gradients and state sliced); and 4 ranks without
// ZeRO are refused naming ZeRO-3 as the smallest configuration that fits (ZeRO-1 and 2
// need 2.39 and 2.38: the whole weights).
TEST_F(DataParallelTest, AModelOverTheLimitOfOneRankTrainsOnFourWithZero3) {
  const std::string fields =
      "batch_size: 64 steps: 3 optimizer { adamw { lr: 0.002 } } memory { limit_mb: 2 recompute: FULL } ";
  const std::string spec =
      testing::WriteFashionMlpSpec("dp_limit", fields + "distributed { zero_stage: 3 bucket_mb: 0.05 }");
  const CommandResult one =
      RunCommand(Train(absl::StrCat("--spec ", spec, " --checkpoint_dir ", testing::MakeTempDir("dp_limit_one"))));
  EXPECT_NE(one.exit_code, 0) << one.output;
  EXPECT_TRUE(absl::StrContains(one.output, "spec field memory.limit_mb: this program needs 4.03 MiB per rank"))
      << one.output;
  EXPECT_TRUE(absl::StrContains(one.output, "over the limit of 2.00 MiB")) << one.output;
  EXPECT_TRUE(absl::StrContains(one.output, "No ZeRO stage and recomputation policy fits at 1 rank")) << one.output;

  const CommandResult four =
      RunCommand(Mpirun(4, absl::StrCat("--spec ", spec, " --checkpoint_dir ", testing::MakeTempDir("dp_limit_four"))));
  ASSERT_EQ(four.exit_code, 0) << four.output;
  EXPECT_TRUE(absl::StrContains(four.output, "data-parallel: 4 ranks")) << four.output;

  const std::string plain = testing::WriteFashionMlpSpec("dp_limit_plain", fields);
  const CommandResult unsharded = RunCommand(
      Mpirun(4, absl::StrCat("--spec ", plain, " --checkpoint_dir ", testing::MakeTempDir("dp_limit_plain_run"))));
  EXPECT_NE(unsharded.exit_code, 0) << unsharded.output;
  EXPECT_TRUE(absl::StrContains(unsharded.output, "The smallest configuration that fits: distributed { zero_stage: 3 } "
                                                  "memory { recompute: NONE }"))
      << unsharded.output;
}

// Starts a long 2-rank job, waits for its third step, does `action` (a kill command) to
// rank 1, and returns the job's output and how long it took to end after the action.
struct EndedJob {
  int exit_code = -1;
  double seconds_after_action = 0;
  std::string output;
};

EndedJob DisturbRankOne(const std::string& name, const std::string& extra_fields, const std::string& signal) {
  const std::string spec = testing::WriteFashionMlpSpec(
      name, "batch_size: 64 steps: 1000000 seed: 1 optimizer { adamw { lr: 0.001 } } " + extra_fields);
  const std::string dir = fs::path(spec).parent_path().string();
  const std::string script = dir + "/disturb.sh";
  std::ofstream(script) << "set -u\n"
                        << "(" << Mpirun(2, absl::StrCat("--spec ", spec, " --metrics ", dir, "/m.jsonl")) << " > "
                        << dir << "/job.out; echo $? > " << dir << "/job.rc) &\n"
                        << "for i in $(seq 600); do [ \"$(grep -c '\"train\"' " << dir
                        << "/m.jsonl 2>/dev/null)\" -ge 3 ] 2>/dev/null && break; sleep 0.1; done\n"
                        << "for p in $(pgrep -f \"mpc-train --spec " << spec << "\"); do\n"
                        << "  tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && "
                        << "kill -" << signal << " $p && echo \"sent " << signal << " to $p\"\n"
                        << "done\n"
                        << "start=$(date +%s.%N)\n"
                        << "for i in $(seq 1200); do [ -s " << dir << "/job.rc ] && break; sleep 0.1; done\n"
                        << "echo \"ended after $(echo \"$(date +%s.%N) - $start\" | bc) s\"\n"
                        << "pkill -9 -f \"mpc-train --spec " << spec << "\" || true\n"
                        << "wait\n";
  const CommandResult ran = RunCommand("bash " + script);
  EndedJob job;
  job.output = ran.output;
  std::ifstream rc(dir + "/job.rc");
  rc >> job.exit_code;
  std::ifstream out(dir + "/job.out");
  job.output += std::string((std::istreambuf_iterator<char>(out)), {});
  const size_t at = ran.output.find("ended after ");
  job.seconds_after_action = at == std::string::npos ? 1e9 : std::strtod(ran.output.c_str() + at + 12, nullptr);
  return job;
}

TEST_F(DataParallelTest, KilledRankEndsTheJobNamingIt) {
  const EndedJob job = DisturbRankOne("dp_killed", "", "9");
  ASSERT_TRUE(absl::StrContains(job.output, "sent 9 to")) << job.output;
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_LT(job.seconds_after_action, 60) << job.output;
  EXPECT_TRUE(absl::StrContains(job.output, "rank 1")) << job.output;
}

TEST_F(DataParallelTest, HungRankEndsTheJobAfterTheTimeout) {
  // SIGSTOP: rank 1 stops answering without exiting; rank 0 waits in its next AllReduce.
  // 10 s: long enough that a busy machine (ctest -j2) never trips it before the stop.
  const EndedJob job = DisturbRankOne("dp_hung", "distributed { timeout_s: 10 }", "STOP");
  ASSERT_TRUE(absl::StrContains(job.output, "sent STOP to")) << job.output;
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_LT(job.seconds_after_action, 60) << job.output;
  EXPECT_TRUE(absl::StrContains(job.output, "rank 0 of 2: collective")) << job.output;
  EXPECT_TRUE(absl::StrContains(job.output, "died or hangs")) << job.output;
}

TEST_F(DataParallelTest, BatchThatDoesNotSplitIsRefused) {
  const std::string spec = testing::WriteFashionMlpSpec("dp_uneven", "batch_size: 65 steps: 2");
  const CommandResult r = RunCommand(Mpirun(2, "--spec " + spec));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output,
                                "batch_size: the global batch of 65 examples does not split evenly across "
                                "the 2 ranks"))
      << r.output;
}

TEST_F(DataParallelTest, RanksWithDifferentSpecsAreRefused) {
  const std::string a =
      testing::WriteFashionMlpSpec("dp_spec_a", "batch_size: 64 steps: 2 optimizer { sgd { lr: 0.1 } }");
  const std::string b =
      testing::WriteFashionMlpSpec("dp_spec_b", "batch_size: 64 steps: 2 optimizer { sgd { lr: 0.2 } }");
  // MPMD: rank 0 runs spec a, rank 1 spec b.
  const CommandResult r = RunCommand(
      absl::StrCat("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun --oversubscribe "
                   "--bind-to none ",
                   "-np 1 ", MPC_TRAIN_BIN, " --spec ", a, " : -np 1 ", MPC_TRAIN_BIN, " --spec ", b, " 2>&1"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "do not run the same program")) << r.output;
}

// Compiling needs no job: `mpc compile --ranks N` shows rank 0's program of an N-rank job.
TEST(DataParallelCompileTest, ReportListsTheBucketsOfAJob) {
  const std::string spec = testing::WriteFashionMlpSpec(
      "dp_compile", "batch_size: 64 steps: 2 optimizer { adamw { lr: 0.002 } } distributed { bucket_mb: 0.1 }");
  const CommandResult r = RunCommand(absl::StrCat(MPC_TOOL_BIN, " compile --spec ", spec, " --ranks 2 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Last layer first: 5.*, 3.bias and 3.weight reach 0.13 MiB and close the first bucket;
  // 1.bias and 1.weight (0.77 MiB) make the second.
  EXPECT_TRUE(absl::StrContains(r.output,
                                "data-parallel: 2 ranks, 32 examples each; gradients summed in 2 AllReduce "
                                "buckets"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "4 gradients (5.bias .. 3.weight)")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "2 gradients (1.bias .. 1.weight)")) << r.output;
  const CommandResult bad = RunCommand(absl::StrCat(MPC_TOOL_BIN, " compile --spec ", spec, " --ranks 3 2>&1"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad.output, "does not split evenly")) << bad.output;
}

TEST(DataParallelCompileTest, ReportShowsWhatZeroKeepsPerRank) {
  // AdamW's two moments of the MLP's 235,146 parameters: 1.79 MiB, half of it per rank.
  const std::string spec = testing::WriteFashionMlpSpec(
      "dp_compile_zero", "batch_size: 64 steps: 2 optimizer { adamw { lr: 0.002 } } distributed { zero_stage: 1 }");
  const CommandResult r = RunCommand(absl::StrCat(MPC_TOOL_BIN, " compile --spec ", spec, " --ranks 2 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "gradients summed in 1 ReduceScatter bucket")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output,
                                "zero-1: each rank keeps and updates its slice of the optimizer state (0.90 "
                                "of 1.79 MiB)"))
      << r.output;
  // The per-rank table: a row per stage and recomputation policy; the optimizer column is
  // the whole 1.79 MiB without ZeRO and half of it under ZeRO-1 and ZeRO-2.
  EXPECT_TRUE(absl::StrContains(r.output, "memory per rank at 2 ranks (MiB")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "zero  recompute   weights gradients optimizer activations")) << r.output;
  for (const char* row : {"  0     none           0.90      0.90      1.79", "  1     none           0.90      0.90      0.90",
                          "  2     none           0.90      0.90      0.90", "  2     full           0.90",
                          "  3     none           0.45      0.90      0.90"}) {
    EXPECT_TRUE(absl::StrContains(r.output, row)) << row << "\n" << r.output;
  }
}

}  // namespace
}  // namespace mpc

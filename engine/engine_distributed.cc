// The Engine in a data-parallel job (docs/distributed.md): joining it, checking that every
// rank runs the same program, each rank's share of the global batch, and gathering the
// per-rank step times. The averaging itself is in the compiled program (the
// data-parallel pass's AllReduce ops); this file is what the engine does around it.
#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/cpu_threads.h"
#include "base/crc32c.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "engine/engine_impl.h"

namespace mpc {
namespace {

// Rows [begin, begin + local's rows) of `global` (examples along axis 0) into `local`.
void CopyRows(const Tensor& global, int64_t begin, Tensor* local) {
  const int64_t rows = global.shape().empty() ? 1 : global.shape()[0];
  const size_t row_bytes = rows ? global.bytes() / static_cast<size_t>(rows) : 0;
  std::memcpy(local->raw(), static_cast<const char*>(global.raw()) + begin * row_bytes, local->bytes());
}

// `t` with its first axis (the batch) divided by `parts`.
Tensor RankShare(const Tensor& t, int parts) {
  Shape shape = t.shape();
  shape[0] /= parts;
  return Tensor(t.dtype(), shape);
}

// A node whose kernel calls the Communicator (every rank must run the same ones).
bool IsCollective(const Node& node) {
  static const char* const kOps[] = {"AllReduce", "AllReduceInPlace", "ReduceScatter", "AllGatherInPlace"};
  for (const char* op : kOps) {
    if (node.op == op) return true;
  }
  return node.op == "ClipByGlobalNorm" && node.attrs.GetInt("sharded", 0) != 0;  // ZeRO-1's norm
}

}  // namespace

absl::Status Engine::Impl::JoinJob() {
  const double timeout = spec.distributed().timeout_s();
  MPC_ASSIGN_OR_RETURN(world, JoinWorld(timeout));
  if (!world) return absl::OkStatus();
  rank = world->rank();
  world_size = world->size();
  backend->set_communicator(world);
  if (backend->name() == "cpu") {
    // Before anything creates an OpenMP team or a oneDNN primitive (sized from it).
    const std::string threads = ShareCpuThreadsAmongLocalRanks(LaunchedLocalSize());
    if (!threads.empty()) notices.push_back(absl::StrCat("rank ", rank, ": ", threads));
  }
  if (options.external_batches || !spec.has_train_data()) {
    notices.push_back(absl::StrCat("rank ", rank, " of ", world_size,
                                   ": Step(batch) takes this rank's share of the batch (batch_size / ranks examples)"));
  }
  const int64_t batch = spec.batch_size();
  if (batch % world_size != 0) {
    const int64_t lower = batch / world_size * world_size;
    return absl::InvalidArgumentError(absl::StrCat(
        "spec field batch_size: the global batch of ", batch, " examples does not split evenly across the ", world_size,
        " ranks of this job (", batch, " = ", batch / world_size, " x ", world_size, " + ", batch % world_size,
        "); use a multiple of ", world_size, " (e.g. ", lower > 0 ? lower : world_size, " or ", lower + world_size,
        ") or another number of ranks"));
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::CheckSameProgramOnAllRanks() {
  if (!world) return absl::OkStatus();
  // What must agree, each as a checksum: mpc's version, the spec after the command line's
  // overrides, the model, and the collectives in the order this rank will call them.
  std::string model = model_bytes;
  if (model.empty()) {
    MPC_ASSIGN_OR_RETURN(model, ReadFileToString(model_path));
  }
  std::string collectives;
  int64_t count = 0;
  for (const Node* node : train_program.results.memory_plan.order) {
    if (!IsCollective(*node)) continue;
    ++count;
    absl::StrAppend(&collectives, node->name, ":");
    for (const Value* v : node->inputs) absl::StrAppend(&collectives, NumElements(v->shape), ",");
  }
  const std::string mine =
      absl::StrFormat("mpc %d.%d.%d, world %d, spec %08x, model %08x (%d bytes), %d collectives %08x",
                      MPC_VERSION_MAJOR, MPC_VERSION_MINOR, MPC_VERSION_PATCH, world_size,
                      Crc32c(spec.SerializeAsString()), Crc32c(model), model.size(), count, Crc32c(collectives));
  MPC_ASSIGN_OR_RETURN(std::vector<std::string> all, world->AllGather(mine, "'program fingerprint' at start"));
  std::vector<std::string> differ;
  for (int r = 1; r < world_size; ++r) {
    if (all[r] != all[0]) differ.push_back(absl::StrCat("rank ", r, ": ", all[r]));
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the ranks of this job do not run the same program (same mpc, spec, command line and model on every rank): "
      "rank 0: ",
      all[0], "; ", absl::StrJoin(differ, "; ")));
}

void Engine::Impl::PrepareRankBatches() {
  if (world_size <= 1 || !has_train_data) return;
  global_feature_batch = feature_batch;
  global_label_batch = label_batch;
  global_more_input_batches = more_input_batches;
  feature_batch = RankShare(global_feature_batch, world_size);
  label_batch = RankShare(global_label_batch, world_size);
  for (Tensor& t : more_input_batches) t = RankShare(t, world_size);
}

void Engine::Impl::NextBatch() {
  if (world_size <= 1) {
    if (prefetch.ready && prefetch.epoch == batches->epoch() && prefetch.batch_in_epoch == batches->batch_in_epoch()) {
      // The batch gathered during the last step is this one: take its buffers (pinned
      // alike), and leave ours for the next prefetch.
      std::swap(feature_batch, prefetch.features);
      std::swap(label_batch, prefetch.labels);
      std::swap(more_input_batches, prefetch.more_inputs);
      batch_uploaded_inputs = prefetch.uploaded_inputs;
      batches->Skip();
    } else {
      batches->Next(&feature_batch, &label_batch, &more_input_batches);
      batch_uploaded_inputs.clear();
    }
    prefetch.ready = false;
    return;
  }
  // Every rank draws the same global batch (same seed, same position) and keeps its rows.
  batches->Next(&global_feature_batch, &global_label_batch, &global_more_input_batches);
  const int64_t share = feature_batch.shape()[0];
  CopyRows(global_feature_batch, rank * share, &feature_batch);
  CopyRows(global_label_batch, rank * share, &label_batch);
  for (size_t i = 0; i < more_input_batches.size(); ++i) {
    CopyRows(global_more_input_batches[i], rank * share, &more_input_batches[i]);
  }
}

absl::Status Engine::Impl::CheckRanksAgree() const {
  if (!world) return absl::OkStatus();
  // The trained state: parameters, their optimizer state, the loss scale. Not the model's
  // own state (BatchNorm running statistics), which each rank computes from its share.
  std::vector<std::string> params;
  for (const Value* v : train_exec->PersistentValues()) {
    if (v->kind == ValueKind::kParameter) params.push_back(v->name);
  }
  auto trained = [&](const Value* v) {
    if (!v->sharded_from.empty()) return false;  // ZeRO-1: each rank holds its own slice
    if (v->kind == ValueKind::kParameter || v->name == "loss_scale") return true;
    if (absl::StrContains(v->name, ".fp8_")) return true;  // FP8 scales and amax histories
    // A gradient accumulator holds this rank's own micro-batches' sum.
    if (absl::EndsWith(v->name, ".grad_accum")) return false;
    for (const std::string& p : params) {
      if (v->name.size() > p.size() && v->name.compare(0, p.size() + 1, p + ".") == 0) return true;
    }
    return false;
  };
  std::vector<std::string> names;
  std::string sums;
  for (const Value* v : train_exec->PersistentValues()) {
    if (!trained(v)) continue;
    MPC_ASSIGN_OR_RETURN(Tensor t, train_exec->ReadPersistent(v->name));
    names.push_back(v->name);
    absl::StrAppendFormat(&sums, "%08x", Crc32cExtend(0, t.raw(), t.bytes()));
  }
  MPC_ASSIGN_OR_RETURN(std::vector<std::string> all,
                       world->AllGather(sums, absl::StrCat("'state check' at step ", step)));
  for (int r = 1; r < world_size; ++r) {
    if (all[r] == all[0]) continue;
    for (size_t i = 0; i < names.size(); ++i) {
      if (all[r].compare(8 * i, 8, all[0], 8 * i, 8) == 0) continue;
      return absl::InternalError(absl::StrCat("at step ", step, " rank ", r, "'s '", names[i],
                                              "' differs from rank 0's: the ranks no longer train the same model "
                                              "(a bug in mpc: please report it with the spec); not checkpointing"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Engine::Impl::GatherWhole(const Value& v) const {
  if (!world) return absl::InternalError(absl::StrCat("'", v.name, "' is sliced (ZeRO) outside a data-parallel job"));
  MPC_ASSIGN_OR_RETURN(Tensor slice, train_exec->ReadPersistent(v.name));
  const int64_t length = slice.num_elements();
  std::vector<float> all(static_cast<size_t>(length) * world_size);
  MPC_RETURN_IF_ERROR(world->AllGatherFloats(slice.data<float>(), all.data(), length,
                                             absl::StrCat("'gather of ", v.name, "' at step ", step)));
  Tensor whole(DType::kF32, v.sharded_from);
  std::copy_n(all.data(), whole.num_elements(), whole.data<float>());  // the ranks' slices, padding dropped
  return whole;
}

absl::StatusOr<SlicedState> Engine::Impl::GatherSlicedState() const {
  SlicedState out = SlicePlace();
  for (const Value* v : train_exec->PersistentValues()) {
    if (v->sharded_from.empty()) continue;
    MPC_ASSIGN_OR_RETURN(Tensor whole, GatherWhole(*v));
    out.whole.emplace(v->name, std::move(whole));
  }
  return out;
}

absl::Status Engine::Impl::CheckWhole(const std::string& name, const std::string& call) const {
  const Value* v = train_program.graph->FindValue(name);
  if (!v || v->sharded_from.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      call, "('", name, "'): under ZeRO (distributed.zero_stage ", spec.distributed().zero_stage(),
      ") each rank holds only its slice of this tensor; read it from a checkpoint (SaveCheckpoint gathers it whole)"));
}

absl::StatusOr<std::vector<double>> Engine::Impl::GatherStepTimes(double ms_per_step) const {
  if (!world) return std::vector<double>{ms_per_step};
  MPC_ASSIGN_OR_RETURN(std::vector<std::string> all,
                       world->AllGather(absl::StrCat(ms_per_step), "'per-rank step times' at the end"));
  std::vector<double> out;
  for (const std::string& s : all) out.push_back(std::strtod(s.c_str(), nullptr));
  return out;
}

}  // namespace mpc

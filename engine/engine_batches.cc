// The Engine fed by its caller (mpc.h's Batch of HostTensors) rather than by the spec's data
// sources: Step(batch), Evaluate(batches), and parameters set by name. A batch is checked
// against the compiled program (every input's name, dtype and shape; labels in range)
// before anything runs, so a batch that does not fit is an error that changes nothing;
// then it feeds the same step (Engine::Impl::RunStep) and scoring as the spec's data.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/engine_impl.h"
#include "engine/host_tensor_util.h"
#include "engine/index_check.h"

namespace mpc {
namespace {

// What one entry of a batch must be: the dtype, and per example as many values as the
// program's value `shape` ([batch, ...]) holds.
struct Expected {
  std::string name;
  std::string role;  // "model input", "labels"
  DType dtype;
  Shape shape;
};

int64_t ValuesPerExample(const Shape& shape) {
  return shape.empty() || shape[0] == 0 ? 0 : NumElements(shape) / shape[0];
}

// The entry `name` of the batch as a Tensor, checked against `want`: dtype, rows (exactly
// `rows`, or 1..rows when `up_to`), values per example and the data's byte count. The
// messages name the entry, what was expected and what was given.
absl::StatusOr<Tensor> ToTensor(const HostTensor& given, const Expected& want, int64_t rows, bool up_to) {
  const std::string given_text = absl::StrCat(HostDTypeName(given.dtype), HostShapeText(given.shape));
  const int64_t per_example = ValuesPerExample(want.shape);
  const std::string want_text = absl::StrCat(DTypeName(want.dtype), HostShapeText(want.shape), " (",
                                             up_to ? "up to " : "", rows, " examples of ", per_example, " values)");
  auto mismatch = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("batch entry '", want.name, "' (", want.role, "): ", what,
                                                   ": expected ", want_text, ", given ", given_text));
  };
  if (ToDType(given.dtype) != want.dtype) return mismatch("wrong dtype");
  // The element count, checked for overflow (a shape is the caller's, not to be trusted).
  int64_t elements = 1;
  for (int64_t d : given.shape) {
    if (d < 0) return mismatch("negative dimension");
    if (__builtin_mul_overflow(elements, d, &elements)) return mismatch("too many elements");
  }
  const int64_t given_rows = given.shape.empty() ? -1 : given.shape[0];
  const bool rows_ok = up_to ? given_rows >= 1 && given_rows <= rows : given_rows == rows;
  if (!rows_ok) return mismatch("wrong batch dimension (the leading axis)");
  if (elements != given_rows * per_example) return mismatch("wrong shape (values per example)");
  const size_t bytes = static_cast<size_t>(elements) * given.element_size();
  if (given.data.size() != bytes) {
    return mismatch(absl::StrCat("its data holds ", given.data.size(), " bytes but the shape needs ", bytes));
  }
  Tensor t(want.dtype, Shape(given.shape.begin(), given.shape.end()));
  if (bytes > 0) std::memcpy(t.raw(), given.data.data(), bytes);
  return t;
}

// Every entry of `batch` converted and checked against `program`'s model inputs and the
// training labels; an entry the program does not take is an error too. The tensors come
// back in `inputs` (model input name -> tensor) and `*label_tensor`.
absl::Status CheckBatch(const Engine::Impl& m, const Program& program, const Batch& batch, int64_t rows, bool up_to,
                        std::vector<std::pair<std::string, Tensor>>* inputs, Tensor* label_tensor) {
  const Graph& g = *program.graph;
  const Program& train = m.train_program;
  std::vector<Expected> expected;
  for (const std::string& name : program.model_inputs) {
    const Value* v = g.FindValue(name);
    expected.push_back(
        {name, name == program.features_input ? "model input, features_input" : "model input", v->dtype, v->shape});
  }
  // The labels as the training program takes them: [batch] class ids, or [batch, ...]
  // (class per position, or regression targets).
  const Value* labels = train.graph->FindValue(train.labels_input);
  Shape label_shape{rows};
  if (m.spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) {
    label_shape.insert(label_shape.end(), m.label_row.begin(), m.label_row.end());
  } else {
    label_shape.insert(label_shape.end(), train.logits_shape.begin() + 1, train.logits_shape.end());
  }
  expected.push_back({train.labels_input, "labels", labels->dtype, label_shape});
  std::vector<std::string> names;
  for (const Expected& e : expected) names.push_back(e.name);
  for (const auto& [name, tensor] : batch) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch entry '", name, "': the model has no input of that name ",
                       "and it is not the labels; a batch takes exactly: ", absl::StrJoin(names, ", ")));
    }
  }
  int64_t batch_rows = -1;
  for (const Expected& e : expected) {
    auto it = batch.find(e.name);
    if (it == batch.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the batch has no entry '", e.name, "' (", e.role, ", ",
                                                     DTypeName(e.dtype), HostShapeText(e.shape),
                                                     "); a batch takes exactly: ", absl::StrJoin(names, ", ")));
    }
    MPC_ASSIGN_OR_RETURN(Tensor t, ToTensor(it->second, e, rows, up_to));
    if (batch_rows >= 0 && t.shape()[0] != batch_rows) {
      return absl::InvalidArgumentError(absl::StrCat("batch entry '", e.name, "' has ", t.shape()[0],
                                                     " examples but the entries before it ", batch_rows,
                                                     "; every entry of a batch has the same number of examples"));
    }
    batch_rows = t.shape()[0];
    if (e.role == "labels") {
      if (m.spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) {
        // An id outside the classes would index past the logits.
        const int64_t classes = train.classes;
        for (int64_t i = 0; i < t.num_elements(); ++i) {
          const int64_t label = t.data<int64_t>()[i];
          if (label < 0 || label >= classes) {
            return absl::InvalidArgumentError(absl::StrCat("batch entry '", e.name, "' (labels): element ", i, " is ",
                                                           label, ", outside the model's ", classes, " classes (0..",
                                                           classes - 1, ")"));
          }
        }
      }
      *label_tensor = std::move(t);
    } else {
      MPC_RETURN_IF_ERROR(CheckGatherIndices(*g.FindValue(e.name), t, absl::StrCat("batch entry '", e.name, "'")));
      inputs->emplace_back(e.name, std::move(t));
    }
  }
  return absl::OkStatus();
}

// A batch checked and converted: the model inputs' tensors and the labels.
struct CheckedBatch {
  std::vector<std::pair<std::string, Tensor>> inputs;
  Tensor labels;
};

// One optimizer step on the caller's micro-batches (as many as accumulate_steps): every one
// checked, then fed to Engine::Impl::RunStep. Pointers, so Step(batch) copies nothing.
absl::StatusOr<StepMetrics> StepOn(Engine::Impl& m, const std::vector<const Batch*>& micro_batches) {
  MPC_RETURN_IF_ERROR(m.CheckUsable());
  const int64_t want = m.MicroBatchesPerStep();
  if (static_cast<int64_t>(micro_batches.size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat("StepMicroBatches: ", micro_batches.size(),
                                                   " micro-batches given but the spec's accumulate_steps is ", want,
                                                   "; pass exactly that many"));
  }
  const Program& p = m.train_program;
  std::vector<CheckedBatch> checked(micro_batches.size());
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    absl::Status st =
        CheckBatch(m, p, *micro_batches[i], p.batch_size, /*up_to=*/false, &checked[i].inputs, &checked[i].labels);
    if (!st.ok() && want > 1) return absl::Status(st.code(), absl::StrCat("micro-batch ", i, ": ", st.message()));
    MPC_RETURN_IF_ERROR(st);
  }
  return m.RunStep([&](int64_t micro) -> absl::Status {
    const CheckedBatch& c = checked[static_cast<size_t>(micro)];
    for (const auto& [name, tensor] : c.inputs) MPC_RETURN_IF_ERROR(m.train_exec->SetInput(name, tensor));
    return m.train_exec->SetInput(p.labels_input, c.labels);
  });
}

}  // namespace

absl::Status Engine::Impl::PrefetchNextBatch() {
  if (!prefetch.enabled || !feeding_from_iterator || batches->batches_per_epoch() == 0) return absl::OkStatus();
  batches->Peek(&prefetch.features, &prefetch.labels, &prefetch.more_inputs);
  prefetch.epoch = batches->epoch();
  prefetch.batch_in_epoch = batches->batch_in_epoch();
  prefetch.ready = true;
  // Only pinned buffers: the copy then runs as DMA beside the step's kernels (from
  // pageable memory the driver would stage it on the host, and small batches gain nothing).
  prefetch.uploaded_inputs.clear();
  const Program& p = train_program;
  auto upload = [&](const std::string& input, const Tensor& batch) -> absl::Status {
    if (!pinned_batches.IsPinned(batch)) return absl::OkStatus();
    MPC_ASSIGN_OR_RETURN(const bool uploaded, train_exec->UploadInputAhead(input, batch));
    if (uploaded) prefetch.uploaded_inputs.push_back(input);
    return absl::OkStatus();
  };
  MPC_RETURN_IF_ERROR(upload(p.features_input, prefetch.features));
  MPC_RETURN_IF_ERROR(upload(p.labels_input, prefetch.labels));
  for (size_t i = 0; i < prefetch.more_inputs.size(); ++i) {
    MPC_RETURN_IF_ERROR(upload(train_data.more_inputs[i].input, prefetch.more_inputs[i]));
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::FeedTrainBatch() {
  const Program& p = train_program;
  auto feed = [&](const std::string& input, const Tensor& batch) -> absl::Status {
    const bool uploaded = std::find(batch_uploaded_inputs.begin(), batch_uploaded_inputs.end(), input) !=
                          batch_uploaded_inputs.end();
    return uploaded ? train_exec->SetInputFromUpload(input) : train_exec->SetInput(input, batch);
  };
  MPC_RETURN_IF_ERROR(feed(p.features_input, feature_batch));
  MPC_RETURN_IF_ERROR(feed(p.labels_input, label_batch));
  for (size_t i = 0; i < more_input_batches.size(); ++i) {
    MPC_RETURN_IF_ERROR(feed(train_data.more_inputs[i].input, more_input_batches[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepMetrics> Engine::Step(const Batch& batch) {
  if (impl_->MicroBatchesPerStep() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Step(batch): the spec has accumulate_steps ", impl_->MicroBatchesPerStep(),
        " but Step(batch) takes one whole optimizer step; pass the micro-batches, StepMicroBatches(batches), or set "
        "accumulate_steps: 1 (and a larger batch_size)"));
  }
  return StepOn(*impl_, {&batch});
}

absl::StatusOr<StepMetrics> Engine::StepMicroBatches(const std::vector<Batch>& micro_batches) {
  std::vector<const Batch*> pointers;
  for (const Batch& b : micro_batches) pointers.push_back(&b);
  return StepOn(*impl_, pointers);
}

absl::StatusOr<EvalMetrics> Engine::Evaluate(const std::vector<Batch>& batches, Weights weights) {
  Impl& m = *impl_;
  const bool averaged = weights == Weights::kAverage;
  Executor* exec = averaged ? m.ema_eval_exec.get() : m.eval_exec.get();
  if (!exec) {
    return absl::FailedPreconditionError("no averaged weights to evaluate; add ema { decay: 0.999 evaluate: true }");
  }
  if (batches.empty()) return absl::InvalidArgumentError("Evaluate(batches): no batches given");
  const Program& p = averaged ? m.ema_eval_program : m.eval_program;
  const int64_t b = m.eval_batch_size;
  // Check every batch before running any, so a bad one costs nothing.
  std::vector<CheckedBatch> checked(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    absl::Status st = CheckBatch(m, p, batches[i], b, /*up_to=*/true, &checked[i].inputs, &checked[i].labels);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("Evaluate(batches): batch ", i, ": ", st.message()));
  }
  EvalScorer scorer(m.ScorerOptions(m.label_row));
  int64_t examples = 0;
  for (const CheckedBatch& c : checked) {
    const int64_t valid = c.labels.shape()[0];
    for (const auto& [name, tensor] : c.inputs) {
      // A short batch is padded with its first example to the program's batch size; only
      // the `valid` rows are scored.
      Tensor full(tensor.dtype(), Shape{b, tensor.num_elements() / valid});
      const size_t row = tensor.bytes() / static_cast<size_t>(valid);
      for (int64_t r = 0; r < b; ++r) {
        std::memcpy(static_cast<char*>(full.raw()) + r * row,
                    static_cast<const char*>(tensor.raw()) + (r < valid ? r : 0) * row, row);
      }
      MPC_RETURN_IF_ERROR(exec->SetInput(name, full));
    }
    MPC_RETURN_IF_ERROR(exec->Run(m.spec.seed(), m.step));
    MPC_ASSIGN_OR_RETURN(Tensor logits, exec->Fetch(p.logits_output));
    scorer.Add(logits, b, valid, c.labels, 0);
    examples += valid;
  }
  EvalMetrics out = scorer.Metrics(examples);
  out.averaged_weights = averaged;
  out.step = m.step;
  out.epoch = m.last_epoch;
  return out;
}

absl::Status Engine::SetParameter(const std::string& name, const std::vector<float>& values) {
  Impl& m = *impl_;
  MPC_RETURN_IF_ERROR(m.CheckWhole(name, "SetParameter"));
  const Value* v = m.train_program.graph->FindValue(name);
  if (!v || !v->persistent()) {
    return absl::NotFoundError(
        absl::StrCat("SetParameter: no parameter or state named '", name, "'; ParameterNames() lists them"));
  }
  // The model's shape (GetParameter's layout); the buffer may be padded beyond it.
  const Shape model_shape = v->logical_shape.empty() ? v->shape : v->logical_shape;
  if (static_cast<int64_t>(values.size()) != NumElements(model_shape)) {
    return absl::InvalidArgumentError(absl::StrCat("SetParameter('", name, "'): its model shape ",
                                                   ShapeToString(model_shape), " holds ", NumElements(model_shape),
                                                   " values but ", values.size(), " were given"));
  }
  Tensor t = Tensor::FromVector<float>(model_shape, values);
  if (model_shape != v->shape) t = t.PaddedTo(v->shape);
  if (v->dtype != DType::kF32) t = t.CastTo(v->dtype);
  return m.train_exec->WritePersistent(name, t);
}

std::vector<std::string> Engine::InputNames() const {
  const Program& p = impl_->train_program;
  std::vector<std::string> names{p.features_input};
  for (const std::string& n : p.model_inputs) {
    if (n != p.features_input) names.push_back(n);
  }
  return names;
}

std::string Engine::labels_name() const { return impl_->train_program.labels_input; }
int64_t Engine::batch_size() const { return impl_->train_program.batch_size; }

}  // namespace mpc

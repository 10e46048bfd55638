// mpc::Predictor (mpc.h): the public, thread-safe face of InferenceSession (engine/inference.h,
// the path `mpc run` takes). One session, the prototype, is created with the Predictor and
// never runs: it checks the model and options up front and gives the signatures. Runs go to a
// pool of workers, each InferenceSession::Clone() of the prototype (its own model copy,
// backend, compiled programs and executor arenas), so no two threads ever touch one session.
// Inputs are checked and converted against the prototype's signatures before a worker is
// taken; a worker goes back to the pool whatever its Run returned.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/host_tensor_util.h"
#include "engine/inference.h"
#include "engine/mpc.h"

namespace mpc {
namespace {

// The HostDType a model dtype is fed and returned as (mpc.h's TensorInfo).
HostDType PublicDType(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF64:
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return HostDType::kFloat32;
    case DType::kBF16:
      return HostDType::kBFloat16;
    case DType::kI64:
      return HostDType::kInt64;
    case DType::kI32:
    case DType::kU8:
    case DType::kBool:
      return HostDType::kInt32;
  }
  return HostDType::kFloat32;
}

std::vector<TensorInfo> Infos(const std::vector<TensorSignature>& sigs) {
  std::vector<TensorInfo> infos;
  for (const TensorSignature& s : sigs) {
    TensorInfo info;
    info.name = s.name;
    info.dtype = PublicDType(s.dtype);
    info.shape.assign(s.shape.begin(), s.shape.end());
    info.type = s.ToString();
    infos.push_back(std::move(info));
  }
  return infos;
}

std::string Listing(const std::vector<TensorInfo>& infos) {
  std::vector<std::string> parts;
  for (const TensorInfo& i : infos) {
    parts.push_back(
        absl::StrCat("'", i.name, "' ", HostDTypeName(i.dtype), HostShapeText(i.shape), " (model: ", i.type, ")"));
  }
  return parts.empty() ? std::string("(none)") : absl::StrJoin(parts, ", ");
}

}  // namespace

struct Predictor::Impl {
  PredictorOptions options;
  int max_workers = 1;
  std::unique_ptr<InferenceSession> prototype;  // never runs; cloned into workers
  std::vector<TensorInfo> inputs, outputs;
  std::vector<DType> input_dtypes;     // the model's, per input
  std::vector<bool> input_rank_known;  // false: the model declares no shape for the input
  std::string temp_dir;                // FromEngine's export, removed with the Predictor

  mutable std::mutex mu;
  mutable std::condition_variable returned;
  mutable std::vector<std::unique_ptr<InferenceSession>> idle;
  mutable int created = 0;

  ~Impl() {
    if (!temp_dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir, ec);
    }
  }

  absl::StatusOr<std::map<std::string, Tensor>> Convert(const HostTensors& given) const;
  // An idle worker, a new one while fewer than max_workers exist, else the first returned.
  absl::StatusOr<std::unique_ptr<InferenceSession>> Acquire() const;
  void Release(std::unique_ptr<InferenceSession> worker) const;
};

absl::StatusOr<std::map<std::string, Tensor>> Predictor::Impl::Convert(const HostTensors& given) const {
  for (const auto& [name, tensor] : given) {
    const bool known = std::any_of(inputs.begin(), inputs.end(), [&](const TensorInfo& i) { return i.name == name; });
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("Predictor::Run: the model has no input named '", name, "'; its inputs are: ", Listing(inputs)));
    }
  }
  std::vector<std::string> missing;
  for (const TensorInfo& i : inputs) {
    if (!given.count(i.name))
      missing.push_back(absl::StrCat("'", i.name, "' ", HostDTypeName(i.dtype), HostShapeText(i.shape)));
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Predictor::Run: no value given for input",
                                                   missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "),
                                                   "; every model input must be fed"));
  }
  std::map<std::string, Tensor> feeds;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorInfo& want = inputs[k];
    const HostTensor& t = given.at(want.name);
    const std::string given_text = absl::StrCat(HostDTypeName(t.dtype), HostShapeText(t.shape));
    auto mismatch = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat("Predictor::Run: input '", want.name, "': ", what, ": expected ", HostDTypeName(want.dtype),
                       HostShapeText(want.shape), " (model: ", want.type, "; -1 takes any size), given ", given_text));
    };
    if (t.dtype != want.dtype) return mismatch("wrong dtype");
    if (input_rank_known[k] && t.shape.size() != want.shape.size()) {
      return mismatch(absl::StrCat("wrong rank ", t.shape.size(), " instead of ", want.shape.size()));
    }
    int64_t elements = 1;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0) return mismatch(absl::StrCat("dimension ", d, " is negative"));
      if (t.shape[d] == 0) return mismatch(absl::StrCat("dimension ", d, " is 0 (an empty tensor has nothing to run)"));
      if (input_rank_known[k] && want.shape[d] >= 0 && want.shape[d] != t.shape[d]) {
        return mismatch(absl::StrCat("dimension ", d, " is ", t.shape[d], " instead of ", want.shape[d]));
      }
      if (__builtin_mul_overflow(elements, t.shape[d], &elements) || elements > (int64_t{1} << 40)) {
        return mismatch("too many elements");
      }
    }
    const size_t bytes = static_cast<size_t>(elements) * t.element_size();
    if (t.data.size() != bytes) {
      return mismatch(absl::StrCat("its data holds ", t.data.size(), " bytes but the shape needs ", bytes));
    }
    Tensor value(ToDType(t.dtype), Shape(t.shape.begin(), t.shape.end()));
    std::memcpy(value.raw(), t.data.data(), bytes);
    if (value.dtype() != input_dtypes[k]) value = value.CastTo(input_dtypes[k]);
    feeds.emplace(want.name, std::move(value));
  }
  return feeds;
}

absl::StatusOr<std::unique_ptr<InferenceSession>> Predictor::Impl::Acquire() const {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    if (!idle.empty()) {
      std::unique_ptr<InferenceSession> worker = std::move(idle.back());
      idle.pop_back();
      return worker;
    }
    if (created < max_workers) break;
    returned.wait(lock);
  }
  ++created;
  lock.unlock();
  auto worker = prototype->Clone();  // reads only the prototype's immutable parts
  if (!worker.ok()) {
    lock.lock();
    --created;
    returned.notify_one();
  }
  return worker;
}

void Predictor::Impl::Release(std::unique_ptr<InferenceSession> worker) const {
  {
    std::lock_guard<std::mutex> lock(mu);
    idle.push_back(std::move(worker));
  }
  returned.notify_one();
}

Predictor::Predictor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Predictor::~Predictor() = default;

namespace {

absl::StatusOr<std::unique_ptr<Predictor::Impl>> MakeImpl(
    const PredictorOptions& options,
    const std::function<absl::StatusOr<std::unique_ptr<InferenceSession>>(const InferenceOptions&)>& create) {
  if (options.max_concurrent_runs < 0) {
    return absl::InvalidArgumentError(absl::StrCat("PredictorOptions::max_concurrent_runs is ",
                                                   options.max_concurrent_runs,
                                                   "; use 0 (one per hardware thread) or a positive count"));
  }
  InferenceOptions internal;
  internal.device = options.device.empty() ? "cpu" : options.device;
  internal.precision = options.precision.empty() ? "f32" : options.precision;
  internal.pad_multiple = options.pad_multiple;
  auto impl = std::make_unique<Predictor::Impl>();
  impl->options = options;
  impl->max_workers = options.max_concurrent_runs > 0
                          ? options.max_concurrent_runs
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  MPC_ASSIGN_OR_RETURN(impl->prototype, create(internal));
  impl->inputs = Infos(impl->prototype->inputs());
  impl->outputs = Infos(impl->prototype->outputs());
  for (const TensorSignature& s : impl->prototype->inputs()) {
    impl->input_dtypes.push_back(s.dtype);
    impl->input_rank_known.push_back(s.dims != "[?...]");
  }
  return impl;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::FromFile(const std::string& path,
                                                               const PredictorOptions& options) {
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, MakeImpl(options, [&](const InferenceOptions& o) {
                         return InferenceSession::FromFile(path, o);
                       }));
  return std::unique_ptr<Predictor>(new Predictor(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::FromBytes(const std::string& bytes,
                                                                const PredictorOptions& options) {
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, MakeImpl(options, [&](const InferenceOptions& o) {
                         return InferenceSession::FromBytes(bytes, o, "<model bytes>");
                       }));
  return std::unique_ptr<Predictor>(new Predictor(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::FromEngine(Engine& engine, const PredictorOptions& options,
                                                                 Engine::Weights weights) {
  // The export as Engine::ExportOnnx writes it, into a private directory that lives as long
  // as the Predictor (an export with external data keeps its weights in a side file there).
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) return absl::InternalError(absl::StrCat("Predictor::FromEngine: no temporary directory: ", ec.message()));
  std::string tmpl = (base / "mpc-predictor-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("Predictor::FromEngine: cannot create a directory in ", base.string(), ": ",
                                            std::strerror(errno)));
  }
  const std::string path = (std::filesystem::path(tmpl) / "model.onnx").string();
  absl::Status exported = engine.ExportOnnx(path, weights);
  if (!exported.ok()) {
    std::filesystem::remove_all(tmpl, ec);
    return absl::Status(exported.code(), absl::StrCat("Predictor::FromEngine: ", exported.message()));
  }
  auto impl = MakeImpl(options, [&](const InferenceOptions& o) { return InferenceSession::FromFile(path, o); });
  if (!impl.ok()) {
    std::filesystem::remove_all(tmpl, ec);
    return impl.status();
  }
  (*impl)->temp_dir = tmpl;
  return std::unique_ptr<Predictor>(new Predictor(*std::move(impl)));
}

const std::vector<TensorInfo>& Predictor::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Predictor::outputs() const { return impl_->outputs; }
const std::vector<std::string>& Predictor::notices() const { return impl_->prototype->notices(); }
int Predictor::max_concurrent_runs() const { return impl_->max_workers; }
int Predictor::workers() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->created;
}

absl::StatusOr<HostTensors> Predictor::Run(const HostTensors& inputs) const {
  const Impl& m = *impl_;
  MPC_ASSIGN_OR_RETURN(auto feeds, m.Convert(inputs));
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> worker, m.Acquire());
  auto ran = worker->Run(feeds);
  m.Release(std::move(worker));
  if (!ran.ok()) return ran.status();
  HostTensors results;
  for (NamedTensor& out : *ran) {
    HostTensor h;
    h.dtype = PublicDType(out.value.dtype());
    Tensor value = std::move(out.value);
    if (ToDType(h.dtype) != value.dtype()) value = value.CastTo(ToDType(h.dtype));
    h.shape.assign(value.shape().begin(), value.shape().end());
    const uint8_t* begin = static_cast<const uint8_t*>(value.raw());
    if (value.bytes() > 0) h.data.assign(begin, begin + value.bytes());
    results[out.name] = std::move(h);
  }
  return results;
}

absl::Status Predictor::Warm(const HostTensors& example, int workers) const {
  const Impl& m = *impl_;
  MPC_ASSIGN_OR_RETURN(auto feeds, m.Convert(example));
  std::vector<std::unique_ptr<InferenceSession>> taken;
  absl::Status status;
  const int n = std::min(workers, m.max_workers);
  for (int i = 0; i < n && status.ok(); ++i) {
    auto worker = m.Acquire();
    if (!worker.ok()) {
      status = worker.status();
      break;
    }
    status = (*worker)->Run(feeds).status();
    taken.push_back(*std::move(worker));
  }
  for (auto& worker : taken) m.Release(std::move(worker));
  return status;
}

}  // namespace mpc

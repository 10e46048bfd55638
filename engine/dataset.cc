// LoadDataSource: turns a spec's DataSource into a Dataset. It dispatches on the
// source kind, resolves relative paths against the spec's directory, validates the
// fields the loaders cannot (synthetic sizes, limit, scale/shift), and prefixes every
// error with the spec field path so a user knows which line of the spec to fix.
#include "engine/dataset.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace mpc {
namespace {

// Synthetic data lives in host memory; refuse sizes that are surely a typo rather
// than failing inside an allocation.
constexpr int64_t kMaxSyntheticElements = int64_t{1} << 32;

absl::Status WithPrefix(const absl::Status& status, const std::string& prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

std::string Resolve(const std::string& path, const std::string& base_dir) {
  const std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / p).string();
}

// The file loaders start every message about one file with that file's path; this maps
// such a message to the spec field that named the file. Errors about both files (count
// mismatches) belong to the parent message.
std::string FieldForError(const absl::Status& status, const std::string& first_path, const std::string& first_field,
                          const std::string& second_path, const std::string& second_field, const std::string& parent) {
  if (absl::StartsWith(status.message(), first_path + ":")) return first_field;
  if (absl::StartsWith(status.message(), second_path + ":")) return second_field;
  return parent;
}

// Resolves a pair of file fields (images/labels or features/labels) and checks both are set.
absl::Status ResolvePair(const std::string& first, const std::string& first_name, const std::string& second,
                         const std::string& second_name, const std::string& base_dir, const std::string& parent,
                         std::string* first_path, std::string* second_path) {
  if (first.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(parent, ".", first_name, ": not set; give the path of the ", first_name, " file"));
  }
  if (second.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(parent, ".", second_name, ": not set; give the path of the ", second_name, " file"));
  }
  *first_path = Resolve(first, base_dir);
  *second_path = Resolve(second, base_dir);
  if (*first_path == *second_path) {
    return absl::InvalidArgumentError(absl::StrCat(parent, ": ", first_name, " and ", second_name,
                                                   " name the same file ", *first_path,
                                                   "; they must be two different files"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadIdxSource(const IdxData& idx, const std::string& base_dir, const std::string& field) {
  std::string images, labels;
  MPC_RETURN_IF_ERROR(ResolvePair(idx.images(), "images", idx.labels(), "labels", base_dir, field, &images, &labels));
  absl::StatusOr<Dataset> data = LoadIdx(images, labels);
  if (!data.ok()) {
    return WithPrefix(data.status(),
                      FieldForError(data.status(), images, field + ".images", labels, field + ".labels", field));
  }
  return data;
}

absl::StatusOr<Dataset> LoadNpySource(const NpyData& npy, const std::string& base_dir, const std::string& field) {
  std::string features, labels;
  MPC_RETURN_IF_ERROR(
      ResolvePair(npy.features(), "features", npy.labels(), "labels", base_dir, field, &features, &labels));
  absl::StatusOr<Dataset> data = LoadNpy(features, labels);
  if (!data.ok()) {
    return WithPrefix(data.status(),
                      FieldForError(data.status(), features, field + ".features", labels, field + ".labels", field));
  }
  // The model's other inputs: float arrays as f32, integer ones (ids) as i64, row for row.
  for (int i = 0; i < npy.inputs_size(); ++i) {
    const NpyInput& in = npy.inputs(i);
    const std::string path = absl::StrCat(field, ".inputs[", i, "]");
    if (in.input().empty()) return absl::InvalidArgumentError(absl::StrCat(path, ".input: name the model input"));
    if (in.file().empty()) return absl::InvalidArgumentError(absl::StrCat(path, ".file: give the .npy file"));
    for (const NamedArray& earlier : data->more_inputs) {
      if (earlier.input == in.input()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ".input: '", in.input(), "' is fed twice"));
      }
    }
    const std::string file = Resolve(in.file(), base_dir);
    absl::StatusOr<Tensor> values = ReadNpy(file);
    if (!values.ok()) return WithPrefix(values.status(), path + ".file");
    if (values->shape().empty() || values->shape()[0] != data->size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".file: ", file, " has shape ",
                                                     ShapeToString(values->shape()), " but the features have ",
                                                     data->size(), " rows; every input needs one row per example"));
    }
    const DType dtype = IsFloating(values->dtype()) ? DType::kF32 : DType::kI64;
    data->more_inputs.push_back({in.input(), values->dtype() == dtype ? *std::move(values) : values->CastTo(dtype)});
  }
  return data;
}

absl::StatusOr<Dataset> MakeSyntheticSource(const SyntheticData& spec, const std::string& field) {
  if (spec.num_examples() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".num_examples: must be positive, got ", spec.num_examples()));
  }
  if (spec.num_classes() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".num_classes: must be positive, got ", spec.num_classes()));
  }
  int64_t per_example = 1;
  for (int i = 0; i < spec.feature_shape_size(); ++i) {
    const int64_t d = spec.feature_shape(i);
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".feature_shape[", i, "]: dimensions must be positive, got ", d));
    }
    if (per_example > kMaxSyntheticElements / d)
      per_example = kMaxSyntheticElements + 1;
    else
      per_example *= d;
  }
  if (spec.feature_shape_size() == 0) per_example = 16;
  if (per_example > kMaxSyntheticElements / spec.num_examples() ||
      per_example > kMaxSyntheticElements / spec.num_classes()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", spec.num_examples(), " examples of ", per_example,
                                                   " features is too large for synthetic data (limit ",
                                                   kMaxSyntheticElements,
                                                   " values); reduce num_examples or feature_shape"));
  }
  return MakeSynthetic(spec);
}

// Keeps the first `n` examples.
Tensor FirstRows(const Tensor& t, int64_t n) {
  Shape shape = t.shape();
  const size_t row_bytes = shape[0] == 0 ? 0 : t.bytes() / static_cast<size_t>(shape[0]);
  shape[0] = n;
  Tensor out(t.dtype(), shape);
  std::memcpy(out.raw(), t.raw(), row_bytes * static_cast<size_t>(n));
  return out;
}

// The first non-finite value of a float tensor as "example E, feature [i, j]", with the
// count of non-finite values; OK when every value is finite (integer tensors always are).
absl::Status CheckFinite(const Tensor& t, const std::string& what, const std::string& fix) {
  if (!IsFloating(t.dtype()) || t.shape().empty()) return absl::OkStatus();
  int64_t first = -1;
  const int64_t count = t.NonFiniteCount(&first);
  if (first < 0) return absl::OkStatus();
  const Shape row(t.shape().begin() + 1, t.shape().end());
  const int64_t per_example = NumElements(row);
  const int64_t example = per_example ? first / per_example : first;
  int64_t rest = per_example ? first % per_example : 0;
  std::vector<int64_t> feature(row.size());
  for (int d = static_cast<int>(row.size()) - 1; d >= 0; --d) {
    feature[d] = rest % row[d];
    rest /= row[d];
  }
  const double v = t.GetAsDouble(first);
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": example ", example, row.empty() ? "" : absl::StrCat(", feature [", absl::StrJoin(feature, ", "), "]"),
      " is ", std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf"), " (", count, " non-finite value",
      count == 1 ? "" : "s", " in all); ", fix));
}

}  // namespace

absl::StatusOr<Dataset> LoadDataSource(const DataSource& source, const std::string& base_dir,
                                       const std::string& field_path) {
  // Check the cheap scalar fields before reading possibly large files.
  if (source.limit() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_path, ".limit: must be >= 0 (0 = use all examples), got ", source.limit()));
  }
  if (!std::isfinite(source.scale())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_path, ".scale: must be a finite number, got ", source.scale()));
  }
  if (!std::isfinite(source.shift())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_path, ".shift: must be a finite number, got ", source.shift()));
  }

  Dataset data;
  switch (source.source_case()) {
    case DataSource::kIdx: {
      MPC_ASSIGN_OR_RETURN(data, LoadIdxSource(source.idx(), base_dir, field_path + ".idx"));
      break;
    }
    case DataSource::kNpy: {
      MPC_ASSIGN_OR_RETURN(data, LoadNpySource(source.npy(), base_dir, field_path + ".npy"));
      break;
    }
    case DataSource::kSynthetic: {
      MPC_ASSIGN_OR_RETURN(data, MakeSyntheticSource(source.synthetic(), field_path + ".synthetic"));
      break;
    }
    case DataSource::SOURCE_NOT_SET:
      return absl::InvalidArgumentError(
          absl::StrCat(field_path, ": no data source set; set one of idx, npy, synthetic"));
  }
  if (data.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field_path, ": the data source has no examples"));
  }

  // A limit beyond the data size means "all of it", so one spec works on subsets too.
  if (source.limit() > 0 && source.limit() < data.size()) {
    data.features = FirstRows(data.features, source.limit());
    data.labels = FirstRows(data.labels, source.limit());
    for (NamedArray& more : data.more_inputs) more.values = FirstRows(more.values, source.limit());
  }
  // Non-finite data would train the weights into NaN: refuse it, naming where it is.
  std::string features_file = field_path, labels_file = field_path;
  if (source.has_npy()) {
    features_file = absl::StrCat(field_path, ".npy.features (", Resolve(source.npy().features(), base_dir), ")");
    labels_file = absl::StrCat(field_path, ".npy.labels (", Resolve(source.npy().labels(), base_dir), ")");
  }
  const std::string fix = "every value must be finite: fix or drop that example";
  MPC_RETURN_IF_ERROR(CheckFinite(data.features, features_file, fix));
  MPC_RETURN_IF_ERROR(CheckFinite(data.labels, labels_file, fix));
  for (int i = 0; i < static_cast<int>(data.more_inputs.size()); ++i) {
    MPC_RETURN_IF_ERROR(CheckFinite(data.more_inputs[i].values,
                                    absl::StrCat(field_path, ".npy.inputs[", i, "] (", data.more_inputs[i].input, ")"),
                                    fix));
  }
  // Features are f32, or i64 token ids; scaling only makes sense for values, so scaled
  // integer features become f32 first.
  const float scale = source.scale(), shift = source.shift();
  if (scale != 1.0f || shift != 0.0f) {
    if (data.features.dtype() != DType::kF32) data.features = data.features.CastTo(DType::kF32);
    float* x = data.features.data<float>();
    for (int64_t i = 0; i < data.features.num_elements(); ++i) x[i] = x[i] * scale + shift;
    MPC_RETURN_IF_ERROR(CheckFinite(data.features, features_file,
                                    absl::StrCat("it overflows f32 after ", field_path, ".scale / .shift (", scale,
                                                 ", ", shift, "): make them smaller")));
  }
  return data;
}

}  // namespace mpc

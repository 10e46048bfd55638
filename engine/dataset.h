// Training and evaluation data: loaders for IDX (MNIST-style, gzip or plain), NumPy
// .npy files and synthetic data, all producing a Dataset held in host memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "proto/train_spec.pb.h"

namespace mpc {

// One more model input's data: [N, ...] rows, f32 or i64.
struct NamedArray {
  std::string input;  // the model input it feeds
  Tensor values;
};

struct Dataset {
  Tensor features;                      // [N, ...] f32 (or i64 ids): the spec's features_input
  Tensor labels;                        // [N] i64 class indices, or [N, ...] f32 regression targets
  std::vector<NamedArray> more_inputs;  // the model's other inputs (npy.inputs), row for row
  int64_t size() const { return features.shape().empty() ? 0 : features.shape()[0]; }
};

// IDX files (http://yann.lecun.com/exdb/mnist/ format), .gz decompressed with zlib.
// Images become f32 [N, rows, cols] with raw byte values 0..255; labels i64 [N].
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path);
// LoadIdx's parsers on a file's decompressed contents in memory; errors name `source_name`.
// LoadIdx reads (and gunzips) each file and calls these; the fuzz targets
// (tools/fuzz/idx_images_fuzzer.cc, idx_labels_fuzzer.cc) call them directly.
absl::StatusOr<Tensor> ParseIdxImages(const std::string& bytes, const std::string& source_name);
absl::StatusOr<Tensor> ParseIdxLabels(const std::string& bytes, const std::string& source_name);

// .npy (format versions 1.0/2.0/3.0, C order, little-endian): f32, f64, f16, i64, i32,
// u8, bool. Errors name the file and what is wrong with it.
absl::StatusOr<Tensor> ReadNpy(const std::string& path);
// The same from a .npy file's bytes in memory; errors name `source_name`. ReadNpy reads the
// file and calls this; the fuzz target (tools/fuzz/npy_fuzzer.cc) calls it directly.
absl::StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& source_name);
absl::Status WriteNpy(const std::string& path, const Tensor& tensor);

// Features from one .npy (converted to f32); labels from another: integer arrays become
// i64 class indices, float arrays f32 targets. The first dimensions must agree.
absl::StatusOr<Dataset> LoadNpy(const std::string& features_path, const std::string& labels_path);

// Normal(0,1) features of the given shape; labels = argmax of a fixed random linear
// teacher applied to the features, so the task is learnable. Deterministic in the seed.
Dataset MakeSynthetic(const SyntheticData& spec);

// Loads whatever the DataSource names (relative paths against base_dir), then applies
// `limit`, and `scale`/`shift` to the features. Errors name the spec field and file.
absl::StatusOr<Dataset> LoadDataSource(const DataSource& source, const std::string& base_dir,
                                       const std::string& field_path);

// Walks a dataset in batches of a fixed size (the last partial batch of an epoch is
// dropped, since compiled programs have static shapes). With shuffling, each epoch's
// order is a permutation seeded by (seed, epoch), so a position (epoch, batch) can be
// restored exactly from a checkpoint.
class BatchIterator {
 public:
  BatchIterator(const Dataset* data, int64_t batch_size, bool shuffle, uint64_t seed);

  int64_t batches_per_epoch() const;
  int64_t epoch() const { return epoch_; }
  int64_t batch_in_epoch() const { return batch_; }
  // Moves to a position (e.g. restored from a checkpoint).
  void Seek(int64_t epoch, int64_t batch_in_epoch);

  // Copies the next batch into preallocated tensors shaped [B, ...features] and
  // [B, ...labels] (and, when given, one per Dataset::more_inputs, in that order), then
  // advances (rolling over to the next epoch).
  void Next(Tensor* features, Tensor* labels, std::vector<Tensor>* more_inputs = nullptr);
  // Next in two halves, so a caller can gather the coming batch early (while a device runs
  // the current step) and consume it later: Peek copies the batch Next would without
  // moving, Skip moves as Next would without copying. Next == Peek, then Skip.
  void Peek(Tensor* features, Tensor* labels, std::vector<Tensor>* more_inputs = nullptr) const;
  void Skip();

 private:
  void BuildOrder();

  const Dataset* data_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t batch_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace mpc

// BatchIterator: fixed-size batches over a host Dataset, with a per-epoch permutation
// that is a pure function of (seed, epoch). That is what lets a checkpoint store only
// (epoch, batch) and resume on exactly the examples an uninterrupted run would see.
//
// The permutation is our own Fisher–Yates over std::mt19937_64 draws (whose output the
// C++ standard fixes) rather than std::shuffle / std::uniform_int_distribution, whose
// results differ between standard libraries. Changing anything here changes which
// examples resumed runs see, so treat the algorithm as part of the checkpoint format.
//
// batch_size > N (or <= 0) gives batches_per_epoch() == 0. Callers must reject that
// configuration (the trainer reports it as a spec error); Next is then a no-op that
// leaves the tensors unchanged rather than crashing.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "engine/dataset.h"

namespace mpc {
namespace {

// splitmix64's finalizer: spreads (seed, epoch) so neighbouring epochs and seeds get
// unrelated generator states.
uint64_t Mix(uint64_t seed, uint64_t epoch) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + epoch;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform integer in [0, n) without modulo bias: reject the draws in the short top range.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // == 2^64 mod n
  while (true) {
    const uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

// Next's buffers are sized by the caller; a mismatch would overrun memory, so it is a
// programming error and fails loudly instead of returning a status nobody checks.
void CheckBatchTensor(const char* what, const Tensor& given, const Tensor& source, int64_t batch) {
  Shape want = source.shape();
  want[0] = batch;
  if (given.empty() || given.dtype() != source.dtype() || given.shape() != want) {
    std::fprintf(stderr,
                 "BatchIterator::Peek/Next: %s tensor is %s %s but the batch is %s %s; allocate it as "
                 "Tensor(dataset.%s.dtype(), {batch_size, ...row shape})\n",
                 what, std::string(DTypeName(given.dtype())).c_str(),
                 given.empty() ? "(unallocated)" : ShapeToString(given.shape()).c_str(),
                 std::string(DTypeName(source.dtype())).c_str(), ShapeToString(want).c_str(), what);
    std::abort();
  }
}

// Gathering is memory-bound: one thread moves a 128 MiB batch in ~10 ms, so large
// batches are copied by all threads. No CPU kernel runs meanwhile: the CPU backend's step
// has returned before the engine gathers, and a GPU's step runs on the device.
constexpr size_t kParallelGatherBytes = size_t{8} << 20;

void CopyRows(const Tensor& source, const int64_t* rows, int64_t count, Tensor* dest) {
  const size_t row_bytes = source.bytes() / static_cast<size_t>(source.shape()[0]);
  const char* src = static_cast<const char*>(source.raw());
  char* dst = static_cast<char*>(dest->raw());
#pragma omp parallel for schedule(static) if (row_bytes * static_cast<size_t>(count) >= kParallelGatherBytes)
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
  }
}

}  // namespace

BatchIterator::BatchIterator(const Dataset* data, int64_t batch_size, bool shuffle, uint64_t seed)
    : data_(data), batch_size_(batch_size), shuffle_(shuffle), seed_(seed) {
  BuildOrder();
}

int64_t BatchIterator::batches_per_epoch() const {
  if (data_ == nullptr || batch_size_ <= 0) return 0;
  return data_->size() / batch_size_;
}

void BatchIterator::Seek(int64_t epoch, int64_t batch_in_epoch) {
  // Positions past the end of an epoch roll over, as Next would have done.
  epoch = std::max<int64_t>(0, epoch);
  batch_in_epoch = std::max<int64_t>(0, batch_in_epoch);
  const int64_t per_epoch = batches_per_epoch();
  if (per_epoch > 0) {
    epoch += batch_in_epoch / per_epoch;
    batch_in_epoch %= per_epoch;
  }
  epoch_ = epoch;
  batch_ = batch_in_epoch;
  BuildOrder();
}

void BatchIterator::Next(Tensor* features, Tensor* labels, std::vector<Tensor>* more_inputs) {
  Peek(features, labels, more_inputs);
  Skip();
}

void BatchIterator::Peek(Tensor* features, Tensor* labels, std::vector<Tensor>* more_inputs) const {
  if (batches_per_epoch() == 0) return;  // see the file comment: the caller rejects this setup
  CheckBatchTensor("features", *features, data_->features, batch_size_);
  CheckBatchTensor("labels", *labels, data_->labels, batch_size_);
  const int64_t* rows = order_.data() + batch_ * batch_size_;
  CopyRows(data_->features, rows, batch_size_, features);
  CopyRows(data_->labels, rows, batch_size_, labels);
  if (more_inputs) {
    if (more_inputs->size() != data_->more_inputs.size()) {
      std::fprintf(stderr, "BatchIterator::Peek/Next: %zu tensors for the dataset's %zu more inputs\n", more_inputs->size(),
                   data_->more_inputs.size());
      std::abort();
    }
    for (size_t i = 0; i < more_inputs->size(); ++i) {
      const NamedArray& array = data_->more_inputs[i];
      CheckBatchTensor(array.input.c_str(), (*more_inputs)[i], array.values, batch_size_);
      CopyRows(array.values, rows, batch_size_, &(*more_inputs)[i]);
    }
  }
}

void BatchIterator::Skip() {
  const int64_t per_epoch = batches_per_epoch();
  if (per_epoch == 0) return;
  if (++batch_ == per_epoch) {
    ++epoch_;
    batch_ = 0;
    BuildOrder();
  }
}

void BatchIterator::BuildOrder() {
  const int64_t n = data_ == nullptr ? 0 : data_->size();
  order_.resize(static_cast<size_t>(n));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!shuffle_ || n < 2) return;
  std::mt19937_64 rng(Mix(seed_, static_cast<uint64_t>(epoch_)));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
  }
}

}  // namespace mpc

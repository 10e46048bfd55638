// The CUDA kernel registry against the CPU's, without a GPU (CudaKernelRegistry()
// needs no device, so these run and must pass on every machine that builds CUDA):
//   RegistersEveryCpuKernelButF64  every (op, dtype) the CPU backend registers, f64
//       aside (the CPU's f64 kernels are the reference; the GPU has no f64) and the
//       ops only a pass makes where the backend has them, is registered on "cuda" too,
//       but for the pairs ExemptOnCuda names (f32 fused attention: cuDNN's is 16-bit);
//       the failure lists every missing pair, by op.
//   RegistersNothingBeyondTheCpu   no f64 kernels on CUDA, and no (op, dtype) the CPU
//       lacks: the CPU backend is the numerics reference the conformance test
//       (cuda_conformance_test.cc) checks every CUDA kernel against.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace mpc {
namespace {

using Entry = std::pair<std::string, std::string>;  // (op, dtype name)

std::vector<Entry> CpuEntries() {
  static const std::vector<Entry>* entries = new std::vector<Entry>(CreateCpuBackend()->kernels().Entries("cpu"));
  return *entries;
}

// "Op (dtype dtype ...)" per op, ops in order.
std::string ByOp(const std::vector<Entry>& entries) {
  std::map<std::string, std::vector<std::string>> by_op;
  for (const auto& [op, dtype] : entries) by_op[op].push_back(dtype);
  std::vector<std::string> parts;
  for (const auto& [op, dtypes] : by_op) parts.push_back(absl::StrCat(op, " (", absl::StrJoin(dtypes, " "), ")"));
  return absl::StrJoin(parts, ", ");
}

// Ops only passes make, and only where Capabilities::HasKernel finds them: fuse-softmax
// writes MaskedSoftmax (autodiff its gradient) for backends that register both, and CUDA
// does not yet, so a CUDA program keeps attention's Mul, Where and Softmax. Every graph a
// user writes still compiles for both backends.
bool PassOnlyCpuOp(const std::string& op) { return op == "MaskedSoftmax" || op == "MaskedSoftmaxGrad"; }

// (op, dtype) pairs CUDA leaves out on purpose. FusedAttention(Grad) in f32: cuDNN's fused
// flash attention (backends/cuda/kernels_attention.cc) is bf16 / f16 only, and
// fuse-attention makes the op only where HasKernel finds the dtype, so f32 attention stays
// the unfused MatMul / softmax chain on CUDA (the CPU's f32 kernels are there to check the
// op's numerics).
bool ExemptOnCuda(const Entry& e) {
  return (e.first == "FusedAttention" || e.first == "FusedAttentionGrad") && e.second == "f32";
}

TEST(CudaKernelRegistry, RegistersEveryCpuKernelButF64) {
  const std::vector<Entry> cpu = CpuEntries();
  ASSERT_GE(cpu.size(), 50u) << "the CPU registry lists suspiciously few kernels: " << ByOp(cpu);
  const std::vector<Entry> cuda_list = CudaKernelRegistry().Entries("cuda");
  const std::set<Entry> cuda(cuda_list.begin(), cuda_list.end());
  std::vector<Entry> missing;
  int wanted = 0;
  for (const Entry& e : cpu) {
    if (e.second == "f64" || PassOnlyCpuOp(e.first) || ExemptOnCuda(e)) continue;
    ++wanted;
    if (!cuda.count(e)) missing.push_back(e);
  }
  EXPECT_TRUE(missing.empty()) << missing.size() << " of the " << wanted
                               << " (op, dtype) kernels the CPU registers (f64 aside) are not registered on cuda: "
                               << ByOp(missing);
}

TEST(CudaKernelRegistry, RegistersNothingBeyondTheCpu) {
  const std::vector<Entry> cpu_list = CpuEntries();
  const std::set<Entry> cpu(cpu_list.begin(), cpu_list.end());
  std::vector<Entry> f64, extra;
  for (const Entry& e : CudaKernelRegistry().Entries("cuda")) {
    if (e.second == "f64")
      f64.push_back(e);
    else if (!cpu.count(e))
      extra.push_back(e);
  }
  EXPECT_TRUE(f64.empty()) << "f64 kernels on cuda (the GPU has no f64; the CPU's are the reference): " << ByOp(f64);
  EXPECT_TRUE(extra.empty()) << "cuda kernels with no CPU kernel to check them against: " << ByOp(extra);
}

TEST(CudaKernelRegistry, EntriesAreTheBackendsOwn) {
  EXPECT_TRUE(CudaKernelRegistry().Entries("cpu").empty());
  for (const Entry& e : CudaKernelRegistry().Entries("cuda")) {
    auto dtype = DTypeFromName(e.second);
    ASSERT_TRUE(dtype.ok()) << dtype.status();
    EXPECT_TRUE(CudaKernelRegistry().Has(e.first, "cuda", *dtype)) << e.first << " " << e.second;
  }
}

}  // namespace
}  // namespace mpc

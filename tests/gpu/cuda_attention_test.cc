// The CUDA FusedAttention / FusedAttentionGrad kernels (backends/cuda/kernels_attention.cc,
// cuDNN's fused flash attention) against float64 references computed here on the host from
// the same bf16 / f16 inputs, kernel by kernel (no graph, no pass: the op's definition is
// all the reference needs):
//   CudaAttention.MatchesFloat64   B=2, H=3, Sq=Sk=128, D 64 and 128, causal or not, with
//       and without a [B,1,Sq,Sk] bias holding some -inf: Y and Stats forward, then the
//       backward from the forward's own Y and Stats: dQ, dK, dV. Error = max |got - ref| /
//       max |ref| per output: bf16 2e-2 (f16 1e-2), Stats 5e-3 (f32, from exact inputs).
//   CudaAttention.LaidOutBias      biases cuDNN cannot read where they are ([B,1,1,Sk] key
//       padding with -inf, [1,1,1,Sk], Sk = 100 not a multiple of 8, Sq != Sk) in f16:
//       the kernel's copy into scratch.
//   CudaAttention.CapturedStepReplays  forward and backward recorded as one CUDA graph
//       (what the executor does from the second step on) give the eager results again.
//   CudaAttention.RejectsWhatCudnnCannotRun  (no device needed) dtype f32, head dims not a
//       multiple of 8 or above 256, rank-3 operands, a bias that does not broadcast: errors
//       that name the shape, before any device call.
// There is no GPU in CI or on the development machines, so the device tests skip there;
// they run on the H100 / H200 (ctest -L gpu, scripts/gpu/verify.sh).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::mpc::testing::DeviceBuffers;
using ::mpc::testing::RandomTensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Config {
  std::string name;
  DType dtype = DType::kBF16;
  int64_t b = 2, h = 3, sq = 128, sk = 128, d = 64;
  bool causal = false;
  Shape bias;  // empty: none
};

// Host tensors as doubles, row-major.
struct HostProblem {
  std::vector<double> q, k, v, bias;  // bias broadcast to [B,H,Sq,Sk] already
};

std::vector<double> AsDoubles(const Tensor& t) {
  std::vector<double> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = t.GetAsDouble(i);
  return out;
}

// Element [b,h,i,j] of `bias` (shape rank 4, dims 1 or full) broadcast to the scores.
std::vector<double> BroadcastBias(const Tensor& bias, const Config& c) {
  const Shape& s = bias.shape();
  std::vector<double> out(c.b * c.h * c.sq * c.sk);
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t i = 0; i < c.sq; ++i)
        for (int64_t j = 0; j < c.sk; ++j) {
          const int64_t src = (((s[0] == 1 ? 0 : b) * s[1] + (s[1] == 1 ? 0 : h)) * s[2] + (s[2] == 1 ? 0 : i)) * s[3] +
                              (s[3] == 1 ? 0 : j);
          out[((b * c.h + h) * c.sq + i) * c.sk + j] = bias.GetAsDouble(src);
        }
  return out;
}

// The scaled, biased, masked scores of one (b, h): [Sq, Sk], -inf where masked.
std::vector<double> Scores(const HostProblem& p, const Config& c, double scale, int64_t bh) {
  std::vector<double> s(c.sq * c.sk);
  const double* q = &p.q[bh * c.sq * c.d];
  const double* k = &p.k[bh * c.sk * c.d];
  for (int64_t i = 0; i < c.sq; ++i)
    for (int64_t j = 0; j < c.sk; ++j) {
      double dot = 0;
      for (int64_t x = 0; x < c.d; ++x) dot += q[i * c.d + x] * k[j * c.d + x];
      double v = scale * dot + (p.bias.empty() ? 0.0 : p.bias[(bh * c.sq + i) * c.sk + j]);
      if (c.causal && j > i) v = -kInf;
      s[i * c.sk + j] = v;
    }
  return s;
}

struct Forward {
  std::vector<double> y, stats;
};

Forward ReferenceForward(const HostProblem& p, const Config& c, double scale) {
  Forward f;
  f.y.assign(c.b * c.h * c.sq * c.d, 0);
  f.stats.assign(c.b * c.h * c.sq, -kInf);
  for (int64_t bh = 0; bh < c.b * c.h; ++bh) {
    const std::vector<double> s = Scores(p, c, scale, bh);
    for (int64_t i = 0; i < c.sq; ++i) {
      double m = -kInf;
      for (int64_t j = 0; j < c.sk; ++j) m = std::max(m, s[i * c.sk + j]);
      if (m == -kInf) continue;
      double sum = 0;
      for (int64_t j = 0; j < c.sk; ++j) sum += std::exp(s[i * c.sk + j] - m);
      const double lse = m + std::log(sum);
      f.stats[bh * c.sq + i] = lse;
      for (int64_t j = 0; j < c.sk; ++j) {
        const double pij = std::exp(s[i * c.sk + j] - lse);
        for (int64_t x = 0; x < c.d; ++x) f.y[(bh * c.sq + i) * c.d + x] += pij * p.v[(bh * c.sk + j) * c.d + x];
      }
    }
  }
  return f;
}

struct Backward {
  std::vector<double> dq, dk, dv;
};

// dS = P * (dP - rowsum(dY * Y)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dY, with P
// from the exact scores and `y` the forward output the kernel is given.
Backward ReferenceBackward(const HostProblem& p, const Config& c, double scale, const std::vector<double>& dy,
                           const std::vector<double>& y, const std::vector<double>& stats) {
  Backward g;
  g.dq.assign(p.q.size(), 0);
  g.dk.assign(p.k.size(), 0);
  g.dv.assign(p.v.size(), 0);
  for (int64_t bh = 0; bh < c.b * c.h; ++bh) {
    const std::vector<double> s = Scores(p, c, scale, bh);
    for (int64_t i = 0; i < c.sq; ++i) {
      const double lse = stats[bh * c.sq + i];
      if (lse == -kInf) continue;
      const double* dyi = &dy[(bh * c.sq + i) * c.d];
      double delta = 0;
      for (int64_t x = 0; x < c.d; ++x) delta += dyi[x] * y[(bh * c.sq + i) * c.d + x];
      for (int64_t j = 0; j < c.sk; ++j) {
        const double pij = std::exp(s[i * c.sk + j] - lse);
        if (pij == 0) continue;
        const double* vj = &p.v[(bh * c.sk + j) * c.d];
        double dp = 0;
        for (int64_t x = 0; x < c.d; ++x) dp += dyi[x] * vj[x];
        const double ds = pij * (dp - delta);
        for (int64_t x = 0; x < c.d; ++x) {
          g.dv[(bh * c.sk + j) * c.d + x] += pij * dyi[x];
          g.dq[(bh * c.sq + i) * c.d + x] += scale * ds * p.k[(bh * c.sk + j) * c.d + x];
          g.dk[(bh * c.sk + j) * c.d + x] += scale * ds * p.q[(bh * c.sq + i) * c.d + x];
        }
      }
    }
  }
  return g;
}

// max |got - ref| / max |ref| over the finite reference entries; a -inf reference must be
// matched exactly, and a non-finite result elsewhere fails.
double MaxRelError(const Tensor& got, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got.GetAsDouble(static_cast<int64_t>(i));
    if (std::isinf(ref[i])) {
      if (g != ref[i]) return kInf;
      continue;
    }
    if (!std::isfinite(g)) return kInf;
    diff = std::max(diff, std::abs(g - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return diff / std::max(scale, 1e-30);
}

// Owns the values a hand-made node points to.
struct NodeOwner {
  std::vector<std::unique_ptr<Value>> values;
  Node node;
  Value* Add(const std::string& name, DType dtype, Shape shape) {
    values.push_back(std::make_unique<Value>());
    Value* v = values.back().get();
    v->id = static_cast<int>(values.size());
    v->name = name;
    v->dtype = dtype;
    v->shape = std::move(shape);
    return v;
  }
};

// A FusedAttention (backward = false) or FusedAttentionGrad node of `c`.
std::unique_ptr<NodeOwner> AttentionNode(const Config& c, bool backward, double scale) {
  auto o = std::make_unique<NodeOwner>();
  const Shape qs = {c.b, c.h, c.sq, c.d}, ks = {c.b, c.h, c.sk, c.d}, rows = {c.b, c.h, c.sq};
  Node& n = o->node;
  n.name = backward ? "attention_grad" : "attention";
  n.op = backward ? "FusedAttentionGrad" : "FusedAttention";
  if (backward) n.inputs.push_back(o->Add("dy", c.dtype, qs));
  n.inputs.push_back(o->Add("q", c.dtype, qs));
  n.inputs.push_back(o->Add("k", c.dtype, ks));
  n.inputs.push_back(o->Add("v", c.dtype, ks));
  if (backward) {
    n.inputs.push_back(o->Add("y", c.dtype, qs));
    n.inputs.push_back(o->Add("stats", DType::kF32, rows));
  }
  if (!c.bias.empty()) n.inputs.push_back(o->Add("bias", c.dtype, c.bias));
  if (backward) {
    n.outputs = {o->Add("dq", c.dtype, qs), o->Add("dk", c.dtype, ks), o->Add("dv", c.dtype, ks)};
  } else {
    n.outputs = {o->Add("y_out", c.dtype, qs), o->Add("stats_out", DType::kF32, rows)};
  }
  n.attrs.Set("scale", static_cast<float>(scale));
  n.attrs.Set("causal", int64_t{c.causal ? 1 : 0});
  return o;
}

TensorView View(void* data, const Value* v) {
  TensorView t;
  t.data = data;
  t.dtype = v->dtype;
  t.shape = v->shape;
  return t;
}

// A bias of `shape`: uniform in [-1, 1], -inf where (i + 3j + b) % 7 == 0 for j > 0 (so
// every row keeps column 0, which causal masking keeps too).
Tensor MaskedBias(const Config& c, uint64_t seed) {
  Tensor t = RandomTensor(DType::kF32, c.bias, seed);
  const Shape& s = c.bias;
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t i = 0; i < s[2]; ++i)
        for (int64_t j = 1; j < s[3]; ++j)
          if ((i + 3 * j + b) % 7 == 0) t.data<float>()[((b * s[1] + h) * s[2] + i) * s[3] + j] = -INFINITY;
  return t.CastTo(c.dtype);
}

// Runs forward and backward of `c` on the GPU and checks both against float64.
void CheckAgainstFloat64(Backend& gpu, const Config& c) {
  SCOPED_TRACE(c.name);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const double tol = c.dtype == DType::kBF16 ? 2e-2 : 1e-2;
  // Q and K in [-2, 2]: scores of a few units, so the softmax is peaked, not flat.
  const Tensor q = RandomTensor(c.dtype, {c.b, c.h, c.sq, c.d}, 11, -2, 2);
  const Tensor k = RandomTensor(c.dtype, {c.b, c.h, c.sk, c.d}, 12, -2, 2);
  const Tensor v = RandomTensor(c.dtype, {c.b, c.h, c.sk, c.d}, 13);
  const Tensor dy = RandomTensor(c.dtype, {c.b, c.h, c.sq, c.d}, 14);
  Tensor bias;
  if (!c.bias.empty()) bias = MaskedBias(c, 15);
  HostProblem host{AsDoubles(q), AsDoubles(k), AsDoubles(v), {}};
  if (!c.bias.empty()) host.bias = BroadcastBias(bias, c);

  DeviceBuffers buf(gpu);
  void* dq_in = buf.Upload(q);
  void* dk_in = buf.Upload(k);
  void* dv_in = buf.Upload(v);
  void* ddy = buf.Upload(dy);
  void* dbias = c.bias.empty() ? nullptr : buf.Upload(bias);
  void* dy_out = buf.Zeros(c.dtype, q.num_elements());
  void* dstats = buf.Zeros(DType::kF32, c.b * c.h * c.sq);
  void* dgq = buf.Zeros(c.dtype, q.num_elements());
  void* dgk = buf.Zeros(c.dtype, k.num_elements());
  void* dgv = buf.Zeros(c.dtype, v.num_elements());
  ASSERT_FALSE(::testing::Test::HasFailure());

  auto fwd = AttentionNode(c, false, scale);
  auto fwd_kernel = gpu.CreateKernel(fwd->node);
  ASSERT_TRUE(fwd_kernel.ok()) << fwd_kernel.status();
  KernelContext fctx;
  const Node& fn = fwd->node;
  fctx.inputs = {View(dq_in, fn.inputs[0]), View(dk_in, fn.inputs[1]), View(dv_in, fn.inputs[2])};
  if (dbias) fctx.inputs.push_back(View(dbias, fn.inputs[3]));
  fctx.outputs = {View(dy_out, fn.outputs[0]), View(dstats, fn.outputs[1])};
  const absl::Status ran_fwd = (*fwd_kernel)->Run(fctx);
  ASSERT_TRUE(ran_fwd.ok()) << ran_fwd;
  const Tensor y = buf.Download(dy_out, c.dtype, fn.outputs[0]->shape);
  const Tensor stats = buf.Download(dstats, DType::kF32, fn.outputs[1]->shape);
  const Forward ref = ReferenceForward(host, c, scale);
  EXPECT_LE(MaxRelError(y, ref.y), tol) << "Y";
  EXPECT_LE(MaxRelError(stats, ref.stats), 5e-3) << "Stats";

  auto bwd = AttentionNode(c, true, scale);
  auto bwd_kernel = gpu.CreateKernel(bwd->node);
  ASSERT_TRUE(bwd_kernel.ok()) << bwd_kernel.status();
  const Node& bn = bwd->node;
  KernelContext bctx;
  bctx.inputs = {View(ddy, bn.inputs[0]),   View(dq_in, bn.inputs[1]),  View(dk_in, bn.inputs[2]),
                 View(dv_in, bn.inputs[3]), View(dy_out, bn.inputs[4]), View(dstats, bn.inputs[5])};
  if (dbias) bctx.inputs.push_back(View(dbias, bn.inputs[6]));
  bctx.outputs = {View(dgq, bn.outputs[0]), View(dgk, bn.outputs[1]), View(dgv, bn.outputs[2])};
  const absl::Status ran_bwd = (*bwd_kernel)->Run(bctx);
  ASSERT_TRUE(ran_bwd.ok()) << ran_bwd;
  // The reference backward from the kernel's own forward (Y, Stats), as training runs it.
  const Backward g = ReferenceBackward(host, c, scale, AsDoubles(dy), AsDoubles(y), AsDoubles(stats));
  EXPECT_LE(MaxRelError(buf.Download(dgq, c.dtype, bn.outputs[0]->shape), g.dq), tol) << "dQ";
  EXPECT_LE(MaxRelError(buf.Download(dgk, c.dtype, bn.outputs[1]->shape), g.dk), tol) << "dK";
  EXPECT_LE(MaxRelError(buf.Download(dgv, c.dtype, bn.outputs[2]->shape), g.dv), tol) << "dV";
}

TEST(CudaAttention, MatchesFloat64) {
  MPC_GPU_OR_SKIP(gpu);
  for (int64_t d : {64, 128}) {
    for (bool causal : {false, true}) {
      for (bool bias : {false, true}) {
        Config c;
        c.d = d;
        c.causal = causal;
        if (bias) c.bias = {c.b, 1, c.sq, c.sk};
        c.name = absl::StrCat("bf16 D=", d, causal ? " causal" : "", bias ? " bias [B,1,Sq,Sk]" : "");
        CheckAgainstFloat64(gpu, c);
      }
    }
  }
}

TEST(CudaAttention, LaidOutBias) {
  MPC_GPU_OR_SKIP(gpu);
  std::vector<Config> configs(3);
  configs[0].name = "f16 key padding [B,1,1,Sk]";
  configs[0].bias = {2, 1, 1, 128};
  configs[1].name = "f16 one row [1,1,1,Sk], causal";
  configs[1].bias = {1, 1, 1, 128};
  configs[1].causal = true;
  configs[2].name = "f16 Sq=64, Sk=100, bias [1,H,Sq,Sk]";
  configs[2].sq = 64;
  configs[2].sk = 100;
  configs[2].bias = {1, 3, 64, 100};
  for (Config& c : configs) {
    c.dtype = DType::kF16;
    CheckAgainstFloat64(gpu, c);
  }
}

TEST(CudaAttention, CapturedStepReplays) {
  MPC_GPU_OR_SKIP(gpu);
  Config c;
  c.causal = true;
  c.bias = {2, 1, 1, 128};  // laid out: the copy is captured too
  const double scale = 0.125;
  const Tensor q = RandomTensor(c.dtype, {c.b, c.h, c.sq, c.d}, 21, -2, 2);
  const Tensor k = RandomTensor(c.dtype, {c.b, c.h, c.sk, c.d}, 22, -2, 2);
  const Tensor v = RandomTensor(c.dtype, {c.b, c.h, c.sk, c.d}, 23);
  const Tensor dy = RandomTensor(c.dtype, {c.b, c.h, c.sq, c.d}, 24);
  const Tensor bias = MaskedBias(c, 25);
  DeviceBuffers buf(gpu);
  void* in[5] = {buf.Upload(q), buf.Upload(k), buf.Upload(v), buf.Upload(dy), buf.Upload(bias)};
  void* y = buf.Zeros(c.dtype, q.num_elements());
  void* stats = buf.Zeros(DType::kF32, c.b * c.h * c.sq);
  void* grads[3] = {buf.Zeros(c.dtype, q.num_elements()), buf.Zeros(c.dtype, k.num_elements()),
                    buf.Zeros(c.dtype, v.num_elements())};
  ASSERT_FALSE(::testing::Test::HasFailure());
  auto fwd = AttentionNode(c, false, scale);
  auto bwd = AttentionNode(c, true, scale);
  auto fk = gpu.CreateKernel(fwd->node);
  auto bk = gpu.CreateKernel(bwd->node);
  ASSERT_TRUE(fk.ok()) << fk.status();
  ASSERT_TRUE(bk.ok()) << bk.status();
  const Node& fn = fwd->node;
  const Node& bn = bwd->node;
  KernelContext fctx, bctx;
  fctx.inputs = {View(in[0], fn.inputs[0]), View(in[1], fn.inputs[1]), View(in[2], fn.inputs[2]),
                 View(in[4], fn.inputs[3])};
  fctx.outputs = {View(y, fn.outputs[0]), View(stats, fn.outputs[1])};
  bctx.inputs = {View(in[3], bn.inputs[0]), View(in[0], bn.inputs[1]), View(in[1], bn.inputs[2]),
                 View(in[2], bn.inputs[3]), View(y, bn.inputs[4]),     View(stats, bn.inputs[5]),
                 View(in[4], bn.inputs[6])};
  bctx.outputs = {View(grads[0], bn.outputs[0]), View(grads[1], bn.outputs[1]), View(grads[2], bn.outputs[2])};
  auto step = [&]() -> absl::Status {
    if (absl::Status s = (*fk)->Run(fctx); !s.ok()) return s;
    return (*bk)->Run(bctx);
  };
  const absl::Status eager = step();
  ASSERT_TRUE(eager.ok()) << eager;
  const Tensor eager_y = buf.Download(y, c.dtype, fn.outputs[0]->shape);
  const Tensor eager_dq = buf.Download(grads[0], c.dtype, bn.outputs[0]->shape);
  // Clear the outputs, record the step, check that recording ran nothing, replay it.
  const std::vector<unsigned char> zeros(q.bytes(), 0);
  ASSERT_TRUE(gpu.CopyToDevice(y, zeros.data(), zeros.size()).ok());
  ASSERT_TRUE(gpu.CopyToDevice(grads[0], zeros.data(), zeros.size()).ok());
  ASSERT_TRUE(gpu.Synchronize().ok());
  auto captured = gpu.Capture(step);
  ASSERT_TRUE(captured.ok()) << captured.status();
  ASSERT_NE(*captured, nullptr);
  EXPECT_TRUE(buf.Download(y, q.bytes()) == zeros) << "capturing ran the step";
  ASSERT_TRUE((*captured)->Replay().ok());
  ASSERT_TRUE(gpu.Synchronize().ok());
  const Tensor replay_y = buf.Download(y, c.dtype, fn.outputs[0]->shape);
  const Tensor replay_dq = buf.Download(grads[0], c.dtype, bn.outputs[0]->shape);
  EXPECT_EQ(std::memcmp(replay_y.raw(), eager_y.raw(), eager_y.bytes()), 0) << "Y differs after replay";
  // dQ may differ in the last bits where cuDNN has no deterministic backward for the case.
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < eager_dq.num_elements(); ++i) {
    worst = std::max(worst, std::abs(replay_dq.GetAsDouble(i) - eager_dq.GetAsDouble(i)));
    largest = std::max(largest, std::abs(eager_dq.GetAsDouble(i)));
  }
  EXPECT_GT(largest, 0);
  EXPECT_LE(worst, 1e-2 * largest) << "dQ after replay";
}

// Errors that need no device: the kernel checks the node before touching the backend, so
// the CUDA registry's factories can be called with the CPU backend.
TEST(CudaAttention, RejectsWhatCudnnCannotRun) {
  struct Bad {
    std::string name;
    Config c;
    std::string expect;
  };
  std::vector<Bad> bad(5);
  bad[0] = {"f32", Config{}, "bf16 and f16 only"};
  bad[0].c.dtype = DType::kF32;
  bad[1] = {"D=12", Config{}, "multiples of 8 up to 256"};
  bad[1].c.d = 12;
  bad[2] = {"D=264", Config{}, "multiples of 8 up to 256"};
  bad[2].c.d = 264;
  bad[3] = {"bias [2,1,5,128]", Config{}, "does not broadcast"};
  bad[3].c.bias = {2, 1, 5, 128};
  bad[4] = {"bias [3,128]", Config{}, "does not broadcast"};
  bad[4].c.bias = {3, 128};
  for (const Bad& b : bad) {
    for (bool backward : {false, true}) {
      SCOPED_TRACE(absl::StrCat(b.name, backward ? " backward" : " forward"));
      auto owner = AttentionNode(b.c, backward, 0.125);
      // f32 has no CUDA kernel at all: the registry says so.
      const DType select = b.c.dtype;
      auto factory = CudaKernelRegistry().Find(owner->node.op, "cuda", select);
      if (select == DType::kF32) {
        EXPECT_FALSE(factory.ok());
        continue;
      }
      ASSERT_TRUE(factory.ok()) << factory.status();
      auto kernel = (**factory)(owner->node, ::mpc::testing::SharedCpu());
      ASSERT_FALSE(kernel.ok());
      EXPECT_NE(kernel.status().message().find(b.expect), std::string::npos) << kernel.status();
    }
  }
  // Rank-3 operands.
  Config c;
  auto owner = AttentionNode(c, false, 0.125);
  for (int i = 0; i < 3; ++i) owner->node.inputs[i]->shape = {6, 128, 64};
  auto factory = CudaKernelRegistry().Find("FusedAttention", "cuda", DType::kBF16);
  ASSERT_TRUE(factory.ok()) << factory.status();
  auto kernel = (**factory)(owner->node, ::mpc::testing::SharedCpu());
  ASSERT_FALSE(kernel.ok());
  EXPECT_NE(kernel.status().message().find("rank-4"), std::string::npos) << kernel.status();
}

TEST(CudaAttention, RegisteredInBf16AndF16Only) {
  for (const char* op : {"FusedAttention", "FusedAttentionGrad"}) {
    EXPECT_TRUE(CudaKernelRegistry().Has(op, "cuda", DType::kBF16)) << op;
    EXPECT_TRUE(CudaKernelRegistry().Has(op, "cuda", DType::kF16)) << op;
    EXPECT_FALSE(CudaKernelRegistry().Has(op, "cuda", DType::kF32)) << op;
  }
}

}  // namespace
}  // namespace mpc

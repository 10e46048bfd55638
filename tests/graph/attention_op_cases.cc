// Op cases for FusedAttention and FusedAttentionGrad (graph/ops_attention.cc): float64
// references written from the definition (softmax of the scaled, biased, masked scores
// times V; the gradient from the given Y and Stats, as the op defines it), shapes that
// cover causal masks, Sq != Sk and D != Dv, a rank-3 batch, broadcast biases with -inf
// entries and a row with nothing kept, and a head-dim-64 sequence of 128 that cuDNN's
// fused attention takes (the CUDA conformance test runs every case against the CPU).
#include <cmath>
#include <limits>

#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

double F(double v) { return static_cast<float>(v); }  // an f32 attribute as the kernel sees it

struct Dims {
  int64_t batches = 1, sq, sk, d, dv;
};

Dims DimsOf(const Tensor& q, const Tensor& k, const Tensor& v) {
  const Shape& s = q.shape();
  const size_t r = s.size();
  Dims d{1, s[r - 2], k.shape()[r - 2], s[r - 1], v.shape()[r - 1]};
  for (size_t i = 0; i + 2 < r; ++i) d.batches *= s[i];
  return d;
}

// Row i of batch b's scores (-inf where masked).
std::vector<double> Scores(const Tensor& q, const Tensor& k, const Tensor* bias, double scale, bool causal, int64_t b,
                           int64_t i) {
  const Dims n = DimsOf(q, k, k);
  Shape scores = q.shape();
  scores.back() = n.sk;
  std::vector<double> s(n.sk);
  for (int64_t j = 0; j < n.sk; ++j) {
    if (causal && j > i) {
      s[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    double dot = 0;
    for (int64_t c = 0; c < n.d; ++c) dot += P(q)[(b * n.sq + i) * n.d + c] * P(k)[(b * n.sk + j) * n.d + c];
    s[j] = scale * dot;
    if (bias) s[j] += P(*bias)[BroadcastOffset(Unravel((b * n.sq + i) * n.sk + j, scores), bias->shape())];
  }
  return s;
}

// {Y, Stats}.
std::vector<Tensor> RefAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* bias, double scale,
                                 bool causal) {
  const Dims n = DimsOf(q, k, v);
  Shape ys = q.shape();
  ys.back() = n.dv;
  Tensor y = F64(ys), stats = F64(Shape(q.shape().begin(), q.shape().end() - 1));
  for (int64_t b = 0; b < n.batches; ++b) {
    for (int64_t i = 0; i < n.sq; ++i) {
      const std::vector<double> s = Scores(q, k, bias, scale, causal, b, i);
      double max = -std::numeric_limits<double>::infinity(), sum = 0;
      for (double x : s) max = std::max(max, x);
      const int64_t r = b * n.sq + i;
      for (int64_t j = 0; std::isfinite(max) && j < n.sk; ++j) {
        const double p = std::exp(s[j] - max);
        sum += p;
        for (int64_t c = 0; c < n.dv; ++c) P(y)[r * n.dv + c] += p * P(v)[(b * n.sk + j) * n.dv + c];
      }
      for (int64_t c = 0; c < n.dv; ++c) P(y)[r * n.dv + c] = sum > 0 ? P(y)[r * n.dv + c] / sum : 0.0;
      P(stats)[r] = sum > 0 ? max + std::log(sum) : -std::numeric_limits<double>::infinity();
    }
  }
  return {y, stats};
}

// {dQ, dK, dV} from dY, Q, K, V, Y, Stats as the op defines them: p = exp(s - Stats),
// ds = scale p (dY.v - dY.Y).
std::vector<Tensor> RefAttentionGrad(const Tensor& dy, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& y, const Tensor& stats, const Tensor* bias, double scale,
                                     bool causal) {
  const Dims n = DimsOf(q, k, v);
  Tensor dq = F64(q.shape()), dk = F64(k.shape()), dv = F64(v.shape());
  for (int64_t b = 0; b < n.batches; ++b) {
    for (int64_t i = 0; i < n.sq; ++i) {
      const int64_t r = b * n.sq + i;
      const double lse = P(stats)[r];
      if (!std::isfinite(lse)) continue;
      const std::vector<double> s = Scores(q, k, bias, scale, causal, b, i);
      double dy_y = 0;
      for (int64_t c = 0; c < n.dv; ++c) dy_y += P(dy)[r * n.dv + c] * P(y)[r * n.dv + c];
      for (int64_t j = 0; j < n.sk; ++j) {
        const double p = std::exp(s[j] - lse);
        const int64_t kr = b * n.sk + j;
        double dp = 0;
        for (int64_t c = 0; c < n.dv; ++c) {
          dp += P(dy)[r * n.dv + c] * P(v)[kr * n.dv + c];
          P(dv)[kr * n.dv + c] += p * P(dy)[r * n.dv + c];
        }
        const double ds = scale * p * (dp - dy_y);
        for (int64_t c = 0; c < n.d; ++c) {
          P(dq)[r * n.d + c] += ds * P(k)[kr * n.d + c];
          P(dk)[kr * n.d + c] += ds * P(q)[r * n.d + c];
        }
      }
    }
  }
  return {dq, dk, dv};
}

// A bias fed as data (it has no gradient): values in [-1, 1], and -inf at every
// `masked_every`-th element when that is non-zero.
In Bias(const Shape& shape, int masked_every, uint64_t seed) {
  In in;
  in.name = "bias";
  in.role = Role::kFed;
  in.shape = shape;
  in.value = Tensor(DType::kF64, shape);
  uint64_t state = seed;
  for (int64_t i = 0; i < in.value.num_elements(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) / 9007199254740992.0;
    in.value.data<double>()[i] =
        masked_every && i % masked_every == masked_every - 1 ? -std::numeric_limits<double>::infinity() : 2 * u - 1;
  }
  return in;
}

// Scores row 1 of a [1, 1, 3, 4] bias entirely -inf: nothing kept there.
In BiasWithAnEmptyRow() {
  In in = Bias({1, 1, 3, 4}, 0, 5);
  for (int64_t j = 4; j < 8; ++j) in.value.data<double>()[j] = -std::numeric_limits<double>::infinity();
  return in;
}

std::vector<OpCase> AttentionCases() {
  std::vector<OpCase> cases;
  struct V {
    const char* name;
    Shape q, k, v;
    float scale;
    bool causal;
    std::optional<In> bias;
    bool gradient;
  };
  const std::vector<V> variants = {
      {"B2H3_S5_D4", {2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, 0.5f, false, std::nullopt, true},
      {"Causal_B2H2_S6_D8", {2, 2, 6, 8}, {2, 2, 6, 8}, {2, 2, 6, 8}, 0.35355339f, true, std::nullopt, true},
      {"Cross_Sq3_Sk7_Dv5", {1, 2, 3, 4}, {1, 2, 7, 4}, {1, 2, 7, 5}, 0.5f, false, std::nullopt, true},
      {"Causal_Sq3_Sk7", {1, 2, 3, 4}, {1, 2, 7, 4}, {1, 2, 7, 4}, 0.5f, true, std::nullopt, true},
      {"Rank3_N3", {3, 5, 4}, {3, 5, 4}, {3, 5, 4}, 0.5f, false, std::nullopt, true},
      {"Bias_B1H1SqSk_D8", {2, 2, 4, 8}, {2, 2, 4, 8}, {2, 2, 4, 8}, 0.5f, false, Bias({1, 1, 4, 4}, 0, 3), true},
      {"PaddingBias_B11Sk_MinusInf_D8", {2, 2, 4, 8}, {2, 2, 5, 8}, {2, 2, 5, 8}, 0.5f, false, Bias({2, 1, 1, 5}, 4, 4),
       true},
      {"CausalAndBias_D8", {1, 2, 5, 8}, {1, 2, 5, 8}, {1, 2, 5, 8}, 0.5f, true, Bias({1, 2, 5, 5}, 0, 6), true},
      {"RowWithNothingKept", {1, 1, 3, 4}, {1, 1, 4, 4}, {1, 1, 4, 4}, 0.5f, false, BiasWithAnEmptyRow(), false},
      // What cuDNN's fused attention takes (head dim 64, 128 positions); forward only,
      // the finite differences would take thousands of runs.
      {"Causal_S128_D64", {1, 2, 128, 64}, {1, 2, 128, 64}, {1, 2, 128, 64}, 0.125f, true, std::nullopt, false},
  };
  for (const V& v : variants) {
    OpCase c;
    c.name = absl::StrCat("FusedAttention_", v.name);
    c.op = "FusedAttention";
    c.attrs.Set("scale", v.scale);
    c.attrs.Set("causal", int64_t{v.causal});
    c.inputs = {X("q", v.q), X("k", v.k), X("v", v.v)};
    const bool biased = v.bias.has_value();
    if (biased) c.inputs.push_back(*v.bias);
    c.gradient = v.gradient;
    // Y only (Stats is f32 in bf16/f16 runs; the typed cases below check it).
    c.ref = [biased, scale = F(v.scale), causal = v.causal](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefAttention(in[0], in[1], in[2], biased ? &in[3] : nullptr, scale, causal)[0]};
    };
    cases.push_back(std::move(c));
  }
  for (DType dt : {DType::kF32, DType::kF64}) {
    OpCase c;
    c.name = absl::StrCat("FusedAttention_Causal_Stats", dt == DType::kF32 ? "F32" : "F64");
    c.op = "FusedAttention";
    c.attrs.Set("scale", 0.5f);
    c.attrs.Set("causal", int64_t{1});
    c.inputs = {XTyped("q", {2, 2, 5, 4}, dt), XTyped("k", {2, 2, 5, 4}, dt), XTyped("v", {2, 2, 5, 3}, dt)};
    c.out_dtypes = {dt, dt};
    c.gradient = false;
    c.ref = [](const std::vector<Tensor>& in) { return RefAttention(in[0], in[1], in[2], nullptr, F(0.5f), true); };
    cases.push_back(std::move(c));
  }
  struct G {
    const char* name;
    Shape q, k, v;
    bool causal;
    std::optional<In> bias;
  };
  // Stats in [1, 3] and scores within about +-2 keep every exp(s - Stats) moderate.
  for (const G& gv : std::vector<G>{{"B2H2_S5_D4", {2, 2, 5, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, false, std::nullopt},
                                    {"Causal_Cross_Dv3", {1, 2, 4, 4}, {1, 2, 6, 4}, {1, 2, 6, 3}, true, std::nullopt},
                                    {"Bias_D8", {2, 1, 4, 8}, {2, 1, 4, 8}, {2, 1, 4, 8}, false, Bias({2, 1, 1, 4}, 3, 8)},
                                    {"Causal_S128_D64", {1, 1, 128, 64}, {1, 1, 128, 64}, {1, 1, 128, 64}, true,
                                     std::nullopt}}) {
    OpCase c;
    c.name = absl::StrCat("FusedAttentionGrad_", gv.name);
    c.op = "FusedAttentionGrad";
    c.attrs.Set("scale", 0.5f);
    c.attrs.Set("causal", int64_t{gv.causal});
    Shape y = gv.q;
    y.back() = gv.v.back();
    const Shape rows(gv.q.begin(), gv.q.end() - 1);
    c.inputs = {X("dy", y), X("q", gv.q), X("k", gv.k), X("v", gv.v), X("y", y), XTyped("stats", rows, DType::kF32)};  // f32, as FusedAttention writes it
    c.inputs.back().lo = 1;
    c.inputs.back().hi = 3;
    const bool biased = gv.bias.has_value();
    if (biased) c.inputs.push_back(*gv.bias);
    c.gradient = false;
    c.ref = [biased, causal = gv.causal](const std::vector<Tensor>& in) {
      return RefAttentionGrad(in[0], in[1], in[2], in[3], in[4], in[5], biased ? &in[6] : nullptr, F(0.5f), causal);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

MPC_REGISTER_OP_CASES(Attention, AttentionCases);

}  // namespace mpc::opcases

// The CPU max pooling kernels have several paths for the same rule (row-major taps, the
// first maximum wins ties, the last NaN wins): 2x2/2 windows tiling the plane, full
// windows a row at a time, wide rows in vector lanes, and the general window-by-window
// loop. They are checked against each other on data full of ties and NaNs: the same X
// run as a tiled 8x8 plane (tiled path), embedded in a 9x9 plane whose extra row and
// column no window reaches (full windows a row at a time), and in that 9x9 plane with
// ceil_mode, whose extra partial windows send it down the general window-by-window path;
// in every float dtype, forward and gradient. Wide rows (the vector path) and ResNet's
// 3x3/2 pad-1 windows (the separable path) are checked against a window-by-window oracle
// written here.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

struct PoolRun {
  Tensor y, dx;  // as f32
};

// A max pooling window configuration (2-D).
struct PoolAttrs {
  std::vector<int64_t> kernel{2, 2}, strides{2, 2}, pads{0, 0, 0, 0}, dilations{1, 1};
  bool ceil_mode = false;
};

AttrMap AttrsOf(const PoolAttrs& pool) {
  AttrMap attrs;
  attrs.Set("kernel_shape", pool.kernel);
  attrs.Set("strides", pool.strides);
  attrs.Set("pads", pool.pads);
  attrs.Set("dilations", pool.dilations);
  if (pool.ceil_mode) attrs.Set("ceil_mode", int64_t{1});
  return attrs;
}

// MaxPool of x and MaxPoolGrad of dy through it, in `dtype`.
PoolRun RunPool(const Tensor& x, const Tensor& dy, DType dtype, const PoolAttrs& pool) {
  Graph g;
  GraphBuilder b(&g);
  Value* xv = g.AddInput("x", dtype, x.shape());
  Value* dyv = g.AddInput("dy", dtype, dy.shape());
  const AttrMap attrs = AttrsOf(pool);
  Value* y = b.Op("MaxPool", {xv}, attrs);
  Value* dx = b.Op("MaxPoolGrad", {dyv, xv}, attrs);
  EXPECT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({y, dx});
  auto ex = testing::ExecutorFor(g, Cpu());
  EXPECT_TRUE(ex.ok()) << ex.status();
  PoolRun r;
  if (!ex.ok()) return r;
  EXPECT_TRUE((*ex)->SetInput("x", x.CastTo(dtype)).ok());
  EXPECT_TRUE((*ex)->SetInput("dy", dy.CastTo(dtype)).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  r.y = (*ex)->Fetch(y->name)->CastTo(DType::kF32);
  r.dx = (*ex)->Fetch(dx->name)->CastTo(DType::kF32);
  return r;
}

// Y's shape as MaxPool's shape inference gives it.
Shape PooledShape(const Shape& x_shape, const PoolAttrs& pool) {
  Graph g;
  GraphBuilder b(&g);
  const AttrMap attrs = AttrsOf(pool);
  Value* y = b.Op("MaxPool", {g.AddInput("x", DType::kF32, x_shape)}, attrs);
  EXPECT_TRUE(b.status().ok()) << b.status();
  return b.status().ok() ? y->shape : Shape{};
}

// MaxPool 2x2/2.
PoolRun RunPool(const Tensor& x, const Tensor& dy, DType dtype, bool ceil_mode = false) {
  PoolAttrs pool;
  pool.ceil_mode = ceil_mode;
  return RunPool(x, dy, dtype, pool);
}

// Values from {-1, 0, 0.5, 1} (exact in every dtype, so ties everywhere) and a NaN in
// about one tap in `nan_every`, from a small LCG: neighbouring taps tie often, in no
// fixed pattern.
std::vector<float> TiesAndNaNs(int64_t count, uint32_t state, uint32_t nan_every) {
  const float levels[] = {-1, 0, 0.5f, 1};
  std::vector<float> v(static_cast<size_t>(count));
  for (float& e : v) {
    state = state * 1664525u + 1013904223u;
    const uint32_t r = state >> 16;
    e = r % nan_every == 0 ? kNaN : levels[(r / nan_every) % 4];
  }
  return v;
}

// Bitwise equal as f32, NaNs included (a NaN matches a NaN).
void ExpectSame(const float* a, const float* b, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i]) && std::isnan(b[i])) << what << "[" << i << "]: " << a[i] << " vs " << b[i];
    } else {
      EXPECT_EQ(a[i], b[i]) << what << "[" << i << "]";
    }
  }
}

TEST(MaxPoolPathsTest, TiledTwoByTwoPathAgreesWithTheGeneralPathOnTiesAndNaNs) {
  constexpr int64_t kPlanes = 6, kSide = 8;
  // Windows with none, one or several NaNs in either pair.
  const std::vector<float> tiled = TiesAndNaNs(kPlanes * kSide * kSide, 12345, 7);
  // The same planes with one more row and column, which no 2x2/2 window reaches.
  std::vector<float> framed(kPlanes * (kSide + 1) * (kSide + 1), -1);
  for (int64_t p = 0; p < kPlanes; ++p) {
    for (int64_t r = 0; r < kSide; ++r) {
      for (int64_t c = 0; c < kSide; ++c) {
        framed[(p * (kSide + 1) + r) * (kSide + 1) + c] = tiled[(p * kSide + r) * kSide + c];
      }
    }
  }
  constexpr int64_t kOut = kSide / 2;
  const Tensor dy = testing::RandomTensor(DType::kF32, {1, kPlanes, kOut, kOut}, 7, 0.5, 1.5);
  // ceil_mode's 5x5 windows: the 4x4 of dy in the corner, the partial windows' own values.
  Tensor dy_ceil = testing::RandomTensor(DType::kF32, {1, kPlanes, kOut + 1, kOut + 1}, 8, 0.5, 1.5);
  for (int64_t p = 0; p < kPlanes; ++p) {
    for (int64_t r = 0; r < kOut; ++r) {
      for (int64_t c = 0; c < kOut; ++c) {
        dy_ceil.data<float>()[(p * (kOut + 1) + r) * (kOut + 1) + c] = dy.data<float>()[(p * kOut + r) * kOut + c];
      }
    }
  }
  // The top-left rows x cols of each plane of t (planes of `side` x `side`).
  auto corner = [](const Tensor& t, int64_t side, int64_t rows) {
    std::vector<float> out;
    for (int64_t p = 0; p < kPlanes; ++p) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < rows; ++c) out.push_back(t.data<float>()[(p * side + r) * side + c]);
      }
    }
    return out;
  };
  const Tensor x_tiled = Tensor::FromVector<float>({1, kPlanes, kSide, kSide}, tiled);
  const Tensor x_framed = Tensor::FromVector<float>({1, kPlanes, kSide + 1, kSide + 1}, framed);
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(d));
    const PoolRun a = RunPool(x_tiled, dy, d);
    const PoolRun b = RunPool(x_framed, dy, d);
    const PoolRun c = RunPool(x_framed, dy_ceil, d, /*ceil_mode=*/true);
    ASSERT_EQ(a.y.shape(), b.y.shape());
    ASSERT_EQ(c.y.shape(), (Shape{1, kPlanes, kOut + 1, kOut + 1}));
    int nan_windows = 0;
    for (int64_t i = 0; i < a.y.num_elements(); ++i) nan_windows += std::isnan(a.y.data<float>()[i]);
    EXPECT_GT(nan_windows, 10);  // the NaN rule is exercised, not just ties
    const int64_t n = a.y.num_elements();
    ExpectSame(a.y.data<float>(), b.y.data<float>(), n, "Y tiled vs rows");
    ExpectSame(a.y.data<float>(), corner(c.y, kOut + 1, kOut).data(), n, "Y tiled vs general");
    // The gradient goes to the same tap: dX on the shared 8x8 region (the partial windows
    // of ceil_mode reach only row and column 8).
    const int64_t m = a.dx.num_elements();
    ExpectSame(a.dx.data<float>(), corner(b.dx, kSide + 1, kSide).data(), m, "dX tiled vs rows");
    ExpectSame(a.dx.data<float>(), corner(c.dx, kSide + 1, kSide).data(), m, "dX tiled vs general");
  }
}

// Runs MaxPool and MaxPoolGrad of `pool` over [1, planes, h, w] data full of ties and
// NaNs in every float dtype and checks each window against a window-by-window oracle of
// the rule (row-major taps, strict comparison: the first maximum, the last NaN), forward
// and gradient. dY holds quarters, so every gradient sum is exact in every dtype.
struct OracleRun {
  int64_t windows_per_row = 0;
  int nan_windows = 0;  // windows whose maximum is a NaN
};

OracleRun ExpectMatchesOracle(int64_t planes, int64_t h, int64_t w, const PoolAttrs& pool, uint32_t seed) {
  const Tensor x = Tensor::FromVector<float>({1, planes, h, w}, TiesAndNaNs(planes * h * w, seed, 13));
  const Shape y_shape = PooledShape(x.shape(), pool);
  EXPECT_EQ(y_shape.size(), 4u);
  if (y_shape.size() != 4) return {};
  const int64_t oh = y_shape[2], ow = y_shape[3];
  std::vector<float> dy_values(static_cast<size_t>(planes * oh * ow));
  for (size_t i = 0; i < dy_values.size(); ++i) dy_values[i] = 0.25f * static_cast<float>(1 + i % 4);
  const Tensor dy = Tensor::FromVector<float>({1, planes, oh, ow}, dy_values);
  // The oracle: each window's taps in row-major order.
  std::vector<float> want_y(dy_values.size(), 0), want_dx(static_cast<size_t>(planes * h * w), 0);
  int nan_windows = 0;
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = x.data<float>() + p * h * w;
    for (int64_t r = 0; r < oh; ++r) {
      for (int64_t c = 0; c < ow; ++c) {
        int64_t best = -1;
        for (int64_t i = 0; i < pool.kernel[0]; ++i) {
          const int64_t hi = r * pool.strides[0] - pool.pads[0] + i * pool.dilations[0];
          for (int64_t j = 0; j < pool.kernel[1]; ++j) {
            const int64_t wi = c * pool.strides[1] - pool.pads[1] + j * pool.dilations[1];
            if (hi < 0 || hi >= h || wi < 0 || wi >= w) continue;
            const float v = xp[hi * w + wi];
            if (best < 0 || v > xp[best] || std::isnan(v)) best = hi * w + wi;
          }
        }
        const int64_t o = (p * oh + r) * ow + c;
        if (best < 0) continue;  // a window that sees no input: 0, no gradient
        want_y[o] = xp[best];
        nan_windows += std::isnan(xp[best]);
        want_dx[p * h * w + best] += dy_values[o];
      }
    }
  }
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(d));
    const PoolRun got = RunPool(x, dy, d, pool);
    EXPECT_EQ(got.y.num_elements(), static_cast<int64_t>(want_y.size()));
    if (got.y.num_elements() != static_cast<int64_t>(want_y.size())) continue;
    ExpectSame(got.y.data<float>(), want_y.data(), got.y.num_elements(), "Y");
    ExpectSame(got.dx.data<float>(), want_dx.data(), got.dx.num_elements(), "dX");
  }
  return {ow, nan_windows};
}

// Rows of at least 16 windows go through the vector path (MaxWindowsAcross, one tap
// across a row of windows): stride 1, dilation, asymmetric padding and ceil_mode.
TEST(MaxPoolPathsTest, WideRowsAgreeWithAWindowByWindowOracle) {
  std::vector<std::pair<std::string, PoolAttrs>> configs;
  configs.push_back({"3x3/1 pad 1", {{3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, false}});
  configs.push_back({"2x3/(1,2) dilated, asymmetric pads", {{2, 3}, {1, 2}, {1, 2, 0, 1}, {2, 2}, false}});
  configs.push_back({"1x4/2 ceil_mode, padded", {{1, 4}, {2, 2}, {0, 1, 0, 1}, {1, 1}, true}});
  configs.push_back({"3x3/2 ceil_mode", {{3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true}});
  for (const auto& [name, pool] : configs) {
    SCOPED_TRACE(name);
    const OracleRun run = ExpectMatchesOracle(3, 8, 38, pool, 2024);
    EXPECT_GE(run.windows_per_row, 16) << "the row must be wide enough for the vector path";
    EXPECT_GT(run.nan_windows, 3) << "the NaN rule is exercised, not just ties";
  }
}

// 3x3 windows with stride 2 and one leading pad row and column (ResNet's stem pool) go
// through the separable path (ForEachArgMax3x3Stride2: three-tap maxima per input row,
// then per output row the best of three rows): even and odd plane sizes, trailing pads
// of 0 to 2, ceil_mode windows hanging over the end, planes as small as 2x2 and rows
// from 1 to 19 windows. The even planes that the windows exactly halve (8x38, 32x32, 2x2
// with trailing pads of 0 or 1) take the loads-from-X variant (HalvingRowMaxima).
TEST(MaxPoolPathsTest, SeparableThreeByThreeStrideTwoAgreesWithAWindowByWindowOracle) {
  const std::vector<std::pair<int64_t, int64_t>> planes = {{8, 38}, {32, 32}, {7, 9}, {5, 6}, {2, 2}, {3, 2}};
  std::vector<std::pair<std::string, PoolAttrs>> configs;
  configs.push_back({"resnet 3x3/2 pad 1", {{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false}});
  configs.push_back({"leading pads only", {{3, 3}, {2, 2}, {1, 1, 0, 0}, {1, 1}, false}});
  configs.push_back({"trailing pads of 2", {{3, 3}, {2, 2}, {1, 1, 2, 2}, {1, 1}, false}});
  configs.push_back({"ceil_mode", {{3, 3}, {2, 2}, {1, 1, 0, 0}, {1, 1}, true}});
  configs.push_back({"ceil_mode, padded", {{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true}});
  uint32_t seed = 77;
  int nan_windows = 0;
  for (const auto& [h, w] : planes) {
    for (const auto& [name, pool] : configs) {
      SCOPED_TRACE(absl::StrCat(name, ", ", h, "x", w));
      nan_windows += ExpectMatchesOracle(4, h, w, pool, ++seed).nan_windows;
    }
  }
  EXPECT_GT(nan_windows, 20) << "the NaN rule is exercised, not just ties";
}

// The last NaN of a window takes its gradient, whichever pair of the 2x2 it is in.
TEST(MaxPoolPathsTest, GradientGoesToTheLastNaNOfEachWindow) {
  // Window 0: NaN 1 / NaN 2 -> (1,0). Window 1: 1 NaN / 2 3 -> (0,1).
  const Tensor x = Tensor::FromVector<float>({1, 1, 2, 4}, {kNaN, 1, 1, kNaN, kNaN, 2, 2, 3});
  const Tensor dy = Tensor::FromVector<float>({1, 1, 1, 2}, {10, 20});
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(d));
    const PoolRun r = RunPool(x, dy, d);
    const std::vector<float> expected = {0, 0, 0, 20, 10, 0, 0, 0};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(r.dx.data<float>()[i], expected[i]) << i;
  }
}

}  // namespace
}  // namespace mpc

// The op-numerics cases of the real FP8 ops (graph/ops_fp8_gemm.cc), which the mpc-domain
// coverage rule does not require but which give the CUDA conformance test its check of
// the CUDA Fp8Cast/Fp8Gemm kernels against the CPU's:
//   Fp8Cast  codes of f32(x) * scale, plain and transposed, E4M3 and E5M2, from f32, bf16
//            and f16, with saturating inputs; checked value for value against a float64
//            rounding written here (nearest representable value, ties to the even code,
//            saturation to ±max), independent of graph/float8.h.
//   Fp8Gemm  the TN layout the fp8-lower pass emits (transA = 0, transB = 1), E4M3 x E4M3,
//            E5M2 x E4M3 and E4M3 x E5M2, outputs bf16 (with and without a bf16 bias) and
//            f16 (with an f16 bias); the reference sums the dequantized f32 operands
//            f32(code) * scale_inv in float64. No f32 output: Hopper's FP8 tensor cores
//            accumulate with fewer than f32's bits between cuBLASLt's promotions, which
//            the conformance test's f32 tolerance (1e-5) would flag.
//   Fp8QuantizeDynamic  just-in-time scaling (the current, rowwise and block recipes): per
//            tensor, per row along either matrix axis, 1x128 tiles with a short last tile,
//            128x128 blocks with partial blocks, rank 3, power-of-two scales, E4M3 and E5M2
//            from f32, bf16 and f16; the reference groups elements by their index (not through
//            graph/float8_groups.h), takes each group's amax and scale as the recipe states
//            and rounds with the float64 rounding below, bit for bit.
//   Fp8CastDynamic  the lowered just-in-time quantization: codes (plain and transposed) and
//            the group scale_invs in the GEMM's layouts, per tensor, row, 1x128 tile and
//            128x128 block, against a reference written here (groups by index, the
//            layouts restated), bit for bit.
//   Fp8Gemm (grouped)  rows x rows, tiles x tiles, tiles x blocks, blocks x tiles: each
//            code dequantized by its group's scale_inv, summed in float64, as above.
// Every input has a fixed dtype (the ops are not float-dtype generic), so each case is the
// same graph in every run dtype; there are no gradient cases (the ops have none).
#include <algorithm>
#include <cmath>
#include <map>

#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

// Non-negative finite values of an FP8 format, in code order (code == index).
std::vector<double> Fp8Values(int man_bits, int bias, int max_code) {
  std::vector<double> v;
  for (int c = 0; c <= max_code; ++c) {
    const int e = c >> man_bits, m = c & ((1 << man_bits) - 1);
    const double frac = static_cast<double>(m) / (1 << man_bits);
    v.push_back(e == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1.0 + frac, e - bias));
  }
  return v;
}

// The OCP rounding with saturation, in float64 (finite inputs only: the cases draw them).
double RefRoundFp8(double y, bool e4m3) {
  static const std::vector<double> e4 = Fp8Values(3, 7, 0x7E), e5 = Fp8Values(2, 15, 0x7B);
  const std::vector<double>& vals = e4m3 ? e4 : e5;
  const double a = std::fabs(y), sign = std::signbit(y) ? -1.0 : 1.0;
  if (a >= vals.back()) return sign * vals.back();
  const size_t i = std::upper_bound(vals.begin(), vals.end(), a) - vals.begin() - 1;
  const double lo = a - vals[i], hi = vals[i + 1] - a;
  const size_t pick = lo < hi ? i : hi < lo ? i + 1 : (i % 2 == 0 ? i : i + 1);
  return sign * vals[pick];
}

std::vector<OpCase> Fp8CastCases() {
  std::vector<OpCase> cases;
  struct Variant {
    const char* name;
    DType x;
    bool e4m3;
    bool transpose;
    bool history;
    double scale;
    Shape shape = {24, 40};
  };
  // |x| up to 8: a scale of 100 (E4M3) or 10000 (E5M2) saturates the largest values.
  // Shapes: multiples of 8 take CUDA's 8-element paths (one partial 64x64 tile when
  // transposed, several at 136x200); the odd ones its element-by-element paths.
  for (const Variant& v : {Variant{"E4M3_F32", DType::kF32, true, false, true, 100.0},
                           Variant{"E4M3_F32_Transpose", DType::kF32, true, true, false, 3.0},
                           Variant{"E5M2_Bf16_Transpose", DType::kBF16, false, true, true, 10000.0},
                           Variant{"E5M2_F16", DType::kF16, false, false, false, 0.37},
                           Variant{"E4M3_Bf16", DType::kBF16, true, false, false, 0.001},
                           Variant{"E4M3_Bf16_Transpose_Tiles", DType::kBF16, true, true, true, 30.0, {136, 200}},
                           Variant{"E4M3_Bf16_Transpose_Odd", DType::kBF16, true, true, true, 30.0, {21, 37}},
                           Variant{"E5M2_F16_Odd", DType::kF16, false, false, true, 500.0, {21, 37}}}) {
    OpCase c;
    c.name = absl::StrCat("Fp8Cast_", v.name);
    c.op = "Fp8Cast";
    c.attrs.Set("format", std::string(v.e4m3 ? "e4m3" : "e5m2"));
    if (v.transpose) c.attrs.Set("transpose", int64_t{1});
    In x = XTyped("x", v.shape, v.x);
    x.lo = -8;
    x.hi = 8;
    In scale;
    scale.name = "scale";
    scale.role = Role::kFed;
    scale.dtype = DType::kF32;
    scale.value = Tensor::Scalar(static_cast<float>(v.scale));
    c.inputs = {x, scale};
    if (v.history) {
      In h = XTyped("amax_history", {4}, DType::kF32);
      h.lo = h.hi = 0;  // this step's slot starts at 0, as after an update
      c.inputs.push_back(h);
    }
    c.out_dtypes = {v.e4m3 ? DType::kF8E4M3 : DType::kF8E5M2};
    c.exact = true;
    c.gradient = false;
    const bool e4m3 = v.e4m3, transpose = v.transpose;
    c.ref = [e4m3, transpose](const std::vector<Tensor>& in) {
      const Tensor& x = in[0];
      const float scale = static_cast<float>(P(in[1])[0]);
      const int64_t rows = x.shape()[0], cols = x.shape()[1];
      Tensor y = F64(transpose ? Shape{cols, rows} : Shape{rows, cols});
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) {
          // The kernel scales in f32, then rounds once.
          const double scaled = static_cast<double>(static_cast<float>(P(x)[r * cols + k]) * scale);
          P(y)[transpose ? k * rows + r : r * cols + k] = RefRoundFp8(scaled, e4m3);
        }
      }
      return std::vector<Tensor>{y};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// The recipe's scale from a group's amax (graph/float8_scaling.h's rule, restated).
float RefDynamicScale(double amax, bool e4m3, bool power_of_two) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1.0f;
  float s = (e4m3 ? 448.0f : 57344.0f) / static_cast<float>(amax);
  if (std::isinf(s)) s = 3.4028234663852886e38f;
  if (power_of_two) s = static_cast<float>(std::exp2(std::floor(std::log2(static_cast<double>(s)))));
  return s;
}

std::vector<OpCase> Fp8QuantizeDynamicCases() {
  std::vector<OpCase> cases;
  struct Variant {
    const char* name;
    const char* granularity;
    int64_t axis;
    Shape shape;
    DType x;
    bool e4m3;
    bool power_of_two;
    double hi;
  };
  for (const Variant& v : {
           Variant{"Tensor_E4M3_F32", "tensor", 0, {24, 40}, DType::kF32, true, false, 3.0},
           Variant{"Tensor_E5M2_Bf16_Pow2", "tensor", 0, {17, 33}, DType::kBF16, false, true, 0.02},
           Variant{"Rows_Axis1_E4M3_F32", "rows", 1, {24, 5}, DType::kF32, true, false, 1e-3},
           Variant{"Rows_Axis0_E5M2_Bf16", "rows", 0, {6, 40}, DType::kBF16, false, false, 200.0},
           Variant{"Rows_Axis1_E4M3_F32_Pow2_Rank3", "rows", -1, {3, 8, 7}, DType::kF32, true, true, 5.0},
           Variant{"Tiles_Axis1_E4M3_Bf16", "tiles", 1, {5, 300}, DType::kBF16, true, false, 1.0},
           Variant{"Tiles_Axis0_E5M2_F32", "tiles", 0, {260, 6}, DType::kF32, false, false, 1e-4},
           Variant{"Blocks_E4M3_F32", "blocks", 0, {200, 136}, DType::kF32, true, false, 2.0},
           Variant{"Blocks_E4M3_Bf16_Rank3", "blocks", -1, {2, 130, 129}, DType::kBF16, true, false, 7.0},
           Variant{"Tiles_Axis0_E5M2_F16_Pow2", "tiles", 0, {200, 24}, DType::kF16, false, true, 30.0},
           // Past the CPU kernel's 32768-element threshold: its threaded loops.
           Variant{"Rows_Axis1_E4M3_F32_Threaded", "rows", 1, {300, 130}, DType::kF32, true, false, 2.0},
           Variant{"Rows_Axis0_E5M2_Bf16_Threaded", "rows", 0, {130, 300}, DType::kBF16, false, false, 2.0},
           Variant{"Tiles_Axis1_E4M3_F32_Threaded", "tiles", 1, {150, 300}, DType::kF32, true, false, 2.0},
           Variant{"Tensor_E4M3_Bf16_Threaded", "tensor", 0, {200, 200}, DType::kBF16, true, false, 2.0}}) {
    OpCase c;
    c.name = absl::StrCat("Fp8QuantizeDynamic_", v.name);
    c.op = "Fp8QuantizeDynamic";
    c.attrs.Set("format", std::string(v.e4m3 ? "e4m3" : "e5m2"));
    c.attrs.Set("granularity", std::string(v.granularity));
    c.attrs.Set("axis", v.axis);
    c.attrs.Set("tile", int64_t{128});
    if (v.power_of_two) c.attrs.Set("power_of_two", int64_t{1});
    In x = XTyped("x", v.shape, v.x);
    x.lo = -v.hi;
    x.hi = v.hi;
    c.inputs = {x};
    c.out_dtypes = {DType::kF32};
    c.exact = true;
    c.gradient = false;
    const std::string granularity = v.granularity;
    const int64_t axis = v.axis;
    const bool e4m3 = v.e4m3, pow2 = v.power_of_two;
    c.ref = [granularity, axis, e4m3, pow2](const std::vector<Tensor>& in) {
      const Tensor& x = in[0];
      const Shape& shape = x.shape();
      const int64_t rank = static_cast<int64_t>(shape.size()), n = x.num_elements();
      const int64_t a = axis < 0 ? axis + rank : axis;
      auto group_of = [&](int64_t flat) {
        std::vector<int64_t> idx = Unravel(flat, shape);
        if (granularity == "tensor") return std::vector<int64_t>{};
        if (granularity == "rows") idx[a] = 0;
        if (granularity == "tiles") idx[a] /= 128;
        if (granularity == "blocks") {
          idx[rank - 1] /= 128;
          idx[rank - 2] /= 128;
        }
        return idx;
      };
      std::map<std::vector<int64_t>, double> amax;
      for (int64_t i = 0; i < n; ++i) {
        double& m = amax[group_of(i)];
        m = std::max(m, std::fabs(P(x)[i]));
      }
      Tensor y = F64(shape);
      for (int64_t i = 0; i < n; ++i) {
        const float scale = RefDynamicScale(amax[group_of(i)], e4m3, pow2);
        const double scaled = static_cast<double>(static_cast<float>(P(x)[i]) * scale);  // scaled in f32
        const float rounded = static_cast<float>(RefRoundFp8(scaled, e4m3));
        P(y)[i] = static_cast<double>(rounded * (1.0f / scale));  // dequantized in f32
      }
      return std::vector<Tensor>{y};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// Where the scale of element [p, k] of an operand stored [rows, depth] sits in an
// Fp8CastDynamic / grouped Fp8Gemm scale layout (graph/ops_fp8_gemm.cc), restated.
int64_t RefScaleSlot(const std::string& granularity, int64_t p, int64_t k, int64_t rows, int64_t depth) {
  if (granularity == "rows") return p;
  if (granularity == "tiles") return (k / 128) * rows + p;
  if (granularity == "blocks") {
    const int64_t k_blocks = (depth + 127) / 128, padded = (k_blocks + 3) / 4 * 4;
    return (p / 128) * padded + k / 128;
  }
  return 0;
}

Shape RefScaleShape(const std::string& granularity, int64_t rows, int64_t depth) {
  const int64_t k_blocks = (depth + 127) / 128;
  if (granularity == "rows") return {rows};
  if (granularity == "tiles") return {k_blocks, rows};
  if (granularity == "blocks") return {(rows + 127) / 128, (k_blocks + 3) / 4 * 4};
  return {1};
}

// Fp8CastDynamic: the groups of x (rows and tiles along the codes' K, i.e. x's axis 1, or
// axis 0 when transposed), the codes of each element at its (transposed) place, and each
// group's 1 / scale at its slot of the GEMM layout (the blocks layout's padding 1).
std::vector<OpCase> Fp8CastDynamicCases() {
  std::vector<OpCase> cases;
  struct Variant {
    const char* name;
    const char* granularity;
    bool transpose;
    Shape shape;
    DType x;
    bool e4m3;
    double hi;
  };
  for (const Variant& v : {
           Variant{"Tensor_E4M3_F32", "tensor", false, {24, 40}, DType::kF32, true, 3.0},
           Variant{"Tensor_E5M2_Bf16_Transpose", "tensor", true, {32, 48}, DType::kBF16, false, 0.02},
           Variant{"Rows_E4M3_Bf16", "rows", false, {24, 40}, DType::kBF16, true, 5.0},
           Variant{"Rows_E5M2_F32_Transpose", "rows", true, {40, 24}, DType::kF32, false, 200.0},
           Variant{"Tiles_E4M3_Bf16", "tiles", false, {16, 300}, DType::kBF16, true, 1.0},
           Variant{"Tiles_E4M3_F16_Transpose", "tiles", true, {260, 16}, DType::kF16, true, 30.0},
           Variant{"Blocks_E4M3_F32", "blocks", false, {200, 136}, DType::kF32, true, 2.0},
           Variant{"Blocks_E4M3_Bf16_Transpose", "blocks", true, {136, 520}, DType::kBF16, true, 7.0},
           // Past the CPU kernel's 32768-element threshold, and CUDA's grid-wide tensor path.
           Variant{"Tensor_E4M3_Bf16_Threaded", "tensor", false, {200, 400}, DType::kBF16, true, 2.0},
           Variant{"Tiles_E4M3_F32_Threaded_Transpose", "tiles", true, {300, 150}, DType::kF32, true, 2.0}}) {
    OpCase c;
    c.name = absl::StrCat("Fp8CastDynamic_", v.name);
    c.op = "Fp8CastDynamic";
    c.attrs.Set("format", std::string(v.e4m3 ? "e4m3" : "e5m2"));
    c.attrs.Set("granularity", std::string(v.granularity));
    c.attrs.Set("axis", int64_t{v.transpose ? 0 : 1});
    c.attrs.Set("tile", int64_t{128});
    if (v.transpose) c.attrs.Set("transpose", int64_t{1});
    In x = XTyped("x", v.shape, v.x);
    x.lo = -v.hi;
    x.hi = v.hi;
    c.inputs = {x};
    c.out_dtypes = {v.e4m3 ? DType::kF8E4M3 : DType::kF8E5M2, DType::kF32};
    c.exact = true;
    c.gradient = false;
    const std::string granularity = v.granularity;
    const bool e4m3 = v.e4m3, transpose = v.transpose;
    c.ref = [granularity, e4m3, transpose](const std::vector<Tensor>& in) {
      const Tensor& x = in[0];
      const int64_t r_count = x.shape()[0], c_count = x.shape()[1];
      const int64_t rows = transpose ? c_count : r_count, depth = transpose ? r_count : c_count;
      // The codes' [p, k] of x's [r, c], and the group key: (p, k / 128) etc.
      auto group_of = [&](int64_t p, int64_t k) -> std::pair<int64_t, int64_t> {
        if (granularity == "rows") return {p, 0};
        if (granularity == "tiles") return {p, k / 128};
        if (granularity == "blocks") return {p / 128, k / 128};
        return {0, 0};
      };
      std::map<std::pair<int64_t, int64_t>, double> amax;
      for (int64_t r = 0; r < r_count; ++r) {
        for (int64_t col = 0; col < c_count; ++col) {
          const int64_t p = transpose ? col : r, k = transpose ? r : col;
          double& m = amax[group_of(p, k)];
          m = std::max(m, std::fabs(P(x)[r * c_count + col]));
        }
      }
      Tensor codes = F64({rows, depth});
      Tensor scale_inv = F64(RefScaleShape(granularity, rows, depth));
      for (int64_t i = 0; i < scale_inv.num_elements(); ++i) P(scale_inv)[i] = 1.0;
      for (int64_t r = 0; r < r_count; ++r) {
        for (int64_t col = 0; col < c_count; ++col) {
          const int64_t p = transpose ? col : r, k = transpose ? r : col;
          const float scale = RefDynamicScale(amax[group_of(p, k)], e4m3, false);
          const double scaled = static_cast<double>(static_cast<float>(P(x)[r * c_count + col]) * scale);
          P(codes)[p * depth + k] = RefRoundFp8(scaled, e4m3);
          P(scale_inv)[RefScaleSlot(granularity, p, k, rows, depth)] = static_cast<double>(1.0f / scale);
        }
      }
      return std::vector<Tensor>{codes, scale_inv};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// Fp8Gemm in the TN layout: per-tensor scales (E4M3 x E4M3, E5M2 x E4M3, E4M3 x E5M2; bf16
// and f16 outputs with and without a bias), and group scales in the layouts cuBLASLt's
// scale modes read (rows x rows, 1x128 tiles x tiles, tiles x 128x128 blocks and blocks x
// tiles; K past one tile with a short last one): each code dequantized by its group's
// scale_inv (in f32, as the kernels do), summed in float64. Codes are drawn as values in
// [-4, 4] rounded to the format; scale_invs away from 1 so the products are not exact.
std::vector<OpCase> Fp8GemmCases() {
  std::vector<OpCase> cases;
  struct Variant {
    const char* name;
    const char* a_scaling;
    const char* b_scaling;
    DType a, b;
    int64_t m, n, k;
    DType out;
    bool bias;
  };
  for (const Variant& v : {
           Variant{"E4M3xE4M3_Bf16Bias_Bf16", "tensor", "tensor", DType::kF8E4M3, DType::kF8E4M3, 32, 48, 64,
                   DType::kBF16, true},
           Variant{"E5M2xE4M3_F16Bias_F16", "tensor", "tensor", DType::kF8E5M2, DType::kF8E4M3, 16, 32, 48,
                   DType::kF16, true},
           Variant{"E4M3xE5M2_Bf16", "tensor", "tensor", DType::kF8E4M3, DType::kF8E5M2, 48, 16, 32, DType::kBF16,
                   false},
           Variant{"Rows_E4M3xE4M3_Bf16Bias_Bf16", "rows", "rows", DType::kF8E4M3, DType::kF8E4M3, 32, 48, 64,
                   DType::kBF16, true},
           Variant{"Rows_E5M2xE4M3_F16", "rows", "rows", DType::kF8E5M2, DType::kF8E4M3, 16, 32, 48, DType::kF16,
                   false},
           Variant{"TilesxTiles_E4M3_Bf16", "tiles", "tiles", DType::kF8E4M3, DType::kF8E4M3, 48, 32, 320,
                   DType::kBF16, false},
           Variant{"TilesxBlocks_E4M3_Bf16Bias_Bf16", "tiles", "blocks", DType::kF8E4M3, DType::kF8E4M3, 32, 144, 320,
                   DType::kBF16, true},
           Variant{"BlocksxTiles_E4M3_F16", "blocks", "tiles", DType::kF8E4M3, DType::kF8E4M3, 144, 32, 192,
                   DType::kF16, false}}) {
    OpCase c;
    c.name = absl::StrCat("Fp8Gemm_TN_", v.name);
    c.op = "Fp8Gemm";
    c.attrs.Set("transA", int64_t{0});
    c.attrs.Set("transB", int64_t{1});
    c.attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(v.out)));
    const bool grouped = std::string(v.a_scaling) != "tensor";
    if (grouped) {
      c.attrs.Set("a_scaling", std::string(v.a_scaling));
      c.attrs.Set("b_scaling", std::string(v.b_scaling));
      c.attrs.Set("tile", int64_t{128});
    }
    In a = XTyped("a", {v.m, v.k}, v.a), b = XTyped("b", {v.n, v.k}, v.b);
    a.lo = b.lo = -4;
    a.hi = b.hi = 4;
    In sa = XTyped("a_scale_inv", grouped ? RefScaleShape(v.a_scaling, v.m, v.k) : Shape{}, DType::kF32);
    In sb = XTyped("b_scale_inv", grouped ? RefScaleShape(v.b_scaling, v.n, v.k) : Shape{}, DType::kF32);
    sa.lo = sb.lo = 0.01;
    sa.hi = sb.hi = 0.3;
    c.inputs = {a, b, sa, sb};
    if (v.bias) c.inputs.push_back(XTyped("bias", {v.n}, v.out));
    c.out_dtypes = {v.out};
    c.gradient = false;
    const std::string as = v.a_scaling, bs = v.b_scaling;
    c.ref = [as, bs](const std::vector<Tensor>& in) {
      const Tensor& a = in[0];
      const Tensor& b = in[1];
      const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[0];
      Tensor y = F64({m, n});
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double acc = in.size() > 4 ? P(in[4])[j] : 0.0;
          for (int64_t p = 0; p < k; ++p) {
            const float sa = static_cast<float>(P(in[2])[RefScaleSlot(as, i, p, m, k)]);
            const float sb = static_cast<float>(P(in[3])[RefScaleSlot(bs, j, p, n, k)]);
            const double av = static_cast<float>(P(a)[i * k + p]) * sa;  // in f32, as the kernels
            const double bv = static_cast<float>(P(b)[j * k + p]) * sb;
            acc += av * bv;
          }
          P(y)[i * n + j] = acc;
        }
      }
      return std::vector<Tensor>{y};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> Fp8Cases() {
  std::vector<OpCase> cases = Fp8CastCases();
  for (OpCase& c : Fp8CastDynamicCases()) cases.push_back(std::move(c));
  for (OpCase& c : Fp8QuantizeDynamicCases()) cases.push_back(std::move(c));
  for (OpCase& c : Fp8GemmCases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace

MPC_REGISTER_OP_CASES(Fp8, Fp8Cases);

}  // namespace mpc::opcases

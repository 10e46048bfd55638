// cublaslt_matmul_rate: the GPU's matrix-product rate through cuBLASLt (the library mpc's CUDA
// backend uses for every GEMM), measured by `tools/bench/bench.py --device cuda` in the same
// run as the model benchmarks. It is the roof of the "% of rate" column, as
// dnnl_matmul_rate.cc is on the CPU.
//
// usage: cublaslt_matmul_rate [N] [reps] [--mnk M,N,K] [--dtypes f32,tf32,bf16,f16,fp8] [--algos A]
//                             [--device D]
//   N      m = n = k (default 8192); --mnk sets them separately
//   reps   timed products per dtype (default 20); the median and the best are reported
//   algos  how many of cuBLASLt's heuristic candidates to try (default 8); the fastest is timed
//
// For each dtype it times D = A^T·B (cuBLASLt's "TN" layout, the one FP8 requires; used for every
// dtype so the rows compare like with like), column-major, alpha 1, beta 0, with a 32 MiB
// workspace, each product between two CUDA events:
//   f32   A, B, D f32, CUBLAS_COMPUTE_32F (no tensor cores)
//   tf32  A, B, D f32, CUBLAS_COMPUTE_32F_FAST_TF32
//   bf16  A, B, D bf16, f32 accumulation
//   f16   A, B, D f16, f32 accumulation
//   fp8   A, B E4M3 with per-tensor scales (1.0), D bf16, f32 accumulation, fast accumulation
//         on (what a training recipe uses for forward GEMMs); only on sm_89 and newer
// Operands hold multiples of 1/8 in [-1, 1], exact in every one of these formats.
//
// Output: progress on stderr and ONE line of JSON on stdout, e.g.
//   {"device":"NVIDIA H100 80GB HBM3","sm":90,...,"bf16":{"median_gflops":...,"best_gflops":...},...}
// A dtype that cannot run says {"error": "..."} instead; the exit code is 0 when f32 ran.
//
// Only the CUDA runtime and cuBLASLt, no mpc library:
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include cublaslt_matmul_rate.cc
//       -L/usr/local/cuda/lib64 -lcublasLt -lcudart -o cublaslt_matmul_rate     (one line)
// bench.py builds it like that into build/bench/ when it has no CMake-built one; the CMake
// build makes it (target cublaslt_matmul_rate) when the CUDA toolkit is found.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Thrown on any failed CUDA or cuBLASLt call; caught per dtype so one dtype's failure does
// not hide the others.
struct Failure {
  std::string message;
};

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Failure{std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

void Check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Failure{std::string(what) + ": cublasStatus " + std::to_string(static_cast<int>(s))};
}

struct DtypeConfig {
  const char* name;
  cudaDataType_t ab_type;  // A and B
  cudaDataType_t d_type;   // C and D
  cublasComputeType_t compute;
  size_t ab_bytes, d_bytes;  // bytes per element
  bool fp8;
};

const DtypeConfig kConfigs[] = {
    {"f32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 4, false},
    {"tf32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4, false},
    {"bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2, false},
    {"f16", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2, false},
    {"fp8", CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 2, true},
};

// Deterministic operand values: multiples of 1/8 in [-1, 1] (exact in f32, bf16, f16 and E4M3).
std::vector<float> HostValues(size_t count, uint64_t seed) {
  std::vector<float> v(count);
  uint64_t s = seed;
  for (size_t i = 0; i < count; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v[i] = static_cast<float>(static_cast<int>((s >> 33) % 17) - 8) / 8.0f;
  }
  return v;
}

// The values converted to the operand type, as raw bytes.
std::vector<unsigned char> Encode(const std::vector<float>& v, cudaDataType_t type) {
  std::vector<unsigned char> out;
  switch (type) {
    case CUDA_R_32F:
      out.resize(v.size() * 4);
      std::memcpy(out.data(), v.data(), out.size());
      break;
    case CUDA_R_16BF: {
      std::vector<__nv_bfloat16> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16(v[i]);
      out.resize(v.size() * 2);
      std::memcpy(out.data(), h.data(), out.size());
      break;
    }
    case CUDA_R_16F: {
      std::vector<__half> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = __float2half(v[i]);
      out.resize(v.size() * 2);
      std::memcpy(out.data(), h.data(), out.size());
      break;
    }
    case CUDA_R_8F_E4M3: {
      out.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = __nv_cvt_float_to_fp8(v[i], __NV_SATFINITE, __NV_E4M3);
      break;
    }
    default:
      throw Failure{"unsupported operand type"};
  }
  return out;
}

struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  void Allocate(size_t bytes, const char* what) { Check(cudaMalloc(&p, bytes), what); }
};

// Owns the cuBLASLt descriptors of one configuration.
struct LtObjects {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    Check(cudaEventCreate(&start), "cudaEventCreate");
    Check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

struct Rate {
  bool ok = false;
  std::string error;
  double median_gflops = 0, best_gflops = 0, median_ms = 0;
  double first_heuristic_median_gflops = 0;  // cuBLASLt's first choice (what a plain caller gets)
  int algos_tried = 0, chosen_algo = -1;
};

constexpr size_t kWorkspaceBytes = 32u << 20;

Rate Measure(cublasLtHandle_t lt, cudaStream_t stream, const DtypeConfig& c, int64_t m, int64_t n, int64_t k, int reps,
             int max_algos, void* workspace) {
  Rate r;
  try {
    // TN, column-major: A is stored k x m (lda = k) and used transposed, B is k x n (ldb = k),
    // D is m x n (ldd = m). C is D (beta = 0).
    DeviceBuffer a, b, d, scales;
    a.Allocate(static_cast<size_t>(k * m) * c.ab_bytes, "cudaMalloc(A)");
    b.Allocate(static_cast<size_t>(k * n) * c.ab_bytes, "cudaMalloc(B)");
    d.Allocate(static_cast<size_t>(m * n) * c.d_bytes, "cudaMalloc(D)");
    {
      const std::vector<unsigned char> ha = Encode(HostValues(static_cast<size_t>(k * m), 1), c.ab_type);
      const std::vector<unsigned char> hb = Encode(HostValues(static_cast<size_t>(k * n), 2), c.ab_type);
      Check(cudaMemcpy(a.p, ha.data(), ha.size(), cudaMemcpyHostToDevice), "cudaMemcpy(A)");
      Check(cudaMemcpy(b.p, hb.data(), hb.size(), cudaMemcpyHostToDevice), "cudaMemcpy(B)");
      Check(cudaMemset(d.p, 0, static_cast<size_t>(m * n) * c.d_bytes), "cudaMemset(D)");
    }

    LtObjects o;
    Check(cublasLtMatmulDescCreate(&o.desc, c.compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    Check(cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)), "TRANSA");
    Check(cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)), "TRANSB");
    if (c.fp8) {
      // Per-tensor scales as a training recipe passes them (1.0 here), and fast accumulation.
      // Each scale 16 bytes from the other. With them 4 bytes apart the first H100 run
      // (cuBLASLt 13.1, 2026-11-27) reported "none of the heuristic's algorithms ran" for
      // fp8, and mpc's own GEMM failed the same way until its scales were 16-byte aligned
      // (backends/cuda/cublaslt_gemm.h, kFp8ScalarAlignment). Not yet rerun on a GPU.
      constexpr int kSlot = 4;  // floats: 16 bytes
      scales.Allocate(2 * kSlot * sizeof(float), "cudaMalloc(scales)");
      const float ones[2 * kSlot] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
      Check(cudaMemcpy(scales.p, ones, sizeof(ones), cudaMemcpyHostToDevice), "cudaMemcpy(scales)");
      const float* a_scale = static_cast<const float*>(scales.p);
      const float* b_scale = a_scale + kSlot;
      Check(cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)),
            "A_SCALE_POINTER");
      Check(cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)),
            "B_SCALE_POINTER");
      const int8_t fast_accum = 1;
      Check(cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)),
            "FAST_ACCUM");
    }
    Check(cublasLtMatrixLayoutCreate(&o.a, c.ab_type, k, m, k), "cublasLtMatrixLayoutCreate(A)");
    Check(cublasLtMatrixLayoutCreate(&o.b, c.ab_type, k, n, k), "cublasLtMatrixLayoutCreate(B)");
    Check(cublasLtMatrixLayoutCreate(&o.d, c.d_type, m, n, m), "cublasLtMatrixLayoutCreate(D)");
    Check(cublasLtMatmulPreferenceCreate(&o.pref), "cublasLtMatmulPreferenceCreate");
    const size_t ws = kWorkspaceBytes;
    Check(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
          "PREF_MAX_WORKSPACE_BYTES");
    std::vector<cublasLtMatmulHeuristicResult_t> heuristics(static_cast<size_t>(std::max(1, max_algos)));
    int found = 0;
    Check(cublasLtMatmulAlgoGetHeuristic(lt, o.desc, o.a, o.b, o.d, o.d, o.pref, static_cast<int>(heuristics.size()),
                                         heuristics.data(), &found),
          "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0) throw Failure{"cublasLtMatmulAlgoGetHeuristic found no algorithm"};

    const float alpha = 1.0f, beta = 0.0f;
    EventPair ev;
    // Times `count` products with algorithm i, one event pair each; returns milliseconds per product.
    auto time_algo = [&](int i, int count) {
      std::vector<double> ms;
      for (int rep = 0; rep < count; ++rep) {
        Check(cudaEventRecord(ev.start, stream), "cudaEventRecord");
        Check(cublasLtMatmul(lt, o.desc, &alpha, a.p, o.a, b.p, o.b, &beta, d.p, o.d, d.p, o.d, &heuristics[i].algo,
                             workspace, kWorkspaceBytes, stream),
              "cublasLtMatmul");
        Check(cudaEventRecord(ev.stop, stream), "cudaEventRecord");
        Check(cudaEventSynchronize(ev.stop), "cudaEventSynchronize");
        float t = 0;
        Check(cudaEventElapsedTime(&t, ev.start, ev.stop), "cudaEventElapsedTime");
        ms.push_back(t);
      }
      return ms;
    };
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };

    // A short trial of each candidate (its first product is dropped: clocks ramping up, lazy
    // module loading), then the fastest is warmed up again and timed `reps` times.
    int best = -1;
    double best_trial = 0;
    bool first_ran = false;
    for (int i = 0; i < found; ++i) {
      if (heuristics[i].state != CUBLAS_STATUS_SUCCESS) continue;
      std::vector<double> trial;
      try {
        trial = time_algo(i, 4);
      } catch (const Failure&) {
        cudaGetLastError();
        continue;  // a candidate that does not run is skipped, not fatal
      }
      trial.erase(trial.begin());
      ++r.algos_tried;
      if (i == 0) first_ran = true;
      const double t = median(trial);
      if (best < 0 || t < best_trial) {
        best = i;
        best_trial = t;
      }
    }
    if (best < 0) throw Failure{"none of the heuristic's algorithms ran"};
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    time_algo(best, 3);
    std::vector<double> ms = time_algo(best, reps);
    r.median_ms = median(ms);
    r.median_gflops = flops / (r.median_ms * 1e-3) / 1e9;
    r.best_gflops = flops / (*std::min_element(ms.begin(), ms.end()) * 1e-3) / 1e9;
    r.chosen_algo = best;
    if (best == 0) {
      r.first_heuristic_median_gflops = r.median_gflops;
    } else if (first_ran) {
      r.first_heuristic_median_gflops = flops / (median(time_algo(0, std::max(3, reps / 2))) * 1e-3) / 1e9;
    }
    r.ok = true;
  } catch (const Failure& f) {
    cudaGetLastError();  // clear a non-sticky error so the next dtype starts clean
    r.error = f.message;
  }
  return r;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
  }
  return out;
}

int Usage(const char* msg) {
  std::fprintf(stderr,
               "cublaslt_matmul_rate: %s\nusage: cublaslt_matmul_rate [N] [reps] [--mnk M,N,K] "
               "[--dtypes f32,tf32,bf16,f16,fp8] [--algos A] [--device D]\n",
               msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t m = 8192, n = 8192, k = 8192;
  int reps = 20, max_algos = 8, device = 0;
  std::string dtypes = "f32,tf32,bf16,f16,fp8";
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cublaslt_matmul_rate: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--mnk") {
      long long mm = 0, nn = 0, kk = 0;
      if (std::sscanf(value("--mnk"), "%lld,%lld,%lld", &mm, &nn, &kk) != 3) return Usage("--mnk expects M,N,K");
      m = mm;
      n = nn;
      k = kk;
    } else if (arg == "--dtypes") {
      dtypes = value("--dtypes");
    } else if (arg == "--algos") {
      max_algos = std::atoi(value("--algos"));
    } else if (arg == "--device") {
      device = std::atoi(value("--device"));
    } else if (arg == "-h" || arg == "--help") {
      return Usage("times cuBLASLt matrix products");
    } else if (!arg.empty() && arg[0] != '-' && positional < 2) {
      if (positional++ == 0) {
        m = n = k = std::atoll(arg.c_str());
      } else {
        reps = std::atoi(arg.c_str());
      }
    } else {
      return Usage(("unknown argument " + arg).c_str());
    }
  }
  if (m <= 0 || n <= 0 || k <= 0 || reps <= 0 || max_algos <= 0) return Usage("sizes, reps and algos must be > 0");

  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  cudaDeviceProp prop{};
  int count = 0;
  const cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count <= device) {
    std::printf("{\"error\":\"no CUDA device %d (%s)\",\"runtime\":%d,\"driver\":%d}\n", device,
                ce != cudaSuccess ? cudaGetErrorString(ce) : "too few devices", runtime, driver);
    return 1;
  }
  cudaSetDevice(device);
  cudaGetDeviceProperties(&prop, device);
  const int sm = prop.major * 10 + prop.minor;

  cublasLtHandle_t lt = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  try {
    Check(cublasLtCreate(&lt), "cublasLtCreate");
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    Check(cudaMalloc(&workspace, kWorkspaceBytes), "cudaMalloc(workspace)");
  } catch (const Failure& f) {
    std::printf("{\"error\":\"%s\"}\n", JsonEscape(f.message).c_str());
    return 1;
  }

  std::string json = "{\"device\":\"" + JsonEscape(prop.name) + "\",\"sm\":" + std::to_string(sm) +
                     ",\"sms\":" + std::to_string(prop.multiProcessorCount) +
                     ",\"memory_bytes\":" + std::to_string(prop.totalGlobalMem) +
                     ",\"runtime\":" + std::to_string(runtime) + ",\"driver\":" + std::to_string(driver) +
                     ",\"cublaslt\":" + std::to_string(cublasLtGetVersion()) + ",\"m\":" + std::to_string(m) +
                     ",\"n\":" + std::to_string(n) + ",\"k\":" + std::to_string(k) +
                     ",\"reps\":" + std::to_string(reps) + ",\"layout\":\"TN\"";
  bool f32_ok = false;
  const std::string wanted = "," + dtypes + ",";
  for (const DtypeConfig& c : kConfigs) {
    if (wanted.find(std::string(",") + c.name + ",") == std::string::npos) continue;
    Rate r;
    if (c.fp8 && sm < 89) {
      r.error = "FP8 needs sm_89 or newer; this device is sm_" + std::to_string(sm);
    } else {
      std::fprintf(stderr, "cublaslt_matmul_rate: %s %lldx%lldx%lld ...\n", c.name, static_cast<long long>(m),
                   static_cast<long long>(n), static_cast<long long>(k));
      r = Measure(lt, stream, c, m, n, k, reps, max_algos, workspace);
    }
    if (r.ok) {
      std::fprintf(stderr, "cublaslt_matmul_rate: %s median %.1f GFLOP/s (best %.1f, algorithm %d of %d tried)\n",
                   c.name, r.median_gflops, r.best_gflops, r.chosen_algo, r.algos_tried);
      char buf[512];
      std::snprintf(buf, sizeof(buf),
                    ",\"%s\":{\"median_gflops\":%.1f,\"best_gflops\":%.1f,\"median_ms\":%.4f,"
                    "\"first_heuristic_median_gflops\":%.1f,\"algos_tried\":%d,\"chosen_algo\":%d}",
                    c.name, r.median_gflops, r.best_gflops, r.median_ms, r.first_heuristic_median_gflops, r.algos_tried,
                    r.chosen_algo);
      json += buf;
      if (std::string(c.name) == "f32") f32_ok = true;
    } else {
      std::fprintf(stderr, "cublaslt_matmul_rate: %s failed: %s\n", c.name, r.error.c_str());
      json += std::string(",\"") + c.name + "\":{\"error\":\"" + JsonEscape(r.error) + "\"}";
    }
  }
  json += "}";
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
  cudaFree(workspace);
  cudaStreamDestroy(stream);
  cublasLtDestroy(lt);
  return f32_ok || wanted.find(",f32,") == std::string::npos ? 0 : 1;
}

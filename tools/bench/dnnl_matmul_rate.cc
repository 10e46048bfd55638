// dnnl_matmul_rate: the machine's matmul rate through oneDNN (the library mpc's CPU backend
// uses), measured by tools/bench/bench.py in the same run as the model benchmarks.
//
// usage: dnnl_matmul_rate [N] [reps]      (default N = 2048, reps = 10)
// Prints one JSON object: for f32 (and bf16 inputs with f32 output, when the CPU has a
// native bf16 implementation) the median and best GFLOP/s of an N x N x N matmul primitive,
// plus oneDNN's implementation name. Threads: OpenMP's (OMP_NUM_THREADS).
//
// Built by bench.py with `g++ -O2 -std=c++17 dnnl_matmul_rate.cc -ldnnl` into build/bench/;
// it is not part of the CMake build.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dnnl.hpp"

namespace {

struct Rate {
  bool ok = false;
  double median_gflops = 0, best_gflops = 0;
  std::string impl, error;
};

Rate Measure(dnnl::engine& eng, dnnl::stream& strm, dnnl::memory::data_type in_type, int64_t n, int reps) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  Rate r;
  try {
    dnnl::memory::desc a_md({n, n}, in_type, tag::ab), b_md({n, n}, in_type, tag::ab), c_md({n, n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    r.impl = pd.impl_info_str();
    dnnl::memory a(a_md, eng), b(b_md, eng), c(c_md, eng);
    // Fill A and B through an f32 buffer and a reorder so bf16 inputs hold real values.
    dnnl::memory::desc f_md({n, n}, dt::f32, tag::ab);
    dnnl::memory fa(f_md, eng), fb(f_md, eng);
    float* pa = static_cast<float*>(fa.get_data_handle());
    float* pb = static_cast<float*>(fb.get_data_handle());
    for (int64_t i = 0; i < n * n; ++i) {
      pa[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
      pb[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    dnnl::reorder(fa, a).execute(strm, fa, a);
    dnnl::reorder(fb, b).execute(strm, fb, b);
    strm.wait();
    dnnl::matmul mm(pd);
    auto run = [&] {
      mm.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      strm.wait();
    };
    run();
    run();  // warm-up: JIT and caches
    std::vector<double> secs;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(secs.begin(), secs.end());
    const double flops = 2.0 * n * n * n;
    r.median_gflops = flops / secs[secs.size() / 2] / 1e9;
    r.best_gflops = flops / secs.front() / 1e9;
    r.ok = true;
  } catch (const dnnl::error& e) {
    r.error = e.what();
  }
  return r;
}

void Print(const char* name, const Rate& r, bool last) {
  if (r.ok) {
    std::printf("  \"%s\": {\"median_gflops\": %.1f, \"best_gflops\": %.1f, \"impl\": \"%s\"}%s\n", name,
                r.median_gflops, r.best_gflops, r.impl.c_str(), last ? "" : ",");
  } else {
    std::printf("  \"%s\": {\"error\": \"%s\"}%s\n", name, r.error.c_str(), last ? "" : ",");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 2048;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const Rate f32 = Measure(eng, strm, dnnl::memory::data_type::f32, n, reps);
  const Rate bf16 = Measure(eng, strm, dnnl::memory::data_type::bf16, n, reps);
  const dnnl_version_t* v = dnnl_version();
  std::printf("{\n  \"n\": %lld, \"reps\": %d, \"threads\": %d, \"onednn\": \"%d.%d.%d\",\n", static_cast<long long>(n),
              reps, omp_get_max_threads(), v->major, v->minor, v->patch);
  Print("f32", f32, false);
  Print("bf16", bf16, true);
  std::printf("}\n");
  return f32.ok ? 0 : 1;
}

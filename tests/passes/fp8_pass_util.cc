// The fp8 pass tests' model and pass runner (see fp8_pass_util.h).
#include "tests/passes/fp8_pass_util.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "graph/graph_builder.h"
#include "passes/autodiff.h"
#include "tests/test_util.h"

namespace mpc::fp8_testing {

Model Mlp(const std::vector<int64_t>& widths, bool with_loss, int64_t batch) {
  Model m;
  GraphBuilder b(m.g.get());
  Value* h = m.g->AddInput("x", DType::kF32, {batch, widths[0]});
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    Value* w = m.g->AddParameter("w" + std::to_string(i),
                                 testing::RandomTensor(DType::kF32, {widths[i + 1], widths[i]}, 10 + i, -0.3, 0.3));
    Value* bias =
        m.g->AddParameter("b" + std::to_string(i), testing::RandomTensor(DType::kF32, {widths[i + 1]}, 20 + i));
    AttrMap attrs;
    attrs.Set("transB", int64_t{1});
    h = b.Op("Gemm", {h, w, bias}, attrs);
    b.last_node()->name = "gemm" + std::to_string(i);
    if (i + 2 < widths.size()) h = b.Op("Relu", {h});
  }
  if (with_loss) {
    Value* labels = m.g->AddInput("labels", DType::kI64, {batch});
    m.loss = b.Op("SoftmaxCrossEntropyLoss", {h, labels});
    m.g->SetOutputs({m.loss});
  } else {
    m.g->SetOutputs({h});
  }
  EXPECT_TRUE(b.status().ok()) << b.status();
  return m;
}

absl::StatusOr<bool> PassRun::Compile(Model& m) {
  CompileResults& r = results;
  r.loss.loss = m.loss;
  if (auto s = AutocastPass(autocast, caps, &r.autocast).Run(*m.g); !s.ok()) return s.status();
  if (auto s = PadDimsPass(pad, caps, &r.pad_dims).Run(*m.g); !s.ok()) return s.status();
  if (m.loss) {
    if (auto s = AutodiffPass(&r.loss, &r.autodiff).Run(*m.g); !s.ok()) return s.status();
  }
  return Fp8Pass(fp8, caps, &r.autocast, m.loss ? &r.autodiff : nullptr, &r.fp8).Run(*m.g);
}

std::vector<std::string> PassRun::Fp8Nodes(bool forward_only) const {
  std::vector<std::string> out;
  for (const auto& d : results.fp8.gemms) {
    if (!forward_only || d.node == d.forward_node) out.push_back(d.node);
  }
  return out;
}

std::string PassRun::SkipReason(const std::string& node) const {
  for (const auto& [n, why] : results.fp8.skipped) {
    if (n == node) return why;
  }
  return "";
}

std::vector<float> QuantizeDynamicOnCpu(const Tensor& x, const std::string& granularity, int64_t axis, bool e4m3) {
  Graph g;
  Value* xv = g.AddInput("x", x.dtype(), x.shape());
  AttrMap attrs;
  attrs.Set("format", std::string(e4m3 ? "e4m3" : "e5m2"));
  attrs.Set("granularity", granularity);
  attrs.Set("axis", axis);
  auto node = g.AddNode("Fp8QuantizeDynamic", {xv}, attrs, "q");
  EXPECT_TRUE(node.ok()) << node.status();
  if (!node.ok()) return {};
  auto backend = CreateCpuBackend();
  auto kernel = backend->CreateKernel(**node);
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  if (!kernel.ok()) return {};
  Tensor xs = x;
  Tensor q(DType::kF32, x.shape());
  KernelContext ctx;
  ctx.inputs = {{xs.raw(), x.dtype(), x.shape()}};
  ctx.outputs = {{q.raw(), DType::kF32, x.shape()}};
  EXPECT_TRUE((*kernel)->Run(ctx).ok());
  return std::vector<float>(q.data<float>(), q.data<float>() + q.num_elements());
}

Floats FetchGradients(const Executor& ex, const AutodiffResult& autodiff) {
  Floats out;
  for (const auto& [param, grad] : autodiff.param_grads) {
    auto fetched = ex.Fetch(grad->name);
    EXPECT_TRUE(fetched.ok()) << fetched.status();
    if (!fetched.ok()) continue;
    const Tensor t = fetched->CastTo(DType::kF32);
    out[param->name] = std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
  }
  return out;
}

Floats ReadFp8State(const Executor& ex, const Fp8Result& fp8) {
  Floats out;
  for (const std::string& tensor : fp8.tensors) {
    for (const char* suffix : {".fp8_scale", ".fp8_scale_inv", ".fp8_amax_history", ".fp8_last_amax"}) {
      auto t = ex.ReadPersistent(tensor + suffix);
      EXPECT_TRUE(t.ok()) << t.status();
      if (t.ok()) out[tensor + suffix] = std::vector<float>(t->data<float>(), t->data<float>() + t->num_elements());
    }
  }
  return out;
}

double RelativeRms(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace mpc::fp8_testing

// What torch.onnx.export emits for PyTorch's own attention modules imports and runs:
// nn.MultiheadAttention with a causal boolean mask, without a mask but with the averaged
// attention weights as a second output, and a whole nn.TransformerEncoderLayer (GELU,
// LayerNorm, causal mask). `mpc run` on each export matches PyTorch's output in f32
// (||mpc - torch|| / ||torch|| < 1e-5) and, under bf16 autocast, within 1e-2.
// Cases and PyTorch's outputs: tests/golden/make_attention_cases.py, run at test time.
#include <cstdio>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/dataset.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

struct AttentionCase {
  std::string name;
  int outputs;
};

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

class AttentionExportTest : public ::testing::TestWithParam<AttentionCase> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir("attention_export"));
    const auto r = testing::RunCommand(absl::StrCat(
        testing::Python(), " ", testing::SourcePath("tests/golden/make_attention_cases.py"), " --out ", *dir_));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static std::string* dir_;
};
std::string* AttentionExportTest::dir_ = nullptr;

TEST_P(AttentionExportTest, MpcRunMatchesPyTorch) {
  const AttentionCase& c = GetParam();
  const std::string dir = absl::StrCat(*dir_, "/", c.name);
  for (const std::string precision : {"f32", "bf16"}) {
    const std::string out = absl::StrCat(dir, "/out_", precision);
    const auto r = testing::RunCommand(absl::StrCat(MPC_TOOL_BIN, " run --model ", dir, "/model.onnx --input x=", dir,
                                                    "/x.npy --precision ", precision, " --output-dir ", out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (int i = 0; i < c.outputs; ++i) {
      auto got = ReadNpy(absl::StrCat(out, "/y", i, ".npy"));
      auto want = ReadNpy(absl::StrCat(dir, "/expected_y", i, ".npy"));
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(got->shape(), want->shape()) << c.name << " output " << i;
      const double rel = testing::RelativeError(got->CastTo(DType::kF32), *want);
      std::printf("%s %s y%d: ||mpc - torch|| / ||torch|| = %.2e\n", c.name.c_str(), precision.c_str(), i, rel);
      EXPECT_LT(rel, precision == "f32" ? 1e-5 : 1e-2) << c.name << " " << precision << " output " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modules, AttentionExportTest,
                         ::testing::Values(AttentionCase{"mha_causal", 1}, AttentionCase{"mha_nomask", 2},
                                           AttentionCase{"encoder_layer", 1}),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mpc

// Learning-rate schedules against PyTorch's schedulers: every step of every case in
// tests/golden/schedules/ (written by tests/golden/make_schedule_golden.py from
// torch.optim.lr_scheduler) must come out of LearningRateAt within 1e-6 relative.
#include "engine/lr_schedule.h"

#include <google/protobuf/text_format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

struct GoldenCase {
  std::string schedule_text;  // "warmup_cosine { ... }"
  double lr = 0;
  int64_t steps = 0;
  std::vector<double> rates;
};

// Header: "# schedule { <text> } lr <lr> steps <n> (torch ...)"; then "<step> <rate>" lines.
GoldenCase ReadCase(const std::string& path) {
  GoldenCase c;
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  const size_t open = header.find("schedule { "), close = header.rfind(" } lr ");
  EXPECT_TRUE(open != std::string::npos && close != std::string::npos) << path << ": " << header;
  c.schedule_text = header.substr(open + 11, close - open - 11);
  std::istringstream rest(header.substr(close + 6));
  std::string steps_word;
  rest >> c.lr >> steps_word >> c.steps;
  int64_t step;
  double rate;
  while (in >> step >> rate) {
    EXPECT_EQ(step, static_cast<int64_t>(c.rates.size())) << path;
    c.rates.push_back(rate);
  }
  EXPECT_EQ(static_cast<int64_t>(c.rates.size()), c.steps) << path;
  return c;
}

TEST(LrScheduleTest, EveryScheduleMatchesPyTorchAtEveryStep) {
  const std::string dir = testing::SourcePath("tests/golden/schedules");
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".txt") continue;
    const GoldenCase c = ReadCase(entry.path().string());
    SCOPED_TRACE(entry.path().filename().string() + ": " + c.schedule_text);
    TrainSpec spec;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        absl::StrCat("optimizer { sgd { lr: ", c.lr, " } } schedule { ", c.schedule_text, " }"), &spec));
    for (int64_t s = 0; s < c.steps; ++s) {
      const double got = LearningRateAt(spec, s, c.steps), want = c.rates[s];
      ASSERT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-12) << "step " << s;
    }
    ++cases;
  }
  EXPECT_GE(cases, 5);  // constant, warmup_cosine, warmup_linear (with and without warmup), step_decay
}

}  // namespace
}  // namespace mpc

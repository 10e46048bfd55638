// engine/tensorboard_writer.h on its own: the event file's name, its TFRecord framing and
// CRCs, the file-version event first, scalars as float32 with their steps and tags (also
// for StepMetrics and EvalMetrics), every record on disk while the writer is still open,
// and errors that name the directory.
#include "engine/tensorboard_writer.h"

#include "absl/strings/str_cat.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "base/crc32c.h"
#include "gtest/gtest.h"
#include "proto/tensorboard_event.pb.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// Every event of a file, checking the framing and both masked CRCs of each record.
std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), {});
  std::vector<tensorboard::Event> events;
  size_t pos = 0;
  while (pos < data.size()) {
    EXPECT_GE(data.size() - pos, 16u) << "truncated record at byte " << pos;
    if (data.size() - pos < 16) break;
    const uint64_t length = LittleEndian(data, pos, 8);
    EXPECT_EQ(LittleEndian(data, pos + 8, 4), MaskCrc32c(Crc32c(data.substr(pos, 8)))) << "at byte " << pos;
    EXPECT_LE(pos + 16 + length, data.size());
    if (pos + 16 + length > data.size()) break;
    const std::string body = data.substr(pos + 12, length);
    EXPECT_EQ(LittleEndian(data, pos + 12 + length, 4), MaskCrc32c(Crc32c(body))) << "at byte " << pos;
    tensorboard::Event event;
    EXPECT_TRUE(event.ParseFromString(body));
    events.push_back(event);
    pos += 16 + length;
  }
  return events;
}

std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    // TensorBoard reads the files whose name contains "tfevents" (not the writer's lock).
    if (entry.path().filename().string().find("tfevents") != std::string::npos) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(TensorBoardWriterTest, WritesFramedScalarEventsAfterTheFileVersion) {
  const std::string dir = testing::MakeTempDir("tb_writer") + "/nested/run";  // created by Open
  const double before = static_cast<double>(::time(nullptr));
  auto writer = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::vector<std::string> files = EventFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], (*writer)->path());
  EXPECT_TRUE(std::regex_match(std::filesystem::path(files[0]).filename().string(),
                               std::regex(std::string("events\\.out\\.tfevents\\.[0-9]+\\.") + host)))
      << files[0];

  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> value(-1e3, 1e3);
  std::vector<std::pair<int64_t, double>> written;
  for (int i = 0; i < 20; ++i) {
    const int64_t step = static_cast<int64_t>(rng() % 100000);
    const double v = i == 0 ? 0.0 : value(rng);  // 0 too: it must still be written
    written.emplace_back(step, v);
    ASSERT_TRUE((*writer)->WriteScalar("train/x", step, v).ok());
  }
  // Read while the writer is open: every record must already be on disk.
  const std::vector<tensorboard::Event> events = ReadEvents(files[0]);
  ASSERT_EQ(events.size(), written.size() + 2);
  EXPECT_EQ(events[0].what_case(), tensorboard::Event::kFileVersion);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  // Where this run starts (Open's default, step 1): TensorBoard drops what earlier files
  // logged from there on.
  EXPECT_EQ(events[1].what_case(), tensorboard::Event::kSessionLog);
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 1);
  for (size_t i = 0; i < written.size(); ++i) {
    const tensorboard::Event& e = events[i + 2];
    ASSERT_EQ(e.what_case(), tensorboard::Event::kSummary);
    EXPECT_GE(e.wall_time(), before);
    EXPECT_EQ(e.step(), written[i].first);
    ASSERT_EQ(e.summary().value_size(), 1);
    EXPECT_EQ(e.summary().value(0).tag(), "train/x");
    EXPECT_EQ(e.summary().value(0).value_case(), tensorboard::Summary::Value::kSimpleValue);
    EXPECT_EQ(e.summary().value(0).simple_value(), static_cast<float>(written[i].second));
  }
}

TEST(TensorBoardWriterTest, StepAndEvalMetricsBecomeTheirTags) {
  const std::string dir = testing::MakeTempDir("tb_writer_metrics");
  auto writer = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  StepMetrics s;
  s.step = 7;
  s.loss = 2.5;
  s.lr = 1e-3;
  s.loss_scale = 512;
  s.skipped = true;
  s.fp8 = {{"w.amax", 3.0}, {"w.scale", 0.25}};
  TensorStats t;
  t.tensor = "g";
  t.amax = 4;
  t.zero_fraction = 0.5;
  t.nonfinite = 2;
  s.tensor_stats = {t};
  ASSERT_TRUE((*writer)->WriteStep(s).ok());
  s.step = 8;
  ASSERT_TRUE((*writer)->WriteStep(s).ok());
  EvalMetrics m;
  m.step = 8;
  m.loss = 1.25;
  m.accuracy = 0.75;
  m.macro_f1 = 0.5;
  ASSERT_TRUE((*writer)->WriteEval(m).ok());

  const std::vector<tensorboard::Event> events = ReadEvents((*writer)->path());
  ASSERT_EQ(events.size(), 5u);  // file version, session start, 3 records
  auto values = [&](int i) {
    std::map<std::string, float> out;
    for (const auto& v : events[i].summary().value()) out[v.tag()] = v.simple_value();
    return out;
  };
  // No grad_norm (not clipping), no subnormal_fraction (-1), no top_k/perplexity (-1).
  const std::map<std::string, float> step7 = {
      {"train/loss", 2.5f},       {"train/lr", 1e-3f},           {"train/loss_scale", 512.0f},
      {"train/skipped", 1.0f},    {"train/skipped_total", 1.0f}, {"fp8/w.amax", 3.0f},
      {"fp8/w.scale", 0.25f},     {"stats/g/amax", 4.0f},        {"stats/g/zero_fraction", 0.5f},
      {"stats/g/nonfinite", 2.0f}};
  EXPECT_EQ(values(2), step7);
  EXPECT_EQ(events[2].step(), 7);
  EXPECT_EQ(values(3).at("train/skipped_total"), 2.0f);  // a running count
  const std::map<std::string, float> eval = {{"eval/loss", 1.25f}, {"eval/accuracy", 0.75f}, {"eval/macro_f1", 0.5f}};
  EXPECT_EQ(values(4), eval);
  EXPECT_EQ(events[4].step(), 8);
}

// A resumed run's writer starts its session at the step it resumes from, so TensorBoard
// drops what the earlier file logged there and after (the crashed run's steps past its
// last checkpoint).
TEST(TensorBoardWriterTest, AResumedRunsFileStartsItsSessionAtItsFirstStep) {
  const std::string dir = testing::MakeTempDir("tb_writer_resume");
  auto writer = TensorBoardWriter::Open(dir, 7);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::vector<tensorboard::Event> events = ReadEvents((*writer)->path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 7);
}

// One writer per directory (engine/output_lock.h): a second one while the first is open
// is refused naming it; once the first is closed the next gets its own file (a numbered
// one within the same second) and the first's stays as it was.
TEST(TensorBoardWriterTest, ASecondWriterWaitsForTheFirstAndKeepsItsOwnFile) {
  const std::string dir = testing::MakeTempDir("tb_writer_two");
  auto a = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->WriteScalar("a", 1, 1).ok());
  auto refused = TensorBoardWriter::Open(dir);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find(absl::StrCat("in use by another run (pid ", ::getpid())),
            std::string::npos)
      << refused.status();
  const std::string first = (*a)->path();
  a->reset();
  auto b = TensorBoardWriter::Open(dir);  // most likely the same second
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*b)->path(), first);
  ASSERT_TRUE((*b)->WriteScalar("b", 1, 2).ok());
  EXPECT_EQ(ReadEvents(first).size(), 3u);  // file version, session start, its scalar
  EXPECT_EQ(ReadEvents((*b)->path()).size(), 3u);
}

TEST(TensorBoardWriterTest, ADirectoryThatCannotBeCreatedIsAnErrorNamingIt) {
  const std::string dir = testing::MakeTempDir("tb_writer_bad");
  const std::string file = dir + "/plain_file";
  std::ofstream(file) << "not a directory";
  auto writer = TensorBoardWriter::Open(file + "/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(std::string(writer.status().message()).find(file + "/tb"), std::string::npos) << writer.status();
  EXPECT_NE(std::string(writer.status().message()).find("--tensorboard"), std::string::npos) << writer.status();
}

}  // namespace
}  // namespace mpc

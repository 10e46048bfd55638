// base/crc32c.h: CRC-32C against its published check values (the standard "123456789"
// check and RFC 3720's iSCSI vectors), against a bit-at-a-time reference on fresh random
// bytes, in pieces, and the TFRecord mask.
#include "base/crc32c.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace mpc {
namespace {

// The definition, one bit at a time: what the table must reproduce.
uint32_t BitwiseCrc32c(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0);
  }
  return ~crc;
}

TEST(Crc32cTest, StandardCheckValue) { EXPECT_EQ(Crc32c("123456789"), 0xE3069283u); }

TEST(Crc32cTest, IscsiTestVectors) {
  // RFC 3720, appendix B.4.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MatchesTheBitwiseDefinitionAndExtendsInPieces) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    std::string data(rng() % 600, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    SCOPED_TRACE(::testing::Message() << "size " << data.size());
    const uint32_t whole = Crc32c(data);
    EXPECT_EQ(whole, BitwiseCrc32c(data));
    const size_t cut = data.empty() ? 0 : rng() % data.size();
    EXPECT_EQ(Crc32cExtend(Crc32c(data.substr(0, cut)), data.data() + cut, data.size() - cut), whole);
  }
}

TEST(Crc32cTest, MaskRotatesAndAddsTheTfRecordDelta) {
  EXPECT_EQ(MaskCrc32c(0), 0xA282EAD8u);
  // 0x00008000 rotated right by 15 is 1.
  EXPECT_EQ(MaskCrc32c(0x00008000u), 0xA282EAD9u);
  // The check value masked: rotated to 0x2507C60D, plus the delta (mod 2^32).
  EXPECT_EQ(MaskCrc32c(0xE3069283u), 0xC78AB0E5u);
}

}  // namespace
}  // namespace mpc

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"

namespace strata {
namespace {

TEST(Units, ParsesHumanSizes) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("16G"), 16ull << 30);
  EXPECT_EQ(parse_bytes("16GB"), 16ull << 30);
  EXPECT_EQ(parse_bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1.5T"), 3ull << 39);
  EXPECT_EQ(parse_bytes("200g"), 200ull << 30);
  EXPECT_EQ(parse_bytes(" 8K "), 8192u);
}

TEST(Units, RejectsGarbageWithTheValue) {
  for (const char* bad : {"", "G", "12X", "-3G", "1.2.3G", "16Gb2"}) {
    try {
      parse_bytes(bad, "--gpu-mem");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--gpu-mem"), std::string::npos) << e.what();
    }
  }
}

TEST(Units, Formats) {
  EXPECT_EQ(format_bytes(812), "812B");
  EXPECT_EQ(format_bytes(21.3 * (1ull << 30)), "21.3G");
  EXPECT_EQ(format_bytes(1.5 * (1ull << 40)), "1.50T");
}

}  // namespace
}  // namespace strata

#include "tessera/core/split_commas.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(SplitCommas, KeepsEveryPartEmptyOnesToo) {
  EXPECT_EQ(split_commas("h100,b200"), (std::vector<std::string>{"h100", "b200"}));
  EXPECT_EQ(split_commas("1024"), (std::vector<std::string>{"1024"}));
  EXPECT_EQ(split_commas("a,,b,"), (std::vector<std::string>{"a", "", "b", ""}));
  EXPECT_EQ(split_commas(""), (std::vector<std::string>{""}));
}

}  // namespace
}  // namespace tessera

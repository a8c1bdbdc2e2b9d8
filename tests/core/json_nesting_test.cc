#include "tessera/core/json_nesting.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(JsonNesting, CountsArraysAndObjectsButNotBracketsInStrings) {
  EXPECT_EQ(json_nesting_depth("1", 10), 0);
  EXPECT_EQ(json_nesting_depth("[1, [2], {\"a\": [3]}]", 10), 3);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{", "b": "\"[[["})", 10), 1);
  EXPECT_EQ(json_nesting_depth(R"(["\\", [[]]])", 10), 3);  // an escaped backslash ends no string
}

TEST(JsonNesting, StopsAtTheLimit) {
  const std::string deep = std::string(1000000, '[');
  EXPECT_EQ(json_nesting_depth(deep, 32), 33);
  EXPECT_EQ(json_nesting_depth(std::string(32, '[') + std::string(32, ']'), 32), 32);
  // Stray closers never make the depth negative.
  EXPECT_EQ(json_nesting_depth("]]]][[", 32), 2);
}

}  // namespace
}  // namespace tessera

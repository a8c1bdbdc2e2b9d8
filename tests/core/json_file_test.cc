// JSON files are outside input: read_json_file refuses one too large or too deeply nested before
// parsing it, naming the file, and reads one at the bounds.
#include "tessera/core/json_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(JsonFile, DeepNestingIsRefusedBeforeParsing) {
  const fs::path dir = testing::fresh_test_dir("tessera-json-file");
  const fs::path deep = dir / "deep.json", limit = dir / "limit.json";
  std::ofstream(deep) << std::string(200000, '[') << std::string(200000, ']');
  testing::expect_error([&] { read_json_file(deep, "the config"); },
                        {deep.string(), "nest more than 64", "the config"});
  std::ofstream(limit) << std::string(kMaxJsonFileNesting, '[')
                       << std::string(kMaxJsonFileNesting, ']');
  EXPECT_TRUE(read_json_file(limit).is_array());
}

TEST(JsonFile, AFileLargerThanTheBoundIsRefusedUnread) {
  const fs::path dir = testing::fresh_test_dir("tessera-json-file");
  const fs::path big = dir / "big.json";
  std::ofstream(big) << "{}";
  fs::resize_file(big, uintmax_t(kMaxJsonFileBytes) + 1);  // sparse: nothing is written
  testing::expect_error([&] { read_json_file(big); },
                        {big.string(), "more than the 268435456 a JSON file may hold"});
}

}  // namespace
}  // namespace tessera

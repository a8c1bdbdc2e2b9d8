#include "tessera/ckpt/manifest.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/core/arena.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `j` with its manifest_crc32 made to match the rest of it, as a writer leaves it.
json sealed(json j) {
  j[kManifestChecksumKey] = manifest_checksum(j);
  return j;
}

json valid_manifest() {
  return sealed(json::parse(R"({
    "format": "tessera-checkpoint", "version": 2, "step": 5, "world_size": 1,
    "metadata": {"model": "tiny"},
    "tensors": [
      {"name": "w", "shape": [2, 3], "dtype": "f32", "file": "rank-00000.bin",
       "offset": 0, "nbytes": 24, "crc32": 123},
      {"name": "b", "shape": [3], "dtype": "bf16", "file": "rank-00000.bin",
       "offset": 64, "nbytes": 6, "crc32": 4294967295}
    ]})"));
}

// The one-line message parse_manifest gives, or a note that it accepted the manifest.
std::string error_for(const json& j) {
  try {
    parse_manifest(j, "run/step-000005/manifest.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "<accepted>";
}

TEST(Manifest, ParsesAValidManifestAndRoundTripsThroughJson) {
  Manifest m = parse_manifest(valid_manifest(), "manifest.json");
  EXPECT_EQ(m.step, 5);
  EXPECT_EQ(m.metadata["model"], "tiny");
  ASSERT_EQ(m.tensors.size(), 2u);
  EXPECT_EQ(m.tensors[0].shape, (Shape{2, 3}));
  EXPECT_EQ(m.tensors[1].dtype, DType::bf16);
  EXPECT_EQ(m.tensors[1].offset, 64u);
  EXPECT_EQ(m.tensors[1].crc32, 0xffffffffu);
  EXPECT_EQ(manifest_to_json(m), valid_manifest());
}

struct BadCase {
  const char* what;
  std::function<void(json&)> edit;
  const char* field;  // the error must name it
};

TEST(Manifest, NamesTheFileAndFieldOfEveryStructuralError) {
  const std::vector<BadCase> cases = {
      {"not an object", [](json& j) { j = json::array(); }, "object"},
      {"missing tensors", [](json& j) { j.erase("tensors"); }, "'tensors'"},
      {"missing step", [](json& j) { j.erase("step"); }, "'step'"},
      {"missing metadata", [](json& j) { j.erase("metadata"); }, "'metadata'"},
      {"wrong format", [](json& j) { j["format"] = "safetensors"; }, "'format'"},
      {"old version", [](json& j) { j["version"] = 1; }, "'version'"},
      {"future version", [](json& j) { j["version"] = 3; }, "'version'"},
      {"missing checksum", [](json& j) { j.erase(kManifestChecksumKey); }, "'manifest_crc32'"},
      {"string step", [](json& j) { j["step"] = "5"; }, "'step'"},
      {"float step", [](json& j) { j["step"] = 5.5; }, "'step'"},
      {"negative step", [](json& j) { j["step"] = -1; }, "'step'"},
      {"no ranks", [](json& j) { j["world_size"] = 0; }, "'world_size'"},
      {"tensors not array", [](json& j) { j["tensors"] = json::object(); }, "'tensors'"},
      {"entry not object", [](json& j) { j["tensors"][0] = 3; }, "'tensors[0]'"},
      {"missing name", [](json& j) { j["tensors"][1].erase("name"); }, "'tensors[1].name'"},
      {"string offset", [](json& j) { j["tensors"][0]["offset"] = "0"; }, "'tensors[0].offset'"},
      {"negative offset", [](json& j) { j["tensors"][0]["offset"] = -64; }, "'tensors[0].offset'"},
      {"shape not array", [](json& j) { j["tensors"][0]["shape"] = 6; }, "'tensors[0].shape'"},
      {"negative dim",
       [](json& j) {
         j["tensors"][0]["shape"] = {2, -3};
       },
       "'tensors[0].shape[1]'"},
      {"rank 5",
       [](json& j) {
         j["tensors"][0]["shape"] = {1, 1, 1, 1, 1};
       },
       "'tensors[0].shape'"},
      {"unknown dtype", [](json& j) { j["tensors"][0]["dtype"] = "f64"; }, "'tensors[0].dtype'"},
      {"escaping file", [](json& j) { j["tensors"][0]["file"] = "../../etc/passwd"; },
       "'tensors[0].file'"},
      {"nbytes disagree", [](json& j) { j["tensors"][0]["nbytes"] = 20; }, "'tensors[0].nbytes'"},
      {"offset overflows", [](json& j) { j["tensors"][0]["offset"] = UINT64_MAX; },
       "'tensors[0].offset'"},
      {"crc too wide", [](json& j) { j["tensors"][0]["crc32"] = uint64_t{1} << 32; },
       "'tensors[0].crc32'"},
      {"duplicate name", [](json& j) { j["tensors"][1]["name"] = "w"; }, "'tensors[1].name'"},
  };
  for (const BadCase& c : cases) {
    json j = valid_manifest();
    c.edit(j);
    // Resealed, so the check behind the checksum is the one that speaks.
    if (j.is_object() && j.contains(kManifestChecksumKey)) j = sealed(j);
    std::string message = error_for(j);
    EXPECT_NE(message.find("run/step-000005/manifest.json"), std::string::npos)
        << c.what << ": " << message;
    EXPECT_NE(message.find(c.field), std::string::npos) << c.what << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.what << ": " << message;
  }
}

TEST(Manifest, ReadingBadJsonOrAMissingFileNamesManifestJson) {
  fs::path dir = fs::temp_directory_path() / fmt::format("tessera-manifest-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto error_reading = [&] {
    try {
      read_manifest(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  std::string missing = error_reading();
  EXPECT_NE(missing.find("manifest.json"), std::string::npos) << missing;

  std::ofstream(dir / "manifest.json") << "{\"format\": \"tessera-checkpoint\",\n \"step\": ";
  std::string bad_json = error_reading();
  EXPECT_NE(bad_json.find("manifest.json: not valid JSON"), std::string::npos) << bad_json;
  EXPECT_EQ(bad_json.find('\n'), std::string::npos) << bad_json;

  std::ofstream(dir / "manifest.json") << R"({"format": "tessera-checkpoint", "version": 2})";
  std::string missing_field = error_reading();
  EXPECT_NE(missing_field.find("manifest.json: missing field 'manifest_crc32'"), std::string::npos)
      << missing_field;
  fs::remove_all(dir);
}

TEST(Manifest, LoadRejectsACommittedStepWithAMalformedManifest) {
  fs::path run = fs::temp_directory_path() / fmt::format("tessera-manifest-load-{}", ::getpid());
  fs::remove_all(run);
  Arena arena(1024);
  Tensor w = arena.allocate({4}, DType::f32);
  fs::path dir = save(run, 1, {{"w", w}}, json::object(), 0);
  json j = json::parse(std::ifstream(dir / "manifest.json"));
  j["tensors"][0]["nbytes"] = "16";
  std::ofstream(dir / "manifest.json", std::ios::trunc) << sealed(j).dump();
  try {
    load(dir, {{"w", w}});
    ADD_FAILURE() << "load accepted a malformed manifest";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("manifest.json: field 'tensors[0].nbytes'"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(run);
}

}  // namespace
}  // namespace tessera::ckpt

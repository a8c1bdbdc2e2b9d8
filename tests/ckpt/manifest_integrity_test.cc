// A manifest changed after it was written is refused, and the refusal names manifest.json: the
// manifest carries its own checksum, checked before anything in it is used, and its step must be
// the one its folder is named for.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/manifest.h"
#include "tessera/core/arena.h"
#include "tessera/core/text_corpus.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;

class ManifestIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = testing::fresh_test_dir("tessera-manifest-integrity");
    for (int i = 0; i < w_.numel(); ++i) w_.as<float>()[i] = 0.5f * float(i);
    for (int i = 0; i < b_.numel(); ++i) b_.as<float>()[i] = -1.0f * float(i);
    step_dir_ = save(run_, 3, tensors(), metadata(), 0);
  }
  void TearDown() override { fs::remove_all(run_); }

  std::vector<NamedTensor> tensors() { return {{"w", w_}, {"b", b_}}; }
  static json metadata() {
    return {{"samples_consumed", 12}, {"optimizer_steps", 3}, {"lr", 3e-3}, {"scale", 65536.0}};
  }

  // Replaces the one occurrence of `from` in manifest.json by `to`, as a stray edit would.
  void edit_manifest(const std::string& from, const std::string& to) {
    const fs::path path = step_dir_ / kManifestFile;
    std::string text = read_text_file(path);
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in " << text;
    ASSERT_EQ(text.find(from, at + 1), std::string::npos) << from << " twice in " << text;
    write_text_file(path, text.replace(at, from.size(), to));
  }

  // Every refusal names manifest.json as the file at fault, never the data file.
  void expect_manifest_refused() {
    const std::string manifest = (step_dir_ / kManifestFile).string();
    std::vector<NamedTensor> into = {{"w", arena_.allocate({4, 3}, DType::f32)},
                                     {"b", arena_.allocate({3}, DType::f32)}};
    for (const auto& attempt : std::vector<std::function<void()>>{[&] { read_manifest(step_dir_); },
                                                                  [&] { load(step_dir_, into); }}) {
      std::string message;
      try {
        attempt();
      } catch (const Error& e) {
        message = e.what();
      }
      EXPECT_NE(message.find(manifest + ": checksum mismatch"), std::string::npos) << message;
      EXPECT_NE(message.find("the manifest is corrupted"), std::string::npos) << message;
      EXPECT_EQ(message.find("rank-00000.bin"), std::string::npos) << message;
    }
  }

  Arena arena_{1 << 16};
  Tensor w_ = arena_.allocate({4, 3}, DType::f32);
  Tensor b_ = arena_.allocate({3}, DType::f32);
  fs::path run_, step_dir_;
};

TEST_F(ManifestIntegrity, AnIntactManifestLoadsWhateverItsWhitespace) {
  const json j = json::parse(read_text_file(step_dir_ / kManifestFile));
  EXPECT_EQ(j[kManifestChecksumKey], manifest_checksum(j));
  write_text_file(step_dir_ / kManifestFile, j.dump(7));
  const Manifest m = read_manifest(step_dir_);
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.metadata, metadata());
  std::vector<NamedTensor> into = {{"w", arena_.allocate({4, 3}, DType::f32)},
                                   {"b", arena_.allocate({3}, DType::f32)}};
  load(step_dir_, into);
  EXPECT_EQ(into[0].tensor.as<float>()[5], 2.5f);
}

TEST_F(ManifestIntegrity, AChangedStepIsRefused) {
  edit_manifest("\"step\": 3", "\"step\": 4");
  expect_manifest_refused();
}

TEST_F(ManifestIntegrity, AChangedSamplesConsumedIsRefused) {
  edit_manifest("\"samples_consumed\": 12", "\"samples_consumed\": 13");
  expect_manifest_refused();
}

TEST_F(ManifestIntegrity, AChangedOptimizerStepsIsRefused) {
  edit_manifest("\"optimizer_steps\": 3", "\"optimizer_steps\": 2");
  expect_manifest_refused();
}

TEST_F(ManifestIntegrity, AFlippedTensorCrcIsBlamedOnTheManifest) {
  const Manifest m = read_manifest(step_dir_);
  const std::string crc = std::to_string(m.tensors[1].crc32);
  edit_manifest("\"crc32\": " + crc, "\"crc32\": " + std::to_string(m.tensors[1].crc32 ^ 4));
  expect_manifest_refused();
}

TEST_F(ManifestIntegrity, AFlippedTensorOffsetIsBlamedOnTheManifest) {
  const Manifest m = read_manifest(step_dir_);
  ASSERT_EQ(m.tensors[1].offset, 64u);
  edit_manifest("\"offset\": 64", "\"offset\": 0");
  expect_manifest_refused();
}

TEST_F(ManifestIntegrity, AChangedChecksumIsRefused) {
  const json j = json::parse(read_text_file(step_dir_ / kManifestFile));
  const std::string crc = std::to_string(j[kManifestChecksumKey].get<uint32_t>());
  edit_manifest("\"manifest_crc32\": " + crc, "\"manifest_crc32\": 1" + crc);
  expect_manifest_refused();
}

TEST_F(ManifestIntegrity, AStepMustMatchItsFolder) {
  const fs::path moved = run_ / step_dir_name(5);
  fs::rename(step_dir_, moved);
  const std::string manifest = (moved / kManifestFile).string();
  expect_error([&] { read_manifest(moved); },
               {manifest, "field 'step' is 3", "the folder is step-000005"});
  expect_error([&] { load(moved, tensors()); }, {manifest, "field 'step' is 3"});
  // A folder of any other name (a copy kept aside) is not held to a step.
  const fs::path aside = run_ / "kept";
  fs::rename(moved, aside);
  EXPECT_EQ(read_manifest(aside).step, 3);
}

}  // namespace
}  // namespace tessera::ckpt

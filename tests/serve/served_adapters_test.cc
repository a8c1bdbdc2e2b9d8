#include "tessera/serve/served_adapters.h"

#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tests/model/small_configs.h"

namespace tessera::serve {
namespace {

model::ModelConfig base_config() { return model::small_configs(8).llama; }

model::ModelConfig adapted(int64_t rank) {
  model::ModelConfig c = base_config();
  c.lora = {.rank = rank, .alpha = 2.0 * double(rank), .targets = "attention"};
  return c;
}

std::vector<float> adapter_values(const model::ModelConfig& c) {
  const model::ModelLayout layout = model::model_layout(c);
  return std::vector<float>(size_t(layout.params.total() - layout.adapters_begin), 0.5f);
}

TEST(ServedAdapters, LoadsIntoFreeSlotsByName) {
  ServedAdapters adapters(base_config(), 2, 4, 16);
  adapters.load("a", adapted(2), adapter_values(adapted(2)));
  adapters.load("b", adapted(4), adapter_values(adapted(4)));
  EXPECT_EQ(adapters.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(adapters.serves("b"));
  EXPECT_FALSE(adapters.serves("c"));
  EXPECT_TRUE(adapters.bank().holds(0) && adapters.bank().holds(1));
  const auto a = adapters.lease("a"), b = adapters.lease("b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->slot, 0);
  EXPECT_EQ(b->slot, 1);
  EXPECT_NE(a->key, b->key);
  EXPECT_EQ(adapters.lease("c"), nullptr);
}

TEST(ServedAdapters, RefusesWhatDoesNotFit) {
  ServedAdapters adapters(base_config(), 1, 2, 16);
  testing::expect_error([&] { adapters.load("big", adapted(4), adapter_values(adapted(4))); },
                        {"rank 4"});
  testing::expect_error([&] { adapters.load("has space", adapted(2), adapter_values(adapted(2))); },
                        {"name"});
  testing::expect_error([&] { adapters.load("base:x", adapted(2), adapter_values(adapted(2))); },
                        {"colons"});
  model::ModelConfig other = adapted(2);
  other.n_layer = 3;
  testing::expect_error([&] { adapters.load("other", other, adapter_values(other)); },
                        {"another model"});
  adapters.load("a", adapted(2), adapter_values(adapted(2)));
  testing::expect_error([&] { adapters.load("a", adapted(2), adapter_values(adapted(2))); },
                        {"already served"});
  testing::expect_error([&] { adapters.load("b", adapted(2), adapter_values(adapted(2))); },
                        {"--max-loras"});
  // A failed load leaves its slot free.
  EXPECT_TRUE(adapters.unload("a"));
  adapters.load("b", adapted(2), adapter_values(adapted(2)));
  EXPECT_EQ(adapters.names(), std::vector<std::string>{"b"});
}

// Adapters on a mixture's experts are served merged into their run, not per request.
TEST(ServedAdapters, ExpertAdaptersAreRefusedByName) {
  model::ModelConfig moe = model::small_configs(8).moe;
  ServedAdapters adapters(moe, 1, 4, 16);
  moe.lora = {.rank = 2, .alpha = 4, .targets = "attention,experts"};
  testing::expect_error([&] { adapters.load("e", moe, adapter_values(moe)); },
                        {"experts", "merged"});
  moe.lora.targets = "attention";
  adapters.load("a", moe, adapter_values(moe));
}

TEST(ServedAdapters, AnUnloadedAdapterStaysUntilItsLastRequestEnds) {
  ServedAdapters adapters(base_config(), 1, 2, 16);
  adapters.load("a", adapted(2), adapter_values(adapted(2)));
  std::shared_ptr<const AdapterLease> running = adapters.lease("a");
  const uint64_t first_key = running->key;
  EXPECT_TRUE(adapters.unload("a"));
  EXPECT_FALSE(adapters.unload("a"));
  EXPECT_FALSE(adapters.serves("a"));
  EXPECT_EQ(adapters.lease("a"), nullptr);
  EXPECT_TRUE(adapters.names().empty());
  EXPECT_TRUE(adapters.bank().holds(0)) << "the running request still reads its adapter";
  testing::expect_error([&] { adapters.load("b", adapted(2), adapter_values(adapted(2))); },
                        {"--max-loras"});
  running.reset();
  EXPECT_FALSE(adapters.bank().holds(0));
  adapters.load("a", adapted(2), adapter_values(adapted(2)));
  const auto again = adapters.lease("a");
  EXPECT_EQ(again->slot, 0);
  EXPECT_NE(again->key, first_key) << "a new load's prefix cache must not meet the last one's";
}

TEST(ServedAdapters, NamesAPathThatHoldsNoAdapter) {
  ServedAdapters adapters(base_config(), 1, 2, 16);
  testing::expect_error([&] { adapters.load("a", std::filesystem::path("/nonexistent/adapter")); },
                        {"/nonexistent/adapter"});
  EXPECT_TRUE(adapters.names().empty());
  adapters.load("a", adapted(2), adapter_values(adapted(2)));
}

}  // namespace
}  // namespace tessera::serve

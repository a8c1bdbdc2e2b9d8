// A rank's spans written as a Chrome trace: the JSON object format Perfetto's UI opens, gzipped,
// with one complete event per span on the rank's process and the recording thread.
#include "tessera/obs/chrome_trace.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tests/test_dir.h"

namespace tessera::obs {
namespace {

std::string gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = uInt(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

TEST(ChromeTrace, SpansOfTwoThreadsBecomeCompleteEventsOfTheRanksProcess) {
  trace::Recorder& recorder = trace::Recorder::instance();
  recorder.start(16);
  {
    const trace::Span step("optimizer", "step");
    const trace::Span block("block {} forward", "compute", 3);
  }
  std::thread([] { const trace::Span span("recv", "pp", 1); }).join();
  int64_t dropped = 0;
  const std::vector<trace::Event> events = recorder.stop(dropped);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(dropped, 0);
  { const trace::Span ignored("after the trace", "step"); }
  EXPECT_TRUE(recorder.stop(dropped).empty());

  const nlohmann::json trace = nlohmann::json::parse(gunzip(gzip(chrome_trace_json(events, 2, 0))));
  std::set<std::string> names;
  std::set<int> threads;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 2);
    if (e.at("ph") == "M") continue;
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_GE(e.at("ts").get<int64_t>(), 0);
    EXPECT_GE(e.at("dur").get<int64_t>(), 0);
    EXPECT_TRUE(e.at("cat").is_string());
    names.insert(e.at("name").get<std::string>());
    threads.insert(e.at("tid").get<int>());
  }
  EXPECT_EQ(names, (std::set<std::string>{"optimizer", "block 3 forward", "recv"}));
  EXPECT_EQ(threads.size(), 2u);
}

TEST(ChromeTrace, SpansPastTheRoomAreCountedAndNamed) {
  trace::Recorder& recorder = trace::Recorder::instance();
  recorder.start(2);
  for (int i = 0; i < 5; ++i) const trace::Span span("step", "step");
  int64_t dropped = 0;
  const std::vector<trace::Event> events = recorder.stop(dropped);
  EXPECT_EQ(events.size(), 2u);
  EXPECT_EQ(dropped, 3);
  EXPECT_NE(chrome_trace_json(events, 0, dropped).find("3 spans past the trace's room dropped"),
            std::string::npos);
}

TEST(ChromeTrace, IsWrittenGzippedWhereAsked) {
  const std::filesystem::path path =
      testing::fresh_test_dir("chrome-trace") / "trace" / "rank-0.json.gz";
  write_chrome_trace(path, {}, 0, 0);
  std::ifstream in(path, std::ios::binary);
  const std::string gz{std::istreambuf_iterator<char>(in), {}};
  EXPECT_TRUE(nlohmann::json::parse(gunzip(gz)).contains("traceEvents"));
}

}  // namespace
}  // namespace tessera::obs

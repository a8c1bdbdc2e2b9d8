#include "tessera/obs/chrome_trace.h"

#include <fmt/format.h>
#include <zlib.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/atomic_file.h"
#include "tessera/core/error.h"

namespace tessera::obs {
namespace {

std::string event_name(const trace::Event& e) {
  const std::string_view name = e.name;
  if (name.find("{}") == std::string_view::npos) return std::string(name);
  return fmt::format(fmt::runtime(name), e.index);
}

}  // namespace

std::string chrome_trace_json(std::span<const trace::Event> events, int rank, int64_t dropped) {
  nlohmann::json out = nlohmann::json::array();
  std::string process = fmt::format("rank {}", rank);
  if (dropped > 0) process += fmt::format(" ({} spans past the trace's room dropped)", dropped);
  out.push_back({{"name", "process_name"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"tid", 0},
                 {"args", {{"name", process}}}});
  out.push_back({{"name", "process_sort_index"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"tid", 0},
                 {"args", {{"sort_index", rank}}}});
  std::set<int> threads;
  for (const trace::Event& e : events) threads.insert(e.thread);
  for (int t : threads) {
    out.push_back({{"name", "thread_name"},
                   {"ph", "M"},
                   {"pid", rank},
                   {"tid", t},
                   {"args", {{"name", fmt::format("thread {}", t)}}}});
  }
  for (const trace::Event& e : events) {
    out.push_back({{"name", event_name(e)},
                   {"cat", e.category},
                   {"ph", "X"},
                   {"ts", e.start_us},
                   {"dur", e.duration_us},
                   {"pid", rank},
                   {"tid", e.thread}});
  }
  return nlohmann::json{{"traceEvents", out}, {"displayTimeUnit", "ms"}}.dump();
}

std::string gzip(std::string_view data) {
  z_stream z{};
  // 15 window bits, + 16 for a gzip header and trailer rather than zlib's.
  check(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
        "gzip: cannot start zlib");
  std::string out(deflateBound(&z, uLong(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = uInt(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  const int status = deflate(&z, Z_FINISH);
  deflateEnd(&z);
  check(status == Z_STREAM_END, "gzip: zlib could not compress {} bytes", data.size());
  out.resize(z.total_out);
  return out;
}

void write_chrome_trace(const std::filesystem::path& path, std::span<const trace::Event> events,
                        int rank, int64_t dropped) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  check(!ec, "{}: cannot create the trace folder: {}", path.parent_path().string(), ec.message());
  write_file_atomically(path, gzip(chrome_trace_json(events, rank, dropped)));
}

}  // namespace tessera::obs

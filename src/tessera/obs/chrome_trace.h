// A rank's spans (core/trace.h) as a Chrome trace, the JSON that Perfetto's UI and
// chrome://tracing open: one complete event ("ph": "X") per span, the rank as the process and the
// recording thread as the thread, gzipped.
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "tessera/core/trace.h"

namespace tessera::obs {

// The trace JSON. A span's name may hold "{}", which its index fills ("block {} forward" ->
// "block 3 forward"). `dropped` spans that found no room are noted in the process's name.
std::string chrome_trace_json(std::span<const trace::Event> events, int rank, int64_t dropped);

// chrome_trace_json, gzipped, written to `path` atomically. Throws an Error naming the file.
void write_chrome_trace(const std::filesystem::path& path, std::span<const trace::Event> events,
                        int rank, int64_t dropped);

// Gzip of `data` at the default level (what a .gz file holds).
std::string gzip(std::string_view data);

}  // namespace tessera::obs

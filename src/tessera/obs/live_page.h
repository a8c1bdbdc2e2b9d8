// The page a training run serves at / of its metrics port: charts of the loss and held-out loss,
// tokens/s, MFU, memory per rank and each step's breakdown, drawn from the run's records (the
// lines of metrics.jsonl) as they come. A finished run's report is the same page with its records
// inside, so it opens from disk with no server.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tessera::obs {

// The page, which reads history.json (records_json's form) beside it every second.
std::string_view live_page();

// The page with `records` (a JSON array of records, oldest first) inside, and nothing fetched.
std::string report_page(std::string_view records);

// A finished run's report: report_page over the records of its metrics.jsonl. Throws an Error
// naming the file and line of a record that does not parse.
std::string report_page_from(const std::filesystem::path& metrics_jsonl);

// What the page fetches: {"records": records}.
std::string records_json(std::string_view records);

}  // namespace tessera::obs

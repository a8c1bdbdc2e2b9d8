#include "tessera/obs/live_page.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/obs/live_page_data.h"

namespace tessera::obs {

namespace {

constexpr std::string_view kRecordsSlot = "/*RECORDS*/";

}  // namespace

std::string_view live_page() { return kLivePageHtml; }

std::string report_page(std::string_view records) {
  std::string page(kLivePageHtml);
  const size_t at = page.find(kRecordsSlot);
  check(at != std::string::npos, "the live page has no {} slot for a report's records",
        kRecordsSlot);
  // A record's text could hold "</script>"; escaping '<' keeps it inside the script.
  std::string safe;
  safe.reserve(records.size());
  for (const char c : records) {
    if (c == '<') {
      safe += "\\u003c";
    } else {
      safe += c;
    }
  }
  page.replace(at, kRecordsSlot.size(), "window.TESSERA_RECORDS = " + safe + ";");
  return page;
}

std::string report_page_from(const std::filesystem::path& metrics_jsonl) {
  std::ifstream in(metrics_jsonl);
  check(in.good(), "{}: cannot read the run's metrics (a training run writes metrics.jsonl)",
        metrics_jsonl.string());
  std::string records = "[";
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    check(record.is_object(), "{}:{}: not a JSON object, as every record of a run's metrics is",
          metrics_jsonl.string(), line_number);
    if (records.size() > 1) records += ",";
    records += record.dump();
  }
  records += "]";
  return report_page(records);
}

std::string records_json(std::string_view records) {
  std::string out = R"({"records": )";
  out += records;
  out += "}";
  return out;
}

}  // namespace tessera::obs

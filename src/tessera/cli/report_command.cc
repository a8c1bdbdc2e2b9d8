#include <cstdio>
#include <filesystem>
#include <string>

#include "tessera/cli/flags.h"
#include "tessera/core/atomic_file.h"
#include "tessera/core/error.h"
#include "tessera/obs/live_page.h"

namespace tessera::cli {

int report_command(int argc, char** argv) {
  Flags flags("report",
              {{"html", "FILE", "write the run's page, its records inside, to FILE (required)"}},
              argc, argv, "RUN_DIR");
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Report on a finished (or running) training run: tessera report RUN_DIR "
                         "--html out.html writes the live page's charts of RUN_DIR/metrics.jsonl "
                         "into one self-contained HTML file.")
                   .c_str(),
               stdout);
    return 0;
  }
  check(flags.operands().size() == 1,
        "tessera report: give one run folder, e.g. tessera report "
        "runs/train --html report.html");
  const auto html = flags.get("html");
  check(html.has_value(), "tessera report: --html FILE is required");
  const std::filesystem::path run = flags.operands().front();
  write_file_atomically(*html, obs::report_page_from(run / "metrics.jsonl"));
  std::printf("wrote %s\n", html->c_str());
  return 0;
}

}  // namespace tessera::cli

#include <cstdio>
#include <filesystem>
#include <string>

#include "tessera/cli/flags.h"
#include "tessera/core/atomic_file.h"
#include "tessera/core/error.h"
#include "tessera/obs/live_page.h"

namespace tessera::cli {
namespace {

struct ReportFlags {
  std::string html;
};

}  // namespace

int report_command(int argc, char** argv) {
  ReportFlags flags;
  Command command("report",
                  "Report on a finished (or running) training run: tessera report RUN_DIR "
                  "--html out.html writes the live page's charts of RUN_DIR/metrics.jsonl "
                  "into one self-contained HTML file.",
                  "RUN_DIR");
  const Settings<ReportFlags> rows = {required(flag(
      "--html", "FILE", &ReportFlags::html, "write the run's page, its records inside, to FILE"))};
  if (!command.flags(rows, flags).parse(argc, argv)) return 0;
  check(command.operands().size() == 1,
        "tessera report: give one run folder, e.g. tessera report "
        "runs/train --html report.html");
  const std::filesystem::path run = command.operands().front();
  write_file_atomically(flags.html, obs::report_page_from(run / "metrics.jsonl"));
  std::printf("wrote %s\n", flags.html.c_str());
  return 0;
}

}  // namespace tessera::cli

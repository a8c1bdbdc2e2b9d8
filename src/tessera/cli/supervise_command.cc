#include <cstdio>
#include <string>
#include <vector>

#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/launch/supervisor.h"

namespace tessera::cli {

int supervise_command(int argc, char** argv) {
  int separator = 0;
  while (separator < argc && std::string(argv[separator]) != "--") ++separator;
  Flags flags("supervise",
              {{"max-restarts", "N", "restart a failed job up to N times (default 3)"},
               {"backoff-s", "SECONDS", "wait before the first restart, doubled after each (1)"},
               {"log", "FILE", "append one JSON line per attempt to FILE"}},
              separator, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Run a job, e.g. 'tessera supervise -- mpirun -n 4 tessera train ...',\n"
                         "and start it again when it fails, so that it resumes from its last\n"
                         "checkpoint. A job that succeeds, is preempted or diverges is not\n"
                         "restarted.")
                   .c_str(),
               stdout);
    return 0;
  }
  check(separator + 1 < argc,
        "tessera supervise: give the job after '--', e.g. tessera supervise -- mpirun -n 2 "
        "tessera train --out runs/a");
  return launch::supervise(std::vector<std::string>(argv + separator + 1, argv + argc),
                           {.max_restarts = int(flags.get_int("max-restarts", 3)),
                            .backoff_s = flags.get_double("backoff-s", 1),
                            .log = flags.get_or("log", "")});
}

}  // namespace tessera::cli

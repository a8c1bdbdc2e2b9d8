#include <string>
#include <vector>

#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/launch/supervisor.h"

namespace tessera::cli {

int supervise_command(int argc, char** argv) {
  using O = launch::SupervisorOptions;
  int separator = 0;
  while (separator < argc && std::string(argv[separator]) != "--") ++separator;
  O options;
  Command command("supervise",
                  "Run a job, e.g. 'tessera supervise -- mpirun -n 4 tessera train ...',\n"
                  "and start it again when it fails, so that it resumes from its last\n"
                  "checkpoint. A job that succeeds, is preempted or diverges is not\n"
                  "restarted.");
  const Settings<O> rows = {
      flag("--max-restarts", "N", &O::max_restarts, "restart a failed job up to N times",
           at_least(0)),
      flag("--backoff-s", "SECONDS", &O::backoff_s,
           "wait before the first restart, doubled after each", at_least(0)),
      flag("--log", "FILE", &O::log, "append one JSON line per attempt to FILE"),
  };
  if (!command.flags(rows, options).parse(separator, argv)) return 0;
  check(separator + 1 < argc,
        "tessera supervise: give the job after '--', e.g. tessera supervise -- mpirun -n 2 "
        "tessera train --out runs/a");
  return launch::supervise(std::vector<std::string>(argv + separator + 1, argv + argc), options);
}

}  // namespace tessera::cli

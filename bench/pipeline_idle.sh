#!/usr/bin/env bash
# Each pipeline rank's measured idle share per schedule next to the simulator's, for pp ranks
# under mpirun (default 2, one thread each): the simulation takes this run's measured forward and
# backward times, so the difference is what the runtime loses to messages, waiting and uneven
# stages (the first holds the embedding, the last the head and loss).
#   [RANKS=2] [BUILD=dir] bench/pipeline_idle.sh [flags for pipeline_bench]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bench="${BUILD:-$root/build}/bench/pipeline_bench"
[[ -x "$bench" ]] || bash "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
mpirun --oversubscribe -np "${RANKS:-2}" "$bench" "$@"

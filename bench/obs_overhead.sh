#!/usr/bin/env bash
# What observability costs a training step, measured beside the step in one process
# (obs_cost_bench): recording each step, and serving /metrics, history.json and the live page.
# Measured this way because on these shared machines whole runs drift by more than it costs.
#   [BUILD=dir] bench/obs_overhead.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bench="${BUILD:-$root/build}/bench/obs_cost_bench"
[[ -x "$bench" ]] || bash "$root/scripts/build.sh" >/dev/null
lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' '); matmuls: f32 oneDNN sgemm"
"$bench"

#!/usr/bin/env bash
# One model served two ways on the same two cores: one rank with two compute threads, and two
# tensor-parallel ranks with one thread each (mpirun -np 2 tessera serve --tp 2). The same load,
# bench/serve_load.mjs with CLIENTS clients streaming MAX_TOKENS-token completions for DURATION
# seconds, runs against each, and the table gives decode tokens/s, time to first token, the
# model's steps, and the share of them spent in the ranks' collectives (and handing out the
# steps' plans), per step and per generated token. The planner's estimate of the per-step
# all-reduces is printed beside it: plan --serve prices a tensor-parallel decode step as two
# all-reduces per block of the step's tokens x d_model activations, each priced here at what this
# machine's MPI takes for an all-reduce of that size (train_step_bench --probe-allreduce). The
# peer is the layout itself: 2 ranks x 1 thread against 1 rank x 2 threads.
#   [CONFIG=configs/gpt2-124m.toml] [CLIENTS=8] [DURATION=15] [MAX_TOKENS=32] [BUILD=dir]
#   bench/serve_tensor_parallel.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
tessera="$build/tessera"
bench="$build/bench/train_step_bench"
[[ -x "$tessera" && -x "$bench" ]] || bash "$root/scripts/build.sh" >/dev/null
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh --test" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
config="${CONFIG:-$root/configs/gpt2-124m.toml}"
clients=${CLIENTS:-8}
read -r n_layer d_model < <(python3 "$root/bench/config_values.py" "$config" model.n_layer \
  model.d_model)

# shellcheck source=bench/serve_process.bash
source "$root/bench/serve_process.bash"
# The served weights only need to exist: one training step on a few verses.
setup_served_model "$config" --set train.steps=1 --set train.batch_size=1
echo "model: $config, served in f32 to $clients clients streaming ${MAX_TOKENS:-32}-token completions"
echo

# Starts a server (its command line in "$@"), runs the load, and prints one row of the table.
serve_and_load() {
  local label=$1
  shift
  start_server "$work/serve.log" "$@" --checkpoint "$work/run" --port 0
  load_and_scrape "$clients" --max-tokens "${MAX_TOKENS:-32}"
  PYTHONPATH="$root/bench" python3 - "$label" "$work/load.txt" "$work/metrics.txt" <<'EOF'
import re, sys
from served_figures import Served
label, s = sys.argv[1], Served(sys.argv[2], sys.argv[3])
ttft = re.search(r'time to first token\s+p50\s+([0-9.]+) ms\s+p99\s+([0-9.]+) ms', s.load)
steps, step_s = s.metric('tessera_model_steps_total'), s.metric('tessera_model_step_seconds_total')
comm_s = s.metric('tessera_model_communication_seconds_total')
generated = s.metric('tessera_generation_tokens_total')
prefill = s.metric('tessera_prefill_tokens_total')
tokens_per_step = (generated + prefill) / steps
print(f'{label:<20} {s.tokens_per_s:9.1f} {float(ttft.group(1)):9.1f} {float(ttft.group(2)):9.1f} '
      f'{1e3 * step_s / steps:9.2f} {tokens_per_step:8.1f} {100 * comm_s / step_s:7.1f}% '
      f'{1e3 * comm_s / steps:9.3f} {1e6 * comm_s / generated:10.1f}')
open(sys.argv[2] + '.step', 'w').write(f'{tokens_per_step} {1e3 * comm_s / steps}\n')
EOF
}

printf '%-20s %9s %9s %9s %9s %8s %8s %9s %10s\n' layout "tok/s" ttft_p50 ttft_p99 step_ms \
  tok/step comm comm_ms us/token
serve_and_load "1 rank x 2 threads" "$tessera" serve --threads 2
serve_and_load "2 ranks x 1 thread" mpirun --oversubscribe -np 2 "$tessera" serve --tp 2 --threads 1
read -r tokens_per_step comm_ms <"$work/load.txt.step"

# The planner's model of the same steps: 2 all-reduces per block of tokens_per_step x d_model f32.
bytes=$(python3 -c "print(max(4, round($tokens_per_step) * $d_model * 4))")
allreduce_s=$(mpirun --oversubscribe -np 2 "$bench" --probe-allreduce "$bytes" |
  sed -n 's/^RESULT //p' | python3 -c "import json,sys; print(json.load(sys.stdin)['allreduce_s_mean'])")
python3 -c "
planned = 2 * $n_layer * $allreduce_s * 1e3
print()
print(f'all-reduce of $bytes bytes over 2 ranks on this machine: {1e3 * $allreduce_s:.3f} ms')
print(f'planner: 2 x $n_layer all-reduces per step = {planned:.2f} ms; measured {float($comm_ms):.2f} ms'
      f' per step (measured / planned = {float($comm_ms) / planned:.2f})')
"
echo
echo "comm: the share of the model's step time spent in the ranks' collectives and in handing"
echo "out each step's plan, which includes waiting for the slower rank; us/token: those seconds"
echo "per generated token. tok/step: tokens (decodes and prompt chunks) one step ran on average."

# `tessera serve` in the background for the serving benchmarks, which source this file: one server
# at a time, stopped by stop_server (call it from the script's EXIT trap too), and the model they
# serve (setup_served_model).

server_pid=""
server_url=""

# Starts the server command given, its output in the file `log`, and waits up to a minute for it
# to listen; sets server_url, or exits showing the log when the server ends or never listens.
start_server() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    grep -q "^listening on" "$log" && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  server_url=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$log")
  [[ -n "$server_url" ]] || { echo "tessera serve did not start:" >&2; cat "$log" >&2; exit 1; }
}

stop_server() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}

# Loads the started server with bench/serve_load.mjs (clients $1 for DURATION seconds, then the
# further serve_load arguments given), keeps its output in $work/load.txt and the server's
# /metrics in $work/metrics.txt (bench/served_figures.py reads both), and stops the server.
load_and_scrape() {
  local clients=$1
  shift
  node "$root/bench/serve_load.mjs" --url "$server_url" --clients "$clients" \
    --duration "${DURATION:-15}" "$@" >"$work/load.txt"
  curl -sf "$server_url/metrics" >"$work/metrics.txt"
  stop_server
}

# The start of a serving benchmark: a scratch folder in $work (removed on exit, after the server
# is stopped), the CPU it runs on, and in $work/run a model of the config $1 trained on Genesis
# 1-10 by "$tessera" train with the --set settings that follow.
setup_served_model() {
  local config=$1
  shift
  work=$(mktemp -d)
  trap 'stop_server; rm -rf "$work"' EXIT
  lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
  echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  bible -f "Gen1:1-Gen10:32" | sed 's/^[^ ]* //' >"$work/corpus.txt"
  "$tessera" train --config "$config" --data "$work/corpus.txt" --out "$work/run" \
    --set train.eval_every=0 --set train.eval_batches=1 "$@" >"$work/train.log" 2>&1 ||
    { cat "$work/train.log" >&2; exit 1; }
}

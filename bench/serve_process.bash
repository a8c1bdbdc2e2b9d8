# `tessera serve` in the background for the serving benchmarks, which source this file: one server
# at a time, stopped by stop_server (call it from the script's EXIT trap too).

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

# The PyTorch peer of the training benchmarks, which source this file: the CPU they run on and
# whether the peer can run at its best here (bench/torch_env.sh --check), and their configs.

# Prints the CPU, its flags and the peer's check (with `threads` threads); sets peer_ok to 1 and
# exports the core type the check chose (TORCH_PEER_CORETYPE) when the peer can run at its best,
# else sets it to 0 and says that only our side is measured.
check_cpu_and_peer() {
  local threads=$1
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
    "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_int8|amx_tile' \
      /proc/cpuinfo | sort -u | tr '\n' ' ')"
  peer_ok=1
  local check
  check="$(THREADS=$threads bash "$root/bench/torch_env.sh" --check 2>&1)" || peer_ok=0
  echo "$check"
  if ((peer_ok)); then
    TORCH_PEER_CORETYPE="$(sed -n 's/.*OPENBLAS_CORETYPE=\([^ ]*\) .*/\1/p' <<<"$check")"
    export TORCH_PEER_CORETYPE
  else
    echo "the peer cannot run at its best here: only our side is measured, and no ratio is printed"
  fi
}

# The row of the array `configs` ("name|...") named $1; exits naming an unknown one.
config_row() {
  local c
  for c in "${configs[@]}"; do
    [[ "${c%%|*}" == "$1" ]] && { echo "$c"; return; }
  done
  echo "unknown config '$1'" >&2
  exit 2
}

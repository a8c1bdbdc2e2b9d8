#!/usr/bin/env bash
# Runs a PyTorch peer script with Debian's python3-torch at its best, or says why it cannot.
#
# At its best means: OpenBLAS behind libblas.so.3 (with only the reference BLAS that
# python3-torch pulls in, its f32 matmuls run ~50x slower and any ratio against it is void), one
# passive OpenMP pool (torch's and OpenBLAS's threads otherwise spin against each other), ATen's
# AVX-512 kernels where the CPU has them, and the OpenBLAS core type that multiplies fastest on
# this CPU, measured: the machine's own OPENBLAS_CORETYPE when it sets one, OpenBLAS's detection,
# and SkylakeX on AVX-512 CPUs (OpenBLAS 0.3.21 does not know Zen 5 and falls back to AVX2).
#
#   bench/torch_env.sh --check              the peer's environment and its matmul rates
#   bench/torch_env.sh SCRIPT.py [ARGS...]  runs a peer script in that environment
# Each matmul rate is the best of MATMUL_REPEATS timed products (default 10).
#
# Exits 3 with the reason on stderr when the peer cannot run at its best; callers then print no
# ratio. The chosen core type is exported as TORCH_PEER_CORETYPE, so a caller that exports it
# after one --check measures only once.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

void() {
  echo "PEER VOID: $*" >&2
  exit 3
}
blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)"
[[ "$blas" == *openblas* ]] ||
  void "libblas.so.3 is '${blas:-missing}', not OpenBLAS: PyTorch's f32 matmuls would run far" \
    "below their best (apt-get install libopenblas0-openmp, or scripts/setup.sh --bench)"
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  void "Debian's python3-torch is not installed (scripts/setup.sh --bench)"

export OMP_WAIT_POLICY=PASSIVE
grep -qw avx512f /proc/cpuinfo && export ATEN_CPU_CAPABILITY=avx512
unset OPENBLAS_L2_SIZE

# f32 and bf16 GFLOP/s of one 4096 x 768 x 3072 matmul, best of MATMUL_REPEATS, at the peer's
# thread count.
matmul_rates() {
  /usr/bin/python3 - "${THREADS:-2}" "${MATMUL_REPEATS:-10}" <<'PY'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
rates = []
for dtype in (torch.float32, torch.bfloat16):
    a, b = torch.randn(4096, 768).to(dtype), torch.randn(768, 3072).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    rates.append(2 * 4096 * 768 * 3072 / best / 1e9)
print(f"{rates[0]:.1f} {rates[1]:.1f}")
PY
}

# Runs the rest of the line with OpenBLAS's core type $1 ("detect": OpenBLAS's own choice).
with_coretype() (
  if [[ "$1" == detect ]]; then
    unset OPENBLAS_CORETYPE
  else
    export OPENBLAS_CORETYPE="$1"
  fi
  "${@:2}"
)

if [[ -z "${TORCH_PEER_CORETYPE:-}" ]]; then
  candidates=(detect)
  [[ -n "${OPENBLAS_CORETYPE:-}" ]] && candidates+=("$OPENBLAS_CORETYPE")
  grep -qw avx512f /proc/cpuinfo && candidates+=(SkylakeX)
  best_rate=0
  for c in "${candidates[@]}"; do
    rate="$(with_coretype "$c" matmul_rates | cut -d' ' -f1)"
    if python3 -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" \
      "$rate" "$best_rate"; then
      best_rate="$rate" TORCH_PEER_CORETYPE="$c"
    fi
  done
  export TORCH_PEER_CORETYPE
fi

if [[ "${1:-}" == --check ]]; then
  read -r f32 bf16 < <(with_coretype "$TORCH_PEER_CORETYPE" matmul_rates)
  echo "peer: PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')," \
    "BLAS $blas, OPENBLAS_CORETYPE=$TORCH_PEER_CORETYPE (fastest measured)," \
    "ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-default}, OMP_WAIT_POLICY=PASSIVE"
  echo "peer matmul 4096x768x3072, ${THREADS:-2} threads: f32 $f32 GFLOP/s (OpenBLAS)," \
    "bf16 $bf16 GFLOP/s (oneDNN)"
  exit 0
fi
with_coretype "$TORCH_PEER_CORETYPE" /usr/bin/python3 "$@"

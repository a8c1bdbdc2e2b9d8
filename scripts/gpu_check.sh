#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds Tessera with the CUDA backend, runs every CUDA test (the
# kernels against the CPU's, whole models, the NCCL communicator, training from the command line)
# and the GPU training benchmark beside PyTorch where python3 has it, then prints one short table.
#   scripts/gpu_check.sh            (SKIP_SETUP=1 when the Debian packages are already there)
# Exits non-zero when a test fails. Everything it prints is also in build-gpu/gpu_check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build-gpu
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1

command -v nvidia-smi >/dev/null && nvidia-smi -L
if [[ "${SKIP_SETUP:-0}" != 1 ]] && command -v apt-get >/dev/null; then bash scripts/setup.sh; fi
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON >"$out/configure.log" ||
  { tail -30 "$out/configure.log"; exit 1; }
ninja -C "$out" tessera_cli test_cuda test_dist test_e2e train_step_bench >"$out/build.log" ||
  { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }

# One line of counts per test binary run: "name passed failed skipped".
results=()
run_tests() {
  local name=$1
  shift
  local xml="$out/$name.xml"
  "$@" --gtest_output="xml:$xml" >"$out/$name.log" 2>&1
  local rc=$?
  local tests failures skipped
  tests=$(grep -o 'tests="[0-9]*"' "$xml" | head -1 | tr -dc 0-9)
  failures=$(grep -o 'failures="[0-9]*"' "$xml" | head -1 | tr -dc 0-9)
  skipped=$(grep -c '<skipped' "$xml")
  results+=("$name $((tests - failures - skipped)) $failures $skipped")
  ((rc == 0)) || grep -E "Failure|FAILED|error" "$out/$name.log" | head -20
  return $rc
}
failed=0
run_tests cuda_kernels_and_models "$out/tests/test_cuda" || failed=1
run_tests nccl_1_rank "$out/tests/test_dist" --gtest_filter='Nccl*' || failed=1
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if ((gpus >= 2)); then
  run_tests nccl_2_ranks env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -np 2 "$out/tests/test_dist" --gtest_filter='Nccl*' || failed=1
fi
run_tests cuda_cli "$out/tests/test_e2e" --gtest_filter='CudaCli*' || failed=1

# GPT-2 124M, batch 16 x 1024 tokens, bf16: tokens/s and MFU, ours and PyTorch's.
shape="--n-layer 12 --n-head 12 --d-model 768 --vocab 50257 --batch 16 --seq 1024"
field() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read().split("RESULT ",1)[1]); print(r.get(sys.argv[1], 0))' "$1"; }
ours=$("$out/bench/train_step_bench" $shape --precision bf16 --device cuda --warmup 3 --steps 10 2>&1 |
  grep '^RESULT')
peer=""
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  peer=$(python3 bench/torch_gpu_train_peer.py $shape --precision bf16 --warmup 3 --steps 10 \
    --flops-per-token "$(echo "$ours" | field model_flops_per_token)" \
    --peak-flops "$(echo "$ours" | field peak_flops)" 2>&1 | grep '^RESULT')
fi

echo
echo "== gpu_check: $(echo "$ours" | field device_name)"
printf '%-26s %7s %7s %8s\n' "tests" passed failed skipped
for r in "${results[@]}"; do printf '%-26s %7s %7s %8s\n' $r; done
printf '\n%-34s %12s %7s\n' "GPT-2 124M, B16 T1024, bf16" "tokens/s" MFU
if [[ -n "$ours" ]]; then
  printf '%-34s %12.0f %6.1f%%\n' tessera "$(echo "$ours" | field tokens_per_s)" \
    "$(python3 -c "print(100*$(echo "$ours" | field mfu))")"
else
  echo "tessera: the benchmark failed (see above)"
  failed=1
fi
if [[ -n "$peer" ]]; then
  printf '%-34s %12.0f %6.1f%%\n' "pytorch $(echo "$peer" | field torch)" \
    "$(echo "$peer" | field tokens_per_s)" "$(python3 -c "print(100*$(echo "$peer" | field mfu))")"
  python3 -c "import sys; print(f'ratio tessera / pytorch: {float(sys.argv[1]) / float(sys.argv[2]):.2f}')" \
    "$(echo "$ours" | field tokens_per_s)" "$(echo "$peer" | field tokens_per_s)"
else
  echo "pytorch: not on this machine (python3 -c 'import torch' with CUDA), no ratio"
fi
exit $failed

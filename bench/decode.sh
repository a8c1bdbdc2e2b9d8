#!/usr/bin/env bash
# Batch-1 decoding side by side: bench/decode_bench (f32, bf16 and int8 weights, with the machine's
# read bandwidth) and the PyTorch peer bench/torch_decode_peer.py (f32 and bf16), on GPT-2 124M's
# shapes (CONFIG picks another GPT-2) with random weights, the same prompt and step counts, 2
# threads each. Each side runs REPEATS rounds (default 2), alternating, and keeps its best, as do
# the repeats inside each round. Prints, per format: tokens/s of both, ours / peer, weight bytes per
# token, the bandwidth bound (read bandwidth / weight bytes per token) and how close we came to it.
#   [REPEATS=N] [STEPS=N] [THREADS=N] [CONFIG=file] [BUILD=dir] [INSTALL=0] bench/decode.sh
# The peer runs Debian's python3-torch at its best through bench/torch_env.sh, which says why
# when it cannot (and then no ratio is printed). Installs what is missing first, unless INSTALL=0.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
ours="$build/bench/decode_bench"
steps="${STEPS:-128}" threads="${THREADS:-2}"
config="${CONFIG:-$root/configs/gpt2-124m.toml}"
read -r n_layer n_head d_model vocab max_seq < <(python3 "$root/bench/config_values.py" "$config" \
  model.n_layer model.n_head model.d_model model.vocab_size model.max_seq)
[[ "${INSTALL:-1}" == 0 ]] || bash "$root/scripts/setup.sh" --bench
[[ -x "$ours" ]] || bash "$root/scripts/build.sh" decode_bench >/dev/null

have_peer=1
THREADS=$threads bash "$root/bench/torch_env.sh" --check || have_peer=0
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
for ((i = 0; i < ${REPEATS:-2}; i++)); do
  "$ours" --config "$config" --steps "$steps" --threads "$threads" |
    sed -n 's/^RESULT /ours /p' >>"$results"
  if ((have_peer)); then
    bash "$root/bench/torch_env.sh" "$root/bench/torch_decode_peer.py" --n-layer "$n_layer" \
      --n-head "$n_head" --d-model "$d_model" --vocab "$vocab" --max-seq "$max_seq" \
      --steps "$steps" --threads "$threads" |
      sed -n 's/^RESULT /peer /p' >>"$results"
  fi
done
((have_peer)) || echo "note: the peer cannot run at its best here; its columns are empty"

python3 - "$results" <<'EOF'
import json, sys
ours, peer, bandwidth = {}, {}, 0.0
for line in open(sys.argv[1]):
    side, _, payload = line.partition(" ")
    r = json.loads(payload)
    best = ours if side == "ours" else peer
    for name, f in r["formats"].items():
        if f["tokens_per_s"] > best.get(name, {}).get("tokens_per_s", 0):
            best[name] = f
    if side == "ours":
        bandwidth = max(bandwidth, r["limits"]["read_bandwidth"] / 1e9)
print(f"read bandwidth {bandwidth:.1f} GB/s (best of the rounds); bound = bandwidth / weight "
      "bytes per token")
print(f"{'format':<6} {'ours tok/s':>10} {'peer tok/s':>10} {'ours/peer':>9} "
      f"{'weight MB/tok':>13} {'bound tok/s':>11} {'% of bound':>10}")
for name, f in sorted(ours.items(), key=lambda item: ["f32", "bf16", "int8"].index(item[0])):
    bound = bandwidth * 1e9 / f["weight_bytes_per_token"]
    p = peer.get(name, {}).get("tokens_per_s")
    ratio = f"{f['tokens_per_s'] / p:9.2f}" if p else f"{'-':>9}"
    peer_tps = f"{p:10.1f}" if p else f"{'-':>10}"
    print(f"{name:<6} {f['tokens_per_s']:10.1f} {peer_tps} {ratio} "
          f"{f['weight_bytes_per_token'] / 1e6:13.1f} {bound:11.1f} "
          f"{100 * f['tokens_per_s'] / bound:9.0f}%")
EOF

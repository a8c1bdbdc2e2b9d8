#!/usr/bin/env bash
# How long a checkpoint of GPT-2 124M (model, AdamW moments: ~1.5 GB) holds up training, saved
# synchronously (the step waits for the whole write, fsync and commit) and in the background
# (checkpoint.async: the step waits only for the copy of the state into host buffers). The same
# run, config and data both ways; the figure is the stall of the asynchronous save as a share of
# the synchronous one, from each step's checkpoint_stall_s and step_s in metrics.jsonl. The write rate of
# the synchronous save is set against this disk's own rate for the same bytes (dd with fsync),
# and the asynchronous copy against this machine's memory copy rate.
# Saves are far enough apart (EVERY steps) for one to be written before the next, as a real
# run's are; closer, the next save waits for the previous write and the stall is the disk's.
# THREADS sets the training threads; fewer than the cores leaves the background writer a core.
#   [STEPS=13] [EVERY=4] [THREADS=0] bench/checkpoint_stall.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tessera="$root/build/tessera"
[[ -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
steps=${STEPS:-13}
every=${EVERY:-4}
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-ckpt-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "disk: $(df -h "$work" | awk 'NR == 2 {print $1 ", " $4 " free"}')"

python3 - "$work/corpus.txt" <<'PY'
import sys
words = "the quick brown fox jumps over the lazy dog while seven wise owls watch".split()
with open(sys.argv[1], "w") as f:
    for i in range(20000):
        f.write(" ".join(words[(i * k) % len(words)] for k in range(1, 12)) + ".\n")
PY

run() {  # async(true|false) -> the run folder
  local out="$work/run-$1"
  "$tessera" train --config "$root/configs/gpt2-124m.toml" --data "$work/corpus.txt" \
    --tokenizer byte --out "$out" --set train.batch_size=1 --set train.seq_len=32 \
    --set train.steps="$steps" --set train.eval_every=0 --set train.eval_batches=1 \
    --set train.log_every=1 --set checkpoint.every="$every" --set checkpoint.keep_last=1 \
    --set train.threads="${THREADS:-0}" --set checkpoint.async="$1" >"$work/$1.log" 2>&1 || { tail -20 "$work/$1.log"; exit 1; }
  echo "$out"
}
sync_run=$(run false)
async_run=$(run true)
ckpt_bytes=$(du -sb "$(ls -d "$sync_run"/checkpoints/step-* | tail -1)" | cut -f1)

# The stall each save caused, from the step records after a save set beside the median step
# without one.
python3 - "$sync_run/metrics.jsonl" "$async_run/metrics.jsonl" "$every" "$ckpt_bytes" \
  "$work" <<'PY'
import json, os, statistics, subprocess, sys, time
def records(path):
    return [r for r in map(json.loads, open(path)) if "loss" in r]
every, nbytes, work = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def stalls(rs):
    # A save costs the step after it its wait (checkpoint_stall_s) and whatever else the step
    # lost to it: the background writer's copy, checksums and I/O share the cores.
    plain = statistics.median(
        [r["step_s"] for r in rs if r["step"] > 2 and (r["step"] - 1) % every != 0])
    after_save = [r["checkpoint_stall_s"] + max(0.0, r["step_s"] - r["checkpoint_stall_s"] - plain)
                  for r in rs if r["step"] > every and (r["step"] - 1) % every == 0]
    return after_save, plain
s, s_step = stalls(records(sys.argv[1]))
a, a_step = stalls(records(sys.argv[2]))
sync_stall, async_stall = statistics.mean(s), statistics.mean(a)

# This disk's rate for the same bytes, and this machine's memory copy rate.
probe = os.path.join(work, "dd.bin")
t0 = time.perf_counter()
subprocess.run(["dd", "if=/dev/zero", f"of={probe}", "bs=16M", f"count={max(1, nbytes >> 24)}",
                "conv=fsync"], check=True, capture_output=True)
disk = (max(1, nbytes >> 24) << 24) / (time.perf_counter() - t0)
os.remove(probe)
src, dst = memoryview(bytearray(b"x" * (256 << 20))), memoryview(bytearray(256 << 20))
dst[:] = src
t0 = time.perf_counter()
for _ in range(4):
    dst[:] = src  # one memcpy
memcpy = 4 * len(src) / (time.perf_counter() - t0)

print(f"checkpoint: {nbytes / 1e9:.2f} GB per save, {len(s)} saves measured each way\n")
print(f"{'save':<12} {'stall_s':>9} {'step_s':>8} {'rate_GB/s':>10} {'limit_GB/s':>11} {'share':>6}")
print(f"{'synchronous':<12} {sync_stall:9.3f} {s_step:8.3f} {nbytes / sync_stall / 1e9:10.2f} "
      f"{disk / 1e9:11.2f} {nbytes / sync_stall / disk:6.2f}")
print(f"{'background':<12} {async_stall:9.3f} {a_step:8.3f} {'-':>10} {memcpy / 1e9:11.2f} {'-':>6}")
print(f"\nbackground stall / synchronous stall = {async_stall / sync_stall:.3f} (target <= 0.10)")
print("stall_s: the training thread's wait for each save (checkpoint_stall_s) plus how much longer")
print("than the median the step after it took; step_s: median step without a save (first two")
print("left out); limit: dd with fsync for the disk, a Python")
print("memcpy for memory (the background copy overlaps the next step's forward and backward).")
PY

#!/usr/bin/env bash
# How long a checkpoint of GPT-2 124M (model, AdamW moments: ~1.5 GB; CONFIG picks another model)
# holds up training, saved synchronously (the step waits for the whole write, fsync and commit) and
# in the background (checkpoint.async: the step waits only for the copy of the state into host
# memory). The same run, config and data both ways. A save's stall is the wait itself and whatever
# the writer took from the steps it overlapped: what the steps that ran until its commit took beyond
# the three steps just before the save (runs on this shared machine differ by more than a save
# costs, and one run's step time drifts in spells of seconds, so the baseline is the same run just
# before). The figure is the background stall as a share of the synchronous one. The write rate of
# the synchronous save is set against this disk's own rate for the same bytes (dd with fsync), and
# the background copy against this machine's memory copy rate.
# Saves are far enough apart (EVERY steps) for one to be written before the next, as a real
# run's are; closer, the next save waits for the previous write and the stall is the disk's.
# THREADS sets the training threads; fewer than the cores leaves the background writer a core.
#   [STEPS=37] [EVERY=6] [THREADS=0] [CONFIG=file] [BUILD=dir] bench/checkpoint_stall.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tessera="${BUILD:-$root/build}/tessera"
config="${CONFIG:-$root/configs/gpt2-124m.toml}"
[[ -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
steps=${STEPS:-37}
every=${EVERY:-6}
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

run() {  # name async(true|false) every -> the run folder
  local out="$work/run-$1"
  "$tessera" train --config "$config" --data "$work/corpus.txt" \
    --tokenizer byte --out "$out" --set train.batch_size=1 --set train.seq_len=32 \
    --set train.steps="$steps" --set train.eval_every=0 --set train.eval_batches=1 \
    --set train.log_every=1 --set checkpoint.every="$3" --set checkpoint.keep_last=1 \
    --set train.threads="${THREADS:-0}" --set checkpoint.async="$2" >"$work/$1.log" 2>&1 || { tail -20 "$work/$1.log"; exit 1; }
  echo "$out"
}
sync_run=$(run sync false "$every")
async_run=$(run async true "$every")
ckpt_bytes=$(du -sb "$(ls -d "$sync_run"/checkpoints/step-* | tail -1)" | cut -f1)

python3 - "$sync_run/metrics.jsonl" "$async_run/metrics.jsonl" "$every" "$ckpt_bytes" \
  "$work" "$work/async.log" <<'PY'
import json, os, re, statistics, subprocess, sys, time
every, nbytes, work = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
# How long each background save's writer ran, from its start after the copy to its commit.
writing = {int(m[1]): float(m[2]) for m in re.finditer(
    r"checkpoint step (\d+) committed in ([0-9.]+) s in the background", open(sys.argv[6]).read())}
def stalls(path, background):
    # Each save between steps s and s + 1 (the first after the warm-up, each with a whole window
    # before the next): the wait, which the record of step s + 1 holds apart from its step_s, and
    # what the steps that ran while its writer did took beyond the three steps before the save.
    # Steps after the commit are left out: nothing of the save runs then, and this shared
    # machine's step time drifts by more than a save costs over a window of steps.
    records = {r["step"]: r for r in map(json.loads, open(path)) if "loss" in r}
    result, plain = [], []
    for s in range(every, max(records) - every + 1, every):
        before = statistics.median(records[t]["step_s"] for t in range(s - 2, s + 1))
        stall, t, elapsed = records[s + 1]["checkpoint_stall_s"], s + 1, 0.0
        while background and elapsed < writing[s] and t <= s + every:
            stall += records[t]["step_s"] - before
            elapsed += records[t]["step_s"]
            t += 1
        result.append(stall)
        plain.append(before)
    return result, statistics.median(plain)
s, s_plain = stalls(sys.argv[1], False)
a, a_plain = stalls(sys.argv[2], True)
sync_stall, async_stall = statistics.mean(s), statistics.mean(a)
writer_s = statistics.mean(writing[x] for x in range(every, every * (len(a) + 1), every))

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
print(f"plain step: {s_plain:.3f} s (synchronous run), {a_plain:.3f} s (background run); "
      f"the background writer ran {writer_s:.2f} s per save\n")
print(f"{'save':<12} {'stall_s':>9} {'per save':>24} {'rate_GB/s':>10} {'limit_GB/s':>11} {'share':>6}")
print(f"{'synchronous':<12} {sync_stall:9.3f} {' '.join(f'{x:.3f}' for x in s):>24} "
      f"{nbytes / sync_stall / 1e9:10.2f} {disk / 1e9:11.2f} {nbytes / sync_stall / disk:6.2f}")
print(f"{'background':<12} {async_stall:9.3f} {' '.join(f'{x:.3f}' for x in a):>24} {'-':>10} "
      f"{memcpy / 1e9:11.2f} {'-':>6}")
print(f"\nbackground stall / synchronous stall = {async_stall / sync_stall:.3f} (target <= 0.10)")
print("stall_s: the wait for the save, and what the steps that ran while its writer did took beyond")
print("the three steps before the save (the writer's share of the cores); limit: dd with fsync")
print("for the disk, a Python memcpy for memory (the background copy is taken on every core).")
PY

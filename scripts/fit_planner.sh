#!/usr/bin/env bash
# Fits each accelerator's matmul efficiency to the published runs marked split = "fitted" in
# tests/plan/published_runs.toml and writes it into configs/hardware.toml (the held-out runs never
# enter the fit); then rebuild and run the validation test to see both sets' errors:
#   scripts/fit_planner.sh && scripts/build.sh && build/tests/test_plan --gtest_filter='PlannerValidation.*'
# Chips of one group share a fit: the same silicon, or a chip without runs of its own beside the
# nearest one that has them (its matmul_source then says so).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh fit_planner >/dev/null
build/tests/fit_planner a100-80gb,a100-40gb h100,h200,b200 tpu-v5e,tpu-v5p,tpu-v4 tpu-v6e \
  --write configs/hardware.toml

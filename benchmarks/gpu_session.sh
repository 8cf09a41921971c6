#!/bin/bash
# Issues 36 and 50 in one device call of at most 9 minutes: grokray on CUDA as a user runs it, through Ray Tune,
# MLflow and Optuna carried in the bundle (benchmarks/gpu_bundle.py, built here into .whl/, `carry: [.whl]`).
#   1. install the bundle into /tmp/site
#   2. the CUDA tests (pytest -m gpu: every family, the captured step against eager, tf32 and bf16)
#   3. bench_pack.py --device cuda: the Grokfast transformer at K up to 256, the captured step beside the eager one,
#      with the card's fp32 and TF32 matmul peaks measured in the same run; and the toy at K up to 1,024, hand-stacked
#      beside the same toy as the user's own nn.Module (the module family); bench_module.py --fixtures: modules
#      written without vmap in mind (a one-hot MLP, nn.MultiheadAttention, Liu's toy) packed, against the plain
#      PyTorch loop a researcher writes, K up to 1,024
#   4. Fig. 6b at the paper budget (121 cells x seeds 0-3, 1e5 steps) through `grokray atlas` (grokray run on Ray
#      Tune, MLflow on SQLite), captured step, two packs on the card, with its utilisation and memory sampled,
#      compared run by run and cell by cell with the committed CPU page
#   5. if time is left, seeds 0-7 of Fig. 6b, so that every cell has 7 voting seeds
#   6. plain Ray Tune against `grokray run` on the same 8x8 grid and card (benchmarks/bench_sweep.py, each side with
#      its own utilisation samples): the ratio of wall times (issue 64)
#   7. the quickstart (Fig. 6b reduced: 5 x 4 cells x seeds 0-3, 1e4 steps), against its CPU page
#   8. if time is left, benchmarks/compare_precision.py on the quickstart: fp32, tf32, bf16 phases on the card
#   9. everything packed into $OUT: session.txt (the summary), session.tgz (logs, pages, data CSVs, MLflow stores)
# Each step has its own time limit and the whole script a deadline, so a step that hangs leaves the others' figures.
#
#   device:           bash benchmarks/gpu_session.sh
#   here, CPU check:  python3 benchmarks/gpu_bundle.py --python 3.11 && \
#                     GPU_SESSION_DEVICE=cpu PY=.venv/bin/python bash benchmarks/gpu_session.sh
# With GPU_SESSION_DEVICE=cpu the same steps run on the CPU (resources.gpu=0; the quickstart at seed 1, Fig. 6b at
# its smoke preset), so the script is checked end to end within its limits on a machine without CUDA.
cd "$(dirname "$0")/.."
DEFAULT_DEADLINE=530   # seconds for the whole script; the device call's limit is 540-600
source benchmarks/gpu_lib.sh
if [ "$DEVICE" = cuda ]; then
  SCALE_6B=paper GPU=0.5 QS_SEEDS="" CAPTURE=compiled QS_LIMIT=60
  SWEEP_DEVICE=cuda SWEEP_STEPS=3000 SWEEP_GRID=8 SWEEP_LIMIT=120  # plain Tune's 64 trials in about 2 minutes
else  # the quickstart at seed 1 alone (20 configurations, ~1 min on 2 cores), so the comparison has runs to match
  SCALE_6B=smoke GPU=0 QS_SEEDS="seeds=[1]" CAPTURE=eager QS_LIMIT=110
  SWEEP_DEVICE=cpu SWEEP_STEPS=100 SWEEP_GRID=3 SWEEP_LIMIT=120  # 9 plain trials: seconds each on 2 cores
fi

say "# gpu_session $(date -u +%FT%TZ) on $DEVICE, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
install_bundle

if [ "$DEVICE" = cuda ]; then
  step pytest-gpu 110 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -rs
  step bench-pack-grokfast 90 "$PY" benchmarks/bench_pack.py --device cuda --quick --capture --models grokfast \
    --ks 1,32,256
  # issue 64: the toy as the user's own nn.Module (the module family) beside the hand-stacked toy, same K
  step bench-pack-module 60 "$PY" benchmarks/bench_pack.py --device cuda --quick --generic --models toy200 \
    --ks 1,32,256,1024
  # issue 70: modules written without vmap in mind, packed, against the researcher's own plain loop on the card
  step bench-module 100 "$PY" benchmarks/bench_module.py --device cuda --quick --fixtures --ks 1,32,256,1024
else
  step pytest-gpu 60 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -rs
  step bench-pack-toy 90 "$PY" benchmarks/bench_pack.py --device cpu --quick --capture --models toy32 --ks 1,8
  step bench-pack-module 60 "$PY" benchmarks/bench_pack.py --device cpu --quick --generic --models toy32 --ks 1,8
  step bench-module 80 "$PY" benchmarks/bench_module.py --device cpu --quick --fixtures --ks 1,8
fi
grep -hE "^(\||# )" "$W"/logs/bench-pack-*.log "$W"/logs/bench-module.log >> "$SUMMARY"

atlas() {  # atlas NAME SECONDS SPEC SCALE [ -s ... ]: one figure through grokray atlas, its own store and pages
  local name=$1 limit=$2 spec=$3 scale=$4; shift 4
  sample_gpu "$W/logs/$name-gpu.csv" & local sampler=$!
  step "$name" "$limit" "$PY" -m grokray atlas --scale "$scale" "$spec" -o "$W/atlas" \
    --tracking-uri "sqlite:///$W/$name.db" --storage "$RESULTS" --progress always \
    -s "resources.gpu=$GPU" -s "train.capture=$CAPTURE" "$@"
  local rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  say "$name: $(gpu_figures "$W/logs/$name-gpu.csv")"
  return $rc
}
compare() {  # compare FIGURE-SCALE NEW-CSV: the committed CPU page's runs and cells against the re-run's
  local ref=docs/atlas/data/$1.csv
  [ -f "$ref" ] || { say "$1: no committed page to compare with"; return; }
  [ -f "$2" ] || { say "$1: the re-run wrote no data CSV"; return; }
  say "$1 against the committed CPU page:"
  "$PY" benchmarks/compare_phases.py "$ref" "$2" 2>&1 | tee -a "$SUMMARY"
  "$PY" - "$2" <<'EOF' | tee -a "$SUMMARY"
import sys, pandas as pd
runs = pd.read_csv(sys.argv[1])
print(f"model-steps trained: {runs['steps_run'].sum():,.0f} in {len(runs)} runs")
EOF
}

atlas fig6b 150 sweeps/liu_fig6b_toy_regression.yaml "$SCALE_6B"
compare "liu_fig6b_toy_regression-$SCALE_6B" "$W/atlas/data/liu_fig6b_toy_regression-$SCALE_6B.csv"
grep -E "wall time" "$W/atlas/liu_fig6b_toy_regression-$SCALE_6B.md" 2>/dev/null >> "$SUMMARY"

# issue 64: plain Ray Tune as a user writes it (a trial per configuration, an nn.Module and torch's AdamW, a fractional
# num_gpus each, MLflowLoggerCallback) against `grokray run` on the same 8x8 grid and card, each with its own samples
plain_vs_grokray() {
  local side
  for side in plain grokray; do
    sample_gpu "$W/logs/sweep-$side-gpu.csv" & local sampler=$!
    step "sweep-$side" "$1" "$PY" benchmarks/bench_sweep.py --device "$SWEEP_DEVICE" --steps "$SWEEP_STEPS" \
      --grid "$SWEEP_GRID" --only "$side" --json "$W/sweep-$side.json"
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    say "sweep-$side: $(gpu_figures "$W/logs/sweep-$side-gpu.csv")"
  done
  "$PY" benchmarks/sweep_ratio.py "$W/sweep-plain.json" "$W/sweep-grokray.json" "$1" 2>&1 | tee -a "$SUMMARY"
}
plain_vs_grokray "$SWEEP_LIMIT"

# seeds 4-7 beside 0-3 (seed 0's split is undecodable: 7 voters a cell), only if the first page left time for it
if [ "$(left)" -gt 200 ]; then
  mv "$W/atlas" "$W/atlas4"
  atlas fig6b-seeds0-7 $(( $(left) - 80 )) sweeps/liu_fig6b_toy_regression.yaml "$SCALE_6B" \
    -s 'seeds=[0,1,2,3,4,5,6,7]'
  mv "$W/atlas" "$W/atlas8"; mv "$W/atlas4" "$W/atlas"
else
  say "fig6b seeds 0-7: skipped, $(left) s left"
fi
atlas quickstart "$QS_LIMIT" sweeps/quickstart.yaml reduced ${QS_SEEDS:+-s "$QS_SEEDS"}
compare quickstart-reduced "$W/atlas/data/quickstart-reduced.csv"
grep -E "wall time" "$W/atlas/quickstart-reduced.md" 2>/dev/null >> "$SUMMARY"

# train.precision against fp32 on the card: the quickstart's 80 runs, phase by phase (issue 50, item 3)
if [ "$DEVICE" = cuda ] && [ "$(left)" -gt 40 ]; then
  step precision $(( $(left) - 10 )) "$PY" benchmarks/compare_precision.py sweeps/quickstart.yaml --device cuda \
    -s train.capture=compiled
  grep -E "^(\||# )" "$W/logs/precision.log" >> "$SUMMARY"
fi

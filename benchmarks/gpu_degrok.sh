#!/bin/bash
# Issue 37's GPU part in one device call of at most 9 minutes: the de-grokking methods searched at the paper's scale
# (x*y mod 97, y != 0, fraction 0.5; the 2-layer decoder of width 128, 4 heads; batch 512), every method with the
# same trials, seeds (0-2), budget and ASHA schedule, Muon included, through `grokray atlas` on Ray Tune, Optuna and
# MLflow (SQLite) as a user runs it; then the methods page of those that finished, and bench_pack's methods rows.
#   1. install the bundle (benchmarks/gpu_bundle.py --python 3.12, carried as .whl) into /tmp/site
#   2. per method, in this order: tuned AdamW (the baseline), Muon, Grokfast-MA, Grokfast-EMA, the held norm, ⊥AdamW,
#      StableMax: its search with DEGROK_TRIALS trials, DEGROK_CONCURRENT at once on the one card (a GPU share of
#      0.96/concurrent each), capped at DEGROK_BUDGET steps, ASHA grace 300 / factor 3, GPU sampled each second
#   3. `grokray atlas --pages-only` over the methods that finished: the side-by-side page
#   4. if time is left, `bench_pack.py --methods --device cuda`: each method's step cost against plain AdamW
#   5. $OUT: session.txt (the summary), session.tgz (logs, pages, data CSVs, the gzipped MLflow store)
# The budget is the issue's goal's scale, not the paper's: the goal is 790 steps, and 2,000 steps tell which settings
# remove the delay (Adam without weight decay, published at 39,890, cannot be measured within one device call).
#
# The specs are the Grokfast benchmark as published (issue 51: the authors' model, epoch-shuffled batches, val every
# 10 steps, each search's best 3 settings confirmed at 5 fresh seeds), TPE asked DEGROK_CONCURRENT (default 4)
# trials at a time so that it leaves its random start. DEGROK_MODEL=variant runs grokray's variant instead
# (sweeps/grokfast_variant_*.yaml, the pages before issue 51).
#
#   device:           bash benchmarks/gpu_degrok.sh
#   device (variant): DEGROK_MODEL=variant bash benchmarks/gpu_degrok.sh
#   here, CPU check:  GPU_SESSION_DEVICE=cpu SKIP_INSTALL=1 PY=.venv/bin/python bash benchmarks/gpu_degrok.sh
# With GPU_SESSION_DEVICE=cpu the same steps run at the specs' smoke scale on the CPU (2 trials, resources.gpu 0).
cd "$(dirname "$0")/.."
DEFAULT_DEADLINE=550   # seconds for the whole script; the device call's limit is 595
source benchmarks/gpu_lib.sh
METHODS=${DEGROK_METHODS:-"adamw muon ma ema norm orthogonal stablemax"}
[ "${DEGROK_MODEL:-published}" = variant ] && PREFIX=grokfast_variant_ PAGE=grokfast-variant-methods \
  || PREFIX=grokfast_ PAGE=grokfast-methods
if [ "$DEVICE" = cuda ]; then
  [ "$PREFIX" = grokfast_ ] && DEFAULT_CONCURRENT=4 || DEFAULT_CONCURRENT=12
  SCALE=paper TRIALS=${DEGROK_TRIALS:-12} CONCURRENT=${DEGROK_CONCURRENT:-$DEFAULT_CONCURRENT} BUDGET=${DEGROK_BUDGET:-2000}
  ASHA="{grace: 300, reduction_factor: 3}"
  GPU=$(awk -v c="$CONCURRENT" 'BEGIN {printf "%.4f", 0.96 / c}')
else
  SCALE=smoke TRIALS=2 CONCURRENT=2 BUDGET=100 ASHA=null GPU=0
fi

say "# gpu_degrok $(date -u +%FT%TZ) on $DEVICE, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
say "each method: $TRIALS trials, $CONCURRENT at once, GPU share $GPU, cpu 1, budget $BUDGET steps, ASHA $ASHA, scale $SCALE"
install_bundle

SETS=(-s "resources.gpu=$GPU" -s resources.cpu=1 -s "search.n_trials=$TRIALS" -s "search.max_concurrent=$CONCURRENT"
      -s "train.steps=$BUDGET" -s "phases.budget=$BUDGET" -s "search.asha=$ASHA")
say "specs: sweeps/${PREFIX}*.yaml"
ATLAS=(-m grokray atlas --scale "$SCALE" -o "$W/atlas" --tracking-uri "sqlite:///$W/grokfast.db" --storage "$RESULTS")
done_specs=()
set -- $METHODS
while [ $# -gt 0 ]; do
  m=$1; shift
  cap=$(( $(left) - 30 )); [ "$cap" -gt 170 ] && cap=170   # one slow method must not take every later one's time
  sample_gpu "$W/logs/search-$m-gpu.csv" & sampler=$!
  step "search-$m" "$cap" "$PY" "${ATLAS[@]}" "sweeps/$PREFIX$m.yaml" --progress always "${SETS[@]}"
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  say "search-$m: $(gpu_figures "$W/logs/search-$m-gpu.csv")"
  if [ -f "$W/atlas/$PREFIX$m-$SCALE.md" ]; then
    done_specs+=("sweeps/$PREFIX$m.yaml")
    grep -E "^\| *[0-9]+ \|" "$W/atlas/$PREFIX$m-$SCALE.md" | head -3 >> "$SUMMARY"
  fi
done
if [ ${#done_specs[@]} -gt 0 ]; then
  step methods-page 40 "$PY" "${ATLAS[@]}" "${done_specs[@]}" --pages-only "${SETS[@]}"
  sed -n '/^| method/,/^$/p' "$W/atlas/$PAGE-$SCALE.md" 2>/dev/null >> "$SUMMARY"
fi
if [ "$(left)" -gt 45 ]; then
  KS=$([ "$DEVICE" = cuda ] && echo 1,32,256 || echo 1,8)
  MODEL=$([ "$DEVICE" = cuda ] && echo grokfast || echo transformer)  # the paper-scale model is ~0.3 s a step here
  step bench-methods $(( $(left) - 5 )) "$PY" benchmarks/bench_pack.py --methods --device "$DEVICE" --quick \
    --models "$MODEL" --ks "$KS"
  grep -E "^\|" "$W/logs/bench-methods.log" >> "$SUMMARY"
fi

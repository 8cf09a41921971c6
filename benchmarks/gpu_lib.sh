# Shared by the device-call scripts (gpu_session.sh, gpu_degrok.sh): their settings and working folders, a deadline
# for the whole call, steps that each run under min(their own limit, the time left), GPU sampling, the bundle's
# install, and what comes back in $OUT. Source it from the repository's root, with DEFAULT_DEADLINE set (seconds;
# GPU_SESSION_DEADLINE overrides it).
set -o pipefail
REPO=$PWD
OUT=${OUT:-$REPO/gpu-session}
DEVICE=${GPU_SESSION_DEVICE:-cuda}
PY=${PY:-python3}
DEADLINE=${GPU_SESSION_DEADLINE:-$DEFAULT_DEADLINE}
W=/tmp/grokray-gpu-session           # what comes back, packed
RESULTS=/tmp/grokray-gpu-results     # Tune's state, checkpoints and Optuna journals: not brought back
rm -rf "$W" "$RESULTS" && mkdir -p "$W/logs" "$OUT"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
SUMMARY=$W/session.txt
say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((DEADLINE - SECONDS)); }
step() {  # step NAME SECONDS COMMAND...: run it under min(SECONDS, time left), keep its log, say how it ended
  local name=$1 limit=$2; shift 2
  local cap; cap=$(left)
  [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -lt 10 ]; then say "=== $name: skipped, ${limit}s left"; return 99; fi
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$W/logs/$name.log"
  local rc=${PIPESTATUS[0]}
  say "=== $name: exit $rc after $((SECONDS - t0)) s"
  return "$rc"
}
finish() {
  say "=== total: $SECONDS s"
  # MLflow stores go back gzipped when they fit; the pages, data CSVs and logs always do
  for db in "$W"/*.db; do [ -f "$db" ] && gzip -9 "$db"; done
  tar czf "$OUT/session.tgz" -C "$W" . 2>/dev/null
  if [ "$(stat -c %s "$OUT/session.tgz")" -gt $((15 * 2**20)) ]; then
    tar czf "$OUT/session.tgz" -C "$W" --exclude='*.db.gz' . 2>/dev/null
    say "session.tgz: the MLflow stores left out (over 15 MiB)"
  fi
  cp "$SUMMARY" "$OUT/session.txt"
}
install_bundle() {  # the wheels carried in .whl/ (benchmarks/gpu_bundle.py) into /tmp/site; then the device's versions
  if [ -n "${SKIP_INSTALL:-}" ]; then say "install: skipped (SKIP_INSTALL, $PY has the packages)"; else
    # a fresh target: --upgrade over an earlier install leaves the old version's dist-info beside the new one
    step install 60 bash -c "rm -rf /tmp/site && $PY -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --target /tmp/site .whl/*.whl && echo installed \$(ls .whl/*.whl | wc -l) wheels"
  fi
  export PYTHONPATH=/tmp/site:$REPO:$REPO/tests
  step device 30 bash -c "(command -v nvidia-smi >/dev/null && nvidia-smi) || echo 'no nvidia-smi'; $PY -c '
import torch, ray, mlflow, optuna, grokray
print(\"torch\", torch.__version__, \"cuda\", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else \"\")
print(\"ray\", ray.__version__, \"mlflow\", mlflow.__version__, \"optuna\", optuna.__version__)'"
  grep -E "^(torch|ray) " "$W/logs/device.log" >> "$SUMMARY"
}
sample_gpu() {  # utilisation and memory once a second, into $1, until killed
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 > "$1" 2>/dev/null
}
gpu_figures() {  # mean/max utilisation and peak memory of a sample file
  [ -s "$1" ] || { echo "no GPU samples"; return; }
  awk -F', ' '{u+=$1; n++; if ($1>um) um=$1; if ($2>mm) mm=$2} END {printf "GPU utilisation mean %.0f%% (max %d%%, %d samples at 1 s), memory used max %d MiB\n", u/n, um, n, mm}' "$1"
}
trap finish EXIT

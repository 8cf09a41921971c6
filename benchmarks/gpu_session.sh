#!/bin/bash
# Issue 29 in one device call (at most 9 minutes on an H100): the CUDA tests, the pack benchmark on the GPU, and the
# quickstart's and Fig. 6b's packs trained there against the dry-run estimate. The device image has torch, pytest and
# pandas but not Ray or MLflow, so grokray runs from the source tree and nothing here starts Ray or MLflow.
#   device run:  bash benchmarks/gpu_session.sh          (writes its logs under $OUT, else ./gpu-session)
# Each step has its own time limit, so one that hangs still leaves the others' figures.
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-session}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:$PWD/tests PYTHONUNBUFFERED=1
PY=${PY:-python3}
step() {  # step NAME SECONDS COMMAND...: run it, keep its log, say how it ended
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s): $*"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  echo "=== $name: exit ${PIPESTATUS[0]}"
}
step device 20 bash -c "nvidia-smi; $PY -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'"
step pytest-gpu 100 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -x -rs
step bench-pack 120 $PY benchmarks/bench_pack.py --device cuda --quick
step bench-pack-compile 50 $PY benchmarks/bench_pack.py --device cuda --quick --compile --models toy32 --ks 1,32,1024
step packs-quickstart 50 $PY benchmarks/bench_gpu_packs.py sweeps/quickstart.yaml
step packs-fig6b 180 $PY benchmarks/bench_gpu_packs.py sweeps/liu_fig6b_toy_regression.yaml \
  -s 'sweep.optim.decoder.lr.values=[0.0001,0.001,0.01]'

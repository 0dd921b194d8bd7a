#!/usr/bin/env bash
# Everything the lent GPU proves, in one call: install, GPU tests, the main job, benchmarks.
#   bash perf/run_gpu.sh            (writes logs and results under ${OUT:-/tmp/gt-gpu})
set -uo pipefail
OUT=${OUT:-/tmp/gt-gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# the device image has no network: install without fetching build dependencies
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 \
  || { echo "editable install failed; using PYTHONPATH"; tail -3 "$OUT/install.log"; }
# fall back to the source tree, with gluon_trace.backends pointing at backends/
python3 -c "import gluon_trace.backends.nvidia" 2>/dev/null || {
  ln -sfn "$PWD/backends" "$PWD/gluon_trace/backends"; export PYTHONPATH=$PWD; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m gluon_trace 2>&1 | tail -1 | tee "$OUT/main.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider "$@" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
python3 notebooks/run_cells.py notebooks/*.ipynb > "$OUT/notebooks.log" 2>&1; echo "notebooks rc=$?" | tee -a "$OUT/notebooks.log"
grep -E "GPU|timing on|best" "$OUT/notebooks.log" | head -12
# memory errors only: cuda-python's cuInit probes driver entry points this driver lacks,
# which the sanitizer reports as API errors (CUDA_ERROR_INVALID_VALUE from cuGetProcAddress)
compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m gluon_trace 2>&1 | tail -3 | tee "$OUT/sanitizer.log"
# every tensor-core kernel under the three race/sync/memory tools (each result checked against torch)
for t in memcheck racecheck synccheck; do
  compute-sanitizer --tool $t --report-api-errors no --error-exitcode 9 python3 perf/sanitize_kernels.py \
    > "$OUT/sanitize-$t.log" 2>&1; echo "$t rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-$t.log")"
done
python3 perf/bench_nvidia.py 2>&1 | tee "$OUT/bench.log" | tail -30
python3 perf/bench_gemm.py 2>&1 | grep -v "^  mma" | tee "$OUT/gemm.log" | tail -30
python3 perf/bench_attention.py 2>&1 | tee "$OUT/attention.log" | grep "^B"
python3 perf/bench_variants.py --gemm 2>&1 | grep -v "compiling\|timing on" | tee "$OUT/sweep.log" | tail -5
cp perf/results/*.json perf/README.md "$OUT/" 2>/dev/null

#!/usr/bin/env bash
# Everything the GPU proves, in stages that fit one device call each (a call may run 10 minutes):
#   bash perf/run_gpu.sh [stage ...]      default: tests
# stages:
#   tests     install, the main job, pytest -m gpu (streamk, warp-specialized and cluster included),
#             compute-sanitizer memcheck on the main job
#   sanitize  every tensor-core kernel under memcheck, racecheck and synccheck
#   gemm      perf/bench_gemm.py (all kernels, the issue's shapes; GEMM_ARGS: its options) head to head with cuBLAS
#   dtypes    perf/bench_gemm.py's f16 and fp8 rows alone (timed alone and sustained, in turn with cuBLAS(Lt))
#   streamk   perf/bench_gemm.py --kernels streamk,clusterws (the stream-K tail beside its base)
#   attention perf/bench_attention.py against cuDNN and FlashAttention-2
#   nvidia    perf/bench_nvidia.py (memory-bound kernels, compile time)
#   fuzz      the differential fuzzer, GLUON_TRACE_FUZZ_GPU programs (default 2000) from a fresh seed
#   fuzzshared  the same with the shared-memory preset (GLUON_TRACE_FUZZ_GPU_PRESET=shared)
#   fuzzatomics the same with the atomics preset (layouts with copies, repeated addresses)
#   l2        the skinny GEMM at each L2 promotion of its tensor maps (probe_skinny PROMOTIONS), and
#             Nsight Compute's L2 breakdown of cuBLAS, clusters of one and pairs
#   apart     the cluster GEMM's producer split in two warps (APART): the skinny shape, then
#             4096^3 and 8192^3 (perf/probe_apart.py)
#   coloc     the skinny GEMM's warp-specialized kernel launched in co-located clusters of two (no
#             cluster code) beside the same without clusters, and Nsight Compute's L2 breakdown of each
#   align     rows that are not whole 128-byte lines: 4000^3 against 4096^3, padded rows and
#             narrower swizzles (perf/probe_align.py); the skinny GEMM's co-located variants
#   notebooks the notebooks, cell by cell
#   power     SM clock and board power while each shape's best kernel and cuBLAS run back to back
#             (perf/probe_power.py): is the GPU power-capped, and at which clock does each run
#   ncuskinny Nsight Compute's full set (at its locked base clock, near the power-capped clock of a
#             sustained run) for cuBLAS and our skinny kernels: ws 64x128 co-located, pairs sharing
#             B (cuBLAS's structure), ws 128x64; details and raw metrics as text
#   evict     the skinny GEMM with L2 eviction policies on its loads (perf/probe_evict.py), and
#             Nsight Compute's L2 counters at its locked clock for two of them
#   ncusquare Nsight Compute's L2 and tensor-pipe counters at its locked clock for cuBLAS and our
#             cluster-ws (clusters of one, pairs sharing B) at 4096^3 and 8192^3
#   group     4096^3 and 4000^3: the cluster kernel's tile order (GROUP_M) swept, alone and sustained
#             against cuBLAS, and Nsight Compute's DRAM bytes and instructions at each GROUP_M
#   ncusass   per-SASS-instruction execution counts (Nsight Compute's source page) of our cluster-ws
#             at 4096^3 and the skinny GEMM's ws 64x128: where the instructions cuBLAS does not issue go
#   insts     after a change to the GEMMs' instruction count: probe_group at GROUP_M 8 and 16, the
#             skinny GEMM's policies (probe_evict), ncu's instruction count at 4096^3
#   grid      2x2 cluster grids sharing both operands beside pairs (perf/probe_grid.py), and
#             Nsight Compute's L2 counters at its locked clock for the skinny one
#   ncu4000   Nsight Compute's time, instructions, DRAM and L2 counters at its locked clock for cuBLAS
#             and our cluster-ws (clusters of one) at 4000^3 beside 4096^3: what 4000^3 costs each
#   swap      matmul_hopper_swap's tiles that are not powers of two (160x192, cuBLAS's at 4000^3) beside
#             cluster-ws, in turn with cuBLAS (perf/probe_swap.py), and Nsight Compute at 4000^3
#   minmax3   ptxas's integer min/max folding (perf/probe_minmax3.py): random min/max trees assembled by the
#             machine's ptxas (and $PIP_PTXAS if set), plain and in the emitter's guarded form, against numpy
#   skinny    the skinny GEMM's probes: perf/probe_skinny.py (K sweep, loads alone) and the per-CTA
#             timeline of clusters of one against pairs (perf/probe_timeline.py)
# Logs go to a work folder and are packed after each stage into $OUT/logs.tgz (the device gives
# back at most 8 files), with a one-line summary a stage in $OUT/summary.txt.
set -uo pipefail
# the tree's sources, fingerprinted for the header line (the device's copy of .git may name an
# older HEAD than the working tree it was given): `bash perf/run_gpu.sh fingerprint` prints it here
fingerprint() { git ls-files -co --exclude-standard -- gluon_trace backends perf tests | grep '\.py$' | sort | xargs cat | sha1sum | cut -c1-12; }
if [ "${1:-}" = fingerprint ]; then fingerprint; exit 0; fi
OUT=${OUT:-/tmp/gt-gpu}; mkdir -p "$OUT"
LOGS=$(mktemp -d /tmp/gt-logs.XXXX)
export PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/logs.tgz" -C "$LOGS" . ; }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }

# the device image has no network: install without fetching build dependencies
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$LOGS/install.log" 2>&1 \
  || { echo "editable install failed; using PYTHONPATH"; tail -3 "$LOGS/install.log"; }
python3 -c "import gluon_trace.backends.nvidia" 2>/dev/null || {
  ln -sfn "$PWD/backends" "$PWD/gluon_trace/backends"; export PYTHONPATH=$PWD; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) $(date -u +%FT%TZ) sources $(fingerprint)"

stage_tests() {
  python3 -m gluon_trace 2>&1 | tail -1 > "$LOGS/main.txt"; say "main: $(cat "$LOGS/main.txt")"
  python3 -m pytest -q -m gpu -p no:cacheprovider > "$LOGS/pytest_gpu.log" 2>&1
  say "pytest -m gpu: $(tail -1 "$LOGS/pytest_gpu.log")"
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest_gpu.log" | head -20 | tee -a "$OUT/summary.txt"
  # memory errors only: cuda-python's cuInit probes driver entry points this driver lacks,
  # which the sanitizer reports as API errors (CUDA_ERROR_INVALID_VALUE from cuGetProcAddress)
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m gluon_trace \
    > "$LOGS/sanitizer-main.log" 2>&1; say "memcheck main rc=$? $(grep 'ERROR SUMMARY' "$LOGS/sanitizer-main.log")"
}

stage_sanitize() {
  # every tensor-core kernel (SANITIZE_KERNELS: some of them) under the three tools (each result checked against torch)
  for t in memcheck racecheck synccheck; do
    compute-sanitizer --tool $t --report-api-errors no --error-exitcode 9 python3 perf/sanitize_kernels.py ${SANITIZE_KERNELS:-} \
      > "$LOGS/sanitize-$t.log" 2>&1
    say "$t rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitize-$t.log" | tr '\n' ' ')"
  done
}

stage_gemm() {
  python3 perf/bench_gemm.py ${GEMM_ARGS:-} 2>&1 | grep -v "^  mma" > "$LOGS/gemm.log"; tail -25 "$LOGS/gemm.log" | tee -a "$OUT/summary.txt"
}

stage_dtypes() {
  python3 perf/bench_gemm.py --shapes none --kernels f16,fp8 > "$LOGS/gemm-dtypes.log" 2>&1
  grep -E "f16|fp8" "$LOGS/gemm-dtypes.log" | grep -v "^  " | tee -a "$OUT/summary.txt"
}

stage_streamk() {
  python3 perf/bench_gemm.py --kernels streamk,clusterws > "$LOGS/gemm-streamk.log" 2>&1
  tail -25 "$LOGS/gemm-streamk.log" | tee -a "$OUT/summary.txt"
}

stage_attention() {
  python3 perf/bench_attention.py > "$LOGS/attention.log" 2>&1; grep "^B\|ratio\|x cuDNN" "$LOGS/attention.log" | tee -a "$OUT/summary.txt"
}

stage_nvidia() {
  python3 perf/bench_nvidia.py > "$LOGS/bench_nvidia.log" 2>&1; tail -30 "$LOGS/bench_nvidia.log" | tee -a "$OUT/summary.txt"
}

stage_fuzz() {
  # programs not run before: a seed from the clock unless one is given (the tests stage runs
  # seed 0's, the fixed set); the seed is in the summary, so a run can be repeated
  local seed=${GLUON_TRACE_FUZZ_GPU_SEED:-$(( $(date +%s) / 60 % 100000 * 10000 + 1000000 ))}
  say "fuzz seed $seed preset ${GLUON_TRACE_FUZZ_GPU_PRESET:-none}"
  GLUON_TRACE_FUZZ_GPU=${GLUON_TRACE_FUZZ_GPU:-2000} GLUON_TRACE_FUZZ_GPU_SEED=$seed GLUON_TRACE_FUZZ_DIR="$LOGS/fuzz_failures" \
    python3 -m pytest -s -q -m gpu -p no:cacheprovider tests/backends/nvidia/test_fuzz_gpu.py > "$LOGS/fuzz-gpu-$seed.log" 2>&1
  tail -6 "$LOGS/fuzz-gpu-$seed.log" | tee -a "$OUT/summary.txt"
}

stage_fuzzshared() {
  GLUON_TRACE_FUZZ_GPU_PRESET=shared stage_fuzz
}

stage_fuzzatomics() {
  GLUON_TRACE_FUZZ_GPU_PRESET=atomics stage_fuzz
}

stage_skinny() {
  LOAD_PROBES=1 python3 perf/probe_skinny.py 128x8192x2048 128x8192x8192 > "$LOGS/probe-skinny.log" 2>&1
  grep -v "rel err" "$LOGS/probe-skinny.log" | tee -a "$OUT/summary.txt"
  python3 perf/probe_timeline.py 128x8192x8192 > "$LOGS/probe-timeline.log" 2>&1
  tee -a "$OUT/summary.txt" < "$LOGS/probe-timeline.log"
}

stage_l2() {
  PROBE_RUNS="ws 128x64x64/8/4,cluster-ws x1,cluster-ws x2 share A" PROMOTIONS=0,64,128 \
    python3 perf/probe_skinny.py 128x8192x2048 128x8192x8192 > "$LOGS/probe-l2.log" 2>&1
  grep -v "rel err" "$LOGS/probe-l2.log" | tee -a "$OUT/summary.txt"
  local metrics=breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,gpu__time_duration.sum
  metrics+=,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_requests_srcunit_tex.sum
  metrics+=,lts__t_sectors_lookup_hit.sum,lts__t_sectors_lookup_miss.sum,lts__d_sectors_fill_device.sum
  for which in cublas ones pairs ws64; do
    ncu -k regex:'matmul|nvjet' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
      python3 perf/profile_gemm.py $which 128x8192x8192 > "$LOGS/ncu-l2-$which.txt" 2>&1
    say "ncu $which: $(grep -E 'gpu__time_duration|dram__bytes_read' "$LOGS/ncu-l2-$which.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
  done
  PROMOTION=0 ncu -k regex:'matmul|nvjet' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
    python3 perf/profile_gemm.py pairs 128x8192x8192 > "$LOGS/ncu-l2-pairs-promotion0.txt" 2>&1
}

stage_apart() {
  PROBE_RUNS="cluster-ws x1,share A" python3 perf/probe_skinny.py 128x8192x2048 128x8192x8192 > "$LOGS/probe-apart-skinny.log" 2>&1
  grep -v "rel err" "$LOGS/probe-apart-skinny.log" | tee -a "$OUT/summary.txt"
  python3 perf/probe_apart.py > "$LOGS/probe-apart.log" 2>&1
  grep -v "rel err" "$LOGS/probe-apart.log" | tee -a "$OUT/summary.txt"
}

stage_coloc() {
  PROBE_RUNS="ws 64x128x64/8/4,ws 128x64x64/8/4,cluster-ws 64x128 x1,cluster-ws 64x128 x2 share B" \
    python3 perf/probe_skinny.py 128x8192x2048 128x8192x8192 > "$LOGS/probe-coloc.log" 2>&1
  grep -v "rel err" "$LOGS/probe-coloc.log" | tee -a "$OUT/summary.txt"
  local metrics=lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,gpu__time_duration.sum
  metrics+=,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_lookup_hit.sum
  for which in cublas "ws64x128 1" "ws64x128 2" "ws64 2"; do
    set -- $which
    NUM_CTAS=${2:-1} ncu -k regex:'matmul|nvjet' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
      python3 perf/profile_gemm.py $1 128x8192x8192 > "$LOGS/ncu-coloc-$1-${2:-1}.txt" 2>&1
    say "ncu $which: $(grep -E 'gpu__time|ltcfabric|tex_op_read' "$LOGS/ncu-coloc-$1-${2:-1}.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
  done
}

stage_align() {
  python3 perf/probe_align.py > "$LOGS/probe-align.log" 2>&1; grep -v "rel err" "$LOGS/probe-align.log" | tee -a "$OUT/summary.txt"
  PROBE_RUNS="ws 64x128x64/8/4,co-located,cluster-ws 64x128 x1" python3 perf/probe_skinny.py 128x8192x8192 \
    > "$LOGS/probe-coloc2.log" 2>&1; grep -v "rel err" "$LOGS/probe-coloc2.log" | tee -a "$OUT/summary.txt"
}

stage_ncuskinny() {
  for which in cublas "ws64x128 2" "pairsB" "ws64 1"; do
    set -- $which; local tag=$1-${2:-1}
    NUM_CTAS=${2:-1} ncu --set full -k regex:'matmul|nvjet' --launch-skip 1 --launch-count 1 -f -o "$LOGS/ncu-$tag" \
      python3 perf/profile_gemm.py $1 128x8192x8192 > "$LOGS/ncu-run-$tag.txt" 2>&1
    ncu -i "$LOGS/ncu-$tag.ncu-rep" --page details --print-details all > "$LOGS/ncu-details-$tag.txt" 2>&1
    ncu -i "$LOGS/ncu-$tag.ncu-rep" --page raw --csv > "$LOGS/ncu-raw-$tag.csv" 2>&1
    rm -f "$LOGS/ncu-$tag.ncu-rep"
    say "ncu $tag: $(grep -E '^ +Duration' "$LOGS/ncu-details-$tag.txt" | head -1)"
  done
}

stage_evict() {
  python3 perf/probe_evict.py > "$LOGS/probe-evict.log" 2>&1; grep -v "rel err" "$LOGS/probe-evict.log" | tee -a "$OUT/summary.txt"
  local metrics=gpu__time_duration.sum,lrc__lts2lrc_sectors_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum
  metrics+=,lts__t_sectors_srcunit_ltcfabric_lookup_hit.sum,lts__t_sectors_srcunit_tex_lookup_hit.sum,dram__bytes_read.sum
  metrics+=,lts__t_sectors_srcunit_tex_lookup_miss.sum
  for pol in ":" "evict_last:" "evict_last:evict_first" ":evict_first"; do
    A_EVICT=${pol%%:*} B_EVICT=${pol##*:} NUM_CTAS=2 ncu -k regex:'matmul' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
      python3 perf/profile_gemm.py ws64x128 128x8192x8192 > "$LOGS/ncu-evict-${pol/:/-}.txt" 2>&1
    say "ncu A ${pol%%:*} B ${pol##*:}: $(grep -E 'gpu__time|lts2lrc|ltcfabric|tex_lookup' "$LOGS/ncu-evict-${pol/:/-}.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
  done
}

stage_ncusquare() {
  local metrics=gpu__time_duration.sum,lrc__lts2lrc_sectors_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum
  metrics+=,lts__t_sectors_srcunit_ltcfabric_lookup_hit.sum,lts__t_sectors_srcunit_tex_lookup_hit.sum,dram__bytes_read.sum
  metrics+=,lts__t_sectors_srcunit_tex_lookup_miss.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
  metrics+=,lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second
  metrics+=,lrc__average_xbar2gpc_sectors_op_read.ratio,smsp__inst_executed.sum,sm__cycles_active.avg
  for size in 4096 8192; do
    for which in "cublas -" "cluster 128,256,64,4,8,1,64" "cluster 128,256,64,4,8,2,64"; do
      set -- $which; local tag=$size-$1-${2//,/_}
      CFG=$2 ncu -k regex:'matmul|nvjet|sm90' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
        python3 perf/profile_gemm.py $1 $size > "$LOGS/ncu-square-$tag.txt" 2>&1
      say "ncu $tag: $(grep -E '^ +[a-z]' "$LOGS/ncu-square-$tag.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
    done
  done
}

stage_group() {
  python3 perf/probe_group.py > "$LOGS/probe-group.log" 2>&1; grep -v "rel err" "$LOGS/probe-group.log" | tee -a "$OUT/summary.txt"
  for g in 4 8 16 32; do
    CFG=128,256,64,4,8,1,64,0,$g ncu -k regex:'matmul' --launch-skip 1 --launch-count 1 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,smsp__inst_executed.sum,lts__t_sectors_srcunit_tex_lookup_miss.sum \
      python3 perf/profile_gemm.py cluster 4096 > "$LOGS/ncu-group-$g.txt" 2>&1
    say "ncu GROUP_M $g: $(grep -E '^ +[a-z]' "$LOGS/ncu-group-$g.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
  done
}

stage_ncusass() {
  for which in "cluster 4096 128,256,64,4,8,1,64" "ws64x128 128x8192x8192 -"; do
    set -- $which; local tag=$1-$2
    CFG=$3 NUM_CTAS=2 ncu -k regex:'matmul' --launch-skip 1 --launch-count 1 --section SourceCounters \
      --section InstructionStats -f -o "$LOGS/sass-$tag" python3 perf/profile_gemm.py $1 $2 > "$LOGS/sass-run-$tag.txt" 2>&1
    ncu -i "$LOGS/sass-$tag.ncu-rep" --page source --csv --print-source sass > "$LOGS/sass-$tag.csv" 2>&1
    rm -f "$LOGS/sass-$tag.ncu-rep"
    say "sass $tag: $(wc -l < "$LOGS/sass-$tag.csv") lines"
  done
}

stage_insts() {
  GROUP_MS=8,16 python3 perf/probe_group.py > "$LOGS/probe-group-insts.log" 2>&1
  grep -v "rel err" "$LOGS/probe-group-insts.log" | tee -a "$OUT/summary.txt"
  python3 perf/probe_evict.py > "$LOGS/probe-evict-insts.log" 2>&1; grep -v "rel err" "$LOGS/probe-evict-insts.log" | tee -a "$OUT/summary.txt"
  for which in "cluster 4096 128,256,64,4,8,1,64" "cluster 4096 128,256,64,4,8,2,64"; do
    set -- $which
    CFG=$3 ncu -k regex:'matmul' --launch-skip 1 --launch-count 1 --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
      python3 perf/profile_gemm.py $1 $2 > "$LOGS/ncu-insts-$3.txt" 2>&1
    say "ncu $3: $(grep -E '^ +[a-z]' "$LOGS/ncu-insts-$3.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
  done
}

stage_grid() {
  python3 perf/probe_grid.py > "$LOGS/probe-grid.log" 2>&1; grep -v "rel err" "$LOGS/probe-grid.log" | tee -a "$OUT/summary.txt"
  local metrics=gpu__time_duration.sum,lrc__lts2lrc_sectors_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum
  metrics+=,lts__t_sectors_srcunit_ltcfabric_lookup_hit.sum,smsp__inst_executed.sum
  CFG=64,128,64,8,4,4,64,2 ncu -k regex:'matmul' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
    python3 perf/profile_gemm.py cluster 128x8192x8192 > "$LOGS/ncu-grid.txt" 2>&1
  say "ncu 2x2 grid skinny: $(grep -E '^ +[a-z]' "$LOGS/ncu-grid.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
}

stage_ncu4000() {
  local metrics=gpu__time_duration.sum,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum
  metrics+=,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_ltcfabric.sum
  metrics+=,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,launch__grid_size
  for size in 4000 4096; do
    for which in cublas cluster; do
      CFG=128,256,64,4,8,1,64 ncu -k regex:'matmul|nvjet|sm90' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
        python3 perf/profile_gemm.py $which $size > "$LOGS/ncu-4000-$which-$size.txt" 2>&1
      say "ncu $which $size: $(grep -E '^ +[a-z]' "$LOGS/ncu-4000-$which-$size.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
      grep -E '^  [a-zA-Z_].*\(' "$LOGS/ncu-4000-$which-$size.txt" | head -1 | cut -c1-120 | tee -a "$OUT/summary.txt"
    done
  done
}

stage_swap() {
  python3 perf/probe_swap.py > "$LOGS/probe-swap.log" 2>&1; grep -v "rel err" "$LOGS/probe-swap.log" | tee -a "$OUT/summary.txt"
  local metrics=gpu__time_duration.sum,smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum
  metrics+=,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg
  CFG=32,5,64,3,3 ncu -k regex:'matmul' --launch-skip 1 --launch-count 1 --metrics "$metrics" \
    python3 perf/profile_gemm.py swap 4000 > "$LOGS/ncu-swap-4000.txt" 2>&1
  say "ncu swap 4000: $(grep -E '^ +[a-z]' "$LOGS/ncu-swap-4000.txt" | awk '{print $1, $(NF)}' | tr '\n' ' ')"
}

stage_power() {
  python3 perf/probe_power.py ${POWER_ARGS:-} > "$LOGS/probe-power.log" 2>&1; grep -v "rel err" "$LOGS/probe-power.log" | tee -a "$OUT/summary.txt"
}

stage_minmax3() {
  python3 perf/probe_minmax3.py ${MINMAX3_PROGRAMS:-800} > "$LOGS/minmax3.log" 2>&1
  sed -n '/(ptxas, form/,/^$/p' "$LOGS/minmax3.log" | tee -a "$OUT/summary.txt"
}

stage_notebooks() {
  python3 notebooks/run_cells.py notebooks/*.ipynb > "$LOGS/notebooks.log" 2>&1; say "notebooks rc=$?"
}

for s in "${@:-tests}"; do
  for one in $s; do
    say "== $one"
    "stage_$one"
    find perf/results -name '*.json' -newer "$LOGS/install.log" -exec cp {} "$LOGS/" \;
    pack
  done
done

#!/usr/bin/env bash
# The checks and numbers that need a CUDA GPU (a lent H100 / H200), in steps meant to run as
# separate commands (each should fit 10 minutes):
#
#   bash benchmarks/run_gpu_checks.sh build      # CUDA build (TRT_SPEC_CUDA=ON: fails without nvcc)
#   bash benchmarks/run_gpu_checks.sh test       # pytest -m gpu: every kernel and whole models
#   bash benchmarks/run_gpu_checks.sh sanitize   # compute-sanitizer memcheck / racecheck
#   bash benchmarks/run_gpu_checks.sh engines    # write the benchmark's random-weight engines
#   bash benchmarks/run_gpu_checks.sh bench      # bench_gpu.py: trt-spec numbers
#   bash benchmarks/run_gpu_checks.sh bench_hf   # bench_gpu.py: transformers, same report
#   bash benchmarks/run_gpu_checks.sh all        # everything in one go
#   bash benchmarks/run_gpu_checks.sh lease      # one 15-minute lease in one call (see below)
#   bash benchmarks/run_gpu_checks.sh sanitize_real  # all 4 sanitizers, real-shape q4 pair
#   bash benchmarks/run_gpu_checks.sh recheck    # after fixes: build, pytest -m gpu, race/synccheck
#   bash benchmarks/run_gpu_checks.sh profile    # profile_gpu.py: nsys iteration, ncu matmuls
#   bash benchmarks/run_gpu_checks.sh diagnose   # ~3 minutes: where a decode step's time goes
#   bash benchmarks/run_gpu_checks.sh quick      # ~4 minutes: after kernel changes (see below)
#   bash benchmarks/run_gpu_checks.sh followup   # ~8 minutes: what session 24 left (see below)
#   bash benchmarks/run_gpu_checks.sh short      # ~5.5 minutes: a lease's last minutes (see below)
#   bash benchmarks/run_gpu_checks.sh calibrate  # ~8 minutes: a lease's first call (see below)
#   bash benchmarks/run_gpu_checks.sh persistent # ~8 minutes: the persistent forward (see below)
#   bash benchmarks/run_gpu_checks.sh fixed      # ~9 minutes: what a kernel's fixed cost is (below)
#
# `lease` fits one call of the device tool (10 minutes at most, of a 15-minute lease that also
# pays the machine's start): see its comment below. Each part has its own time limit, so a hang
# in one still leaves the others' logs. The GPU machine has no internet: carry `.whl` (the gguf
# wheel, see benchmarks/README.md).
#
# Logs and results go to $OUT when it is set (else benchmarks/results/gpu_logs); bench results
# also to benchmarks/results/. Extra arguments after the step go to bench_gpu.py (e.g.
# --hist benchmarks/results/spec_<date>.json, --skip-7b, --skip-transformers).
set -uo pipefail
cd "$(dirname "$0")/.."
step="${1:-all}"
shift || true
OUT="${OUT:-benchmarks/results/gpu_logs}"
mkdir -p "$OUT"
status=0
TAG="${TAG:-$(date +%F)}"  # the bench report: benchmarks/results/gpu_$TAG.{json,md}
GPU_TEST_FILES=(tests/test_cuda_ops.py tests/test_cuda_engine.py tests/test_cuda_build.py)

run() {  # name, command...: runs it, keeps the log, records the exit code
  local name="$1"
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc" | tee -a "$OUT/summary.txt"
  [[ $rc -eq 0 ]] || status=1
}

# The build, shared by the steps that start on a bare machine: versions to the log, the wheels
# the GPU machine lacks (it has no internet: gguf travels in .whl, carried by the device call),
# then the CUDA build (TRT_SPEC_CUDA=ON fails without nvcc; sm_90 only unless CUDA_ARCHS says),
# installed without dependencies (`python -m pip`: the `pip` on PATH there belongs to another
# Python), and whether the GPU answers: OpRunner("cuda") of the test module (TRT_SPEC_BUILD_TESTS:
# built beside _core in build/<tag>) raises with the reason (e.g. "CUDA driver version is
# insufficient").
build_cuda() {  # time limit of the build in seconds
  { nvidia-smi; uname -r; nvcc --version; \
    python -c "import sys, torch; print(sys.version, torch.__version__)"; \
    echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"; } \
    > "$OUT/versions.txt" 2>&1 || true
  if compgen -G ".whl/*.whl" > /dev/null; then
    run wheels python -m pip install -q --no-index --no-deps .whl/*.whl
  fi
  run build timeout "$1" env \
    CMAKE_ARGS="-DTRT_SPEC_CUDA=ON -DTRT_SPEC_BUILD_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90}" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python -m pip install --no-build-isolation --no-deps \
    --no-index -q .
  run cuda_available env PYTHONPATH="$(ls -d build/cp3*)" python -c \
    "import _trt_spec_testing as T; print(T.OpRunner('cuda').name); print(T.cuda_device_info(0))"
}

# The sampling and speculative-op tests that racecheck / synccheck / initcheck go over.
SYNC_TESTS="sample_matches_cpu or (spec_accept and 4-1000-1000) or spec_lookup or verify_rows"
SYNC_TESTS+=" or attention_tree or (test_attention and pos1)"
# The real-shape q4 pair sampling at T = 0.7 with graphs, batch 1 and 4.
REAL_SAN="real_shape_q4_sampled"

bench_q4() {  # time limit, bench_gpu.py arguments: the q4 numbers of both pairs, saved to $OUT
  local limit="$1"
  shift
  run bench timeout "$limit" python benchmarks/bench_gpu.py --part trt --formats q4 \
    --big-formats q4 --iters 20 --tag "$TAG" "$@"
  cp benchmarks/results/gpu_"$TAG".* "$OUT/" 2>/dev/null || true
}

# A part's time limit held to what is left of CAL_BUDGET seconds (default 540), so that the logs
# are packed before the device call's own limit (the calibrate and persistent steps).
cap() {
  local left=$((${CAL_BUDGET:-540} - SECONDS - 15))
  left=$((left > 1 ? left : 1))
  echo $(($1 < left ? $1 : left))
}

sanitize_ops() {  # time limit, pytest -k filter: racecheck and synccheck over test_cuda_ops.py
  for tool in racecheck synccheck; do
    run "sanitizer_$tool" timeout "$1" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      python -m pytest -m gpu -q -p no:cacheprovider tests/test_cuda_ops.py -k "$2"
  done
}

calibrate_constants() {  # time limit of the build and of the run: the cost model's constants
  # (benchmarks/cpp/gpu_calibrate.cu) as $OUT/calibration.json
  run calib_build timeout "$1" nvcc -O3 -arch=sm_90 -o "$OUT/gpu_calibrate" \
    benchmarks/cpp/gpu_calibrate.cu
  timeout "$1" "$OUT/gpu_calibrate" > "$OUT/calibration.json" 2> "$OUT/calibration.err" || status=1
  rm -f "$OUT/gpu_calibrate"
  cat "$OUT/calibration.json"
}

sanitize_engine() {  # name, time limit (capped), pytest -k filter: the four sanitizers over
  # test_cuda_engine.py
  for tool in memcheck racecheck synccheck initcheck; do
    run "sanitizer_$1_$tool" timeout "$(cap "$2")" \
      compute-sanitizer --tool "$tool" --error-exitcode 3 python -m pytest -m gpu -x -q \
      -p no:cacheprovider tests/test_cuda_engine.py -k "$3"
  done
}

# `lease`: the most of one 15-minute lease in one call of at most 10 minutes (the limits sum to
# 560 s): the build, pytest -m gpu (the q4 real-shape pair's exactness sweep included), the
# engines (every format of the 1.5B / 0.5B pair and the 7B / 0.5B pair, written on every core)
# and the trt-spec numbers, which save after every measurement; memcheck over the real-shape
# q4 pair sampling with graphs at batch 1 and 4 last, as time allows. For a later call:
# `sanitize_real` (all four tools over that test, memcheck with more time), `bench_hf`.
if [[ "$step" == lease ]]; then
  build_cuda 150
  run pytest_gpu timeout 170 python -m pytest -m gpu -q -rs -p no:cacheprovider \
    -o faulthandler_timeout=160 "${GPU_TEST_FILES[@]}"
  run bench_engines timeout 90 python benchmarks/bench_gpu.py --part engines
  run bench timeout 120 python benchmarks/bench_gpu.py --part trt --iters 20 \
    --tag "$TAG" "$@"
  cp benchmarks/results/gpu_"$TAG".* "$OUT/" 2>/dev/null || true
  run sanitizer_real_memcheck timeout 30 compute-sanitizer --tool memcheck --error-exitcode 3 \
    python -m pytest -m gpu -q -p no:cacheprovider tests/test_cuda_engine.py -k "$REAL_SAN"
fi
if [[ "$step" == sanitize_real ]]; then
  for tool in memcheck racecheck synccheck initcheck; do
    run "sanitizer_real_$tool" timeout 140 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      python -m pytest -m gpu -q -p no:cacheprovider tests/test_cuda_engine.py -k "$REAL_SAN"
  done
fi
# `recheck`: after fixes, on a bare machine with a few minutes left: the build, pytest -m gpu,
# and racecheck / synccheck over the sampling and speculative-op tests (small vocabularies).
if [[ "$step" == recheck ]]; then
  build_cuda 150
  run pytest_gpu timeout 110 python -m pytest -m gpu -q -rs -p no:cacheprovider \
    -o faulthandler_timeout=100 "${GPU_TEST_FILES[@]}"
  sanitize_ops 45 "($SYNC_TESTS) and not 151936"
fi
# `profile`: issue 9's profile (benchmarks/profile_gpu.py): nsys over the K = 4 iteration of the
# real-shape q4 pair (kernels per iteration, idle time, time by kernel; CUDA-event timing where
# nsys is missing) and ncu over the q4 / q8 matmul at 1 and 5 rows (DRAM throughput). Meant as a
# second call right after `lease` on the same warm machine (its build and engines); on a bare
# machine it builds first and writes the q4 pair's engine (about a minute).
if [[ "$step" == profile ]]; then
  python -c "import trt_spec._core as c; assert c.cuda_available()" 2>/dev/null || build_cuda 150
  run profile timeout 300 python benchmarks/profile_gpu.py --out "$OUT"
fi
# `diagnose`: a short first call (about 3 minutes with the machine's start) that says where a
# decode step's time goes: the build; the GPU tests whose oracle is the CPU's f32 path (9 failed
# in the first H200 run before the f32 prompt pin); profile_gpu.py's `step` (every kernel of one
# forward under ncu: target and draft at 1 row, target at 5) and `matmul` parts; ncu's
# launch, occupancy, warp-stall and memory sections of the q4 gate/up matmul at 1 and 5 rows,
# and the same with the source counters for two attention calls of a target forward.
if [[ "$step" == diagnose ]]; then
  build_cuda 150
  run pytest_cpu_oracle timeout 90 python -m pytest -m gpu -q -rs -p no:cacheprovider \
    tests/test_cuda_engine.py -k "logits_tiny or prefill_chunks or match_cpu"
  run profile_step timeout 180 python benchmarks/profile_gpu.py --parts step,matmul --out "$OUT"
  ncu_bin="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
  run ncu_matmul_detail timeout 90 "$ncu_bin" --clock-control none --section SpeedOfLight \
    --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis -k regex:matmul_kernel --launch-count 2 \
    python benchmarks/profile_gpu.py --part run-matmul --timing "$OUT/matmul_detail_cases.json"
  # Where a decode's attention call spends its ~16-19 us (session 25, H100: 131 KB of KV at
  # context 128): warp stalls and the hottest instructions of two launches in one target forward.
  run ncu_attention_detail timeout 90 "$ncu_bin" --profile-from-start off --clock-control none \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis \
    -k regex:attention_kernel --launch-count 2 python benchmarks/profile_gpu.py --part run-step \
    --role target --rows 1 --timing "$OUT/attention_detail_step.json"
fi
# `quick`: a short call after kernel changes (about 4 minutes with the machine's start), most
# wanted first: the build; the q4 numbers of the 1.5B / 0.5B pair and of the 7B / 0.5B pair
# (decode steps with and without PDL, the K sweeps, projections; pass --hist; --skip-7b saves
# about 45 s); the GPU engine tests but the f16 real-shape ones (exactness of speculation in
# real shapes, graph replay, the CPU oracle, PDL; -v: what passed shows in a cut-off log) and
# the attention and linear op tests (1 to 40 rows: the tensor-core prefill tiles too); then
# profile_gpu.py's step part: the target at 1 and 5 rows, the draft.
if [[ "$step" == quick ]]; then
  build_cuda 150
  bench_q4 100 "$@"
  run pytest_engine timeout 100 python -m pytest -m gpu -v -rs -p no:cacheprovider \
    -o faulthandler_timeout=95 tests/test_cuda_engine.py \
    -k "not real_shape_logits and not real_shape_speculation_and_graphs"
  run pytest_ops timeout 40 python -m pytest -m gpu -q -rs -p no:cacheprovider \
    tests/test_cuda_ops.py -k "attention or linear"
  run profile_step timeout 120 python benchmarks/profile_gpu.py --parts step \
    --step-cases target:1,target:5,draft:1 --out "$OUT"
fi
# `followup`: one call on a bare machine (about 8 minutes with its start) for what session 24's
# runs left: the build; the q4 numbers of both pairs (pass --hist) with the n-row and prefill
# tables; the GPU engine tests that run 3's limit cut (the batch-4 real-shape q4 sweep, the
# sampled pair with graphs, PDL) and the 1..8-row exactness sweep at batch 1 (9-16-row tiles);
# the matmul and attention op tests; racecheck / synccheck over the sampling and speculative ops.
if [[ "$step" == followup ]]; then
  build_cuda 120
  bench_q4 160 "$@"
  run pytest_engine timeout 100 python -m pytest -m gpu -v -rs -p no:cacheprovider \
    -o faulthandler_timeout=95 tests/test_cuda_engine.py -k "real_shape_q4 or pdl"
  run pytest_ops timeout 40 python -m pytest -m gpu -q -rs -p no:cacheprovider \
    tests/test_cuda_ops.py -k "attention or linear"
  sanitize_ops 40 "($SYNC_TESTS) and not 151936"
fi
# `short`: the last few minutes of a lease (about 5.5 with the machine's start) after kernel
# changes: the build; the q4 numbers of both pairs (pass --hist); the engine tests that go
# through the changed kernels (the CPU oracle, greedy speculation equal to target-only on the
# tiny pairs and the batch-1 real-shape q4 sweep, graph replay) and the attention op tests;
# profile_gpu.py's step part for the target and the draft at one row; racecheck / synccheck over
# the attention op tests.
if [[ "$step" == short ]]; then
  build_cuda 80
  bench_q4 100 "$@"
  run pytest_short timeout 75 python -m pytest -m gpu -v -rs -p no:cacheprovider \
    -o faulthandler_timeout=70 tests/test_cuda_ops.py tests/test_cuda_engine.py -k \
    "attention or logits_tiny or match_cpu or equals_target_only or graph_replay or q4_greedy_spec"
  run profile_step timeout 45 python benchmarks/profile_gpu.py --parts step \
    --step-cases target:1,draft:1 --out "$OUT"
  sanitize_ops 15 "attention_tree or (test_attention and pos1)"
fi
# `calibrate`: a lease's first call (at most 9 minutes, CAL_BUDGET; 10-11 with the machine's
# start): the build;
# the cost model's constants (benchmarks/cpp/gpu_calibrate.cu: copy and read bandwidth, graph
# node and PDL costs, dependent loads from L2 and DRAM, the cross-SM flag hop) as JSON; the
# attention and linear op tests (1-40 rows, the tensor-core tiles); the q4 numbers of both pairs
# (pass --hist) with decode steps and verify rows on the earlier grids and in one wave, and
# prefill chunks on the dp4a and the tensor-core kernels, interleaved in one process; ncu source
# counters over two attention calls of a target forward (and its per-line source page); greedy
# speculation equal to target-only (tiny pairs, the real-shape q4 sweep at batch 1); the 7B
# forward kernel by kernel; racecheck / synccheck over the attention and linear ops.
if [[ "$step" == calibrate ]]; then
  build_cuda 150
  calibrate_constants 60
  run pytest_ops timeout "$(cap 60)" python -m pytest -m gpu -q -rs -p no:cacheprovider \
    -p no:randomly tests/test_cuda_ops.py -k "attention or linear"
  bench_q4 "$(cap 170)" --ks 2,4,6 --no-op-by-op-iterations "$@"
  ncu_bin="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
  run ncu_attention_detail timeout "$(cap 60)" "$ncu_bin" --profile-from-start off \
    --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section MemoryWorkloadAnalysis -k regex:attention_kernel --launch-count 2 \
    --import-source yes --export "$OUT/attention" python benchmarks/profile_gpu.py \
    --part run-step --role target --rows 1 --timing "$OUT/attention_detail_step.json"
  # Where the attention call's time goes, line by line (stall samples per CUDA source line).
  run ncu_attention_source timeout "$(cap 20)" "$ncu_bin" -i "$OUT/attention.ncu-rep" \
    --page source --csv --print-source cuda
  run pytest_exact timeout "$(cap 110)" python -m pytest -m gpu -v -rs -p no:cacheprovider \
    -p no:randomly -o faulthandler_timeout=105 tests/test_cuda_engine.py -k \
    "logits_tiny or match_cpu or equals_target_only or graph_replay or q4_greedy_spec"
  # The 7B shape's forward, kernel by kernel (one row), for the cost model's per-kernel costs.
  run profile_7b timeout "$(cap 60)" python benchmarks/profile_gpu.py --parts step \
    --step-cases target:1 --engine /tmp/trt-spec-gpu-bench/pair7b-q4-s2048.engine --out "$OUT"
  sanitize_ops "$(cap 20)" "attention_tree or (test_attention and pos1) or (linear and q4)"
fi
# `persistent`: the persistent forward (kernels/cuda/forward_program.cuh) against the
# per-operation launches, each with and without the weight prefetch (matmul_prefetch), and
# attention blocks of 4 against 8 warps, and launches streaming the next matmuls' weights
# (set_prefetch_next): first the q4 steps, verify rows and K = 4 iterations
# every way in one process (bench_gpu.py --persistent --prefetch 16384,32768,65536: three
# budgets; the attention warps in every bench_gpu run), then their exactness tests and the four
# sanitizers.
if [[ "$step" == persistent ]]; then
  build_cuda 150
  bench_q4 "$(cap 200)" --ks 4 --no-op-by-op-iterations --persistent \
    --prefetch 16384,32768,65536 "$@"
  run pytest_persistent timeout "$(cap 100)" python -m pytest -m gpu -v -rs -p no:cacheprovider \
    -p no:randomly tests/test_cuda_engine.py \
    -k "persistent or prefetch or attention_warps or next_weights"
  sanitize_engine persistent 45 \
    "(persistent and f16) or (prefetch and 1) or attention_warps or next_weights"
fi
# `fixed`: a lease's first call (at most 9 minutes, CAL_BUDGET; 10-11 with the machine's start)
# that asks what a one-row kernel's fixed cost (a matmul ~8 us, a decode attention ~20 us, for a
# few microseconds of bytes) is made of: the build; the calibration, now with a dependent load
# past L2 and past the TLB, and an SM's instruction fetch cold and warm by code size (the
# decode kernels hold 70-120 KiB of code each: benchmarks/kernel_code.py); the target's and the
# draft's one-row forward kernel by kernel with each kernel's code bytes and what its warps wait
# on (profile_gpu.py step: ncu WarpStateStats); the q4 steps, verify rows and K = 4 iterations
# with the persistent forward, the weight prefetch, the next-weights hints, 8-warp attention and
# the one-row attention instance (less code) against the per-operation launches, and each
# layer's attention or qkv projection launched twice (what a warm launch costs), in one process;
# the switches' exactness tests; the four sanitizers over them, as time allows.
if [[ "$step" == fixed ]]; then
  build_cuda 150
  calibrate_constants 90
  run profile_step timeout "$(cap 130)" python benchmarks/profile_gpu.py --parts step \
    --step-cases target:1,draft:1 --out "$OUT"
  bench_q4 "$(cap 170)" --ks 4 --no-op-by-op-iterations --persistent --prefetch 32768 "$@"
  run pytest_switches timeout "$(cap 90)" python -m pytest -m gpu -v -rs -p no:cacheprovider \
    -p no:randomly tests/test_cuda_engine.py \
    -k "persistent or prefetch or attention_warps or one_row or next_weights or repeated or q4_greedy_spec"
  sanitize_engine switches 30 "(persistent and f16) or (prefetch and 1) or attention_warps or \
one_row or next_weights or repeated"
fi
if [[ "$step" == build || "$step" == all ]]; then
  build_cuda 600
fi
if [[ "$step" == test || "$step" == all ]]; then
  run pytest_gpu python -m pytest -m gpu -q -rs -p no:cacheprovider "${GPU_TEST_FILES[@]}"
  # The build checks (device names, auto picking the GPU) on a GPU machine.
  run pytest_cuda_build python -m pytest -q -p no:cacheprovider tests/test_cuda_build.py
fi
if [[ "$step" == sanitize || "$step" == all ]]; then
  # memcheck slows kernels 10-100x: the tiny-model and op tests (real shapes excluded).
  run sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 \
    python -m pytest -m gpu -x -q -p no:cacheprovider -k "not real_shape and not 151936" \
    tests/test_cuda_ops.py tests/test_cuda_engine.py
  for tool in racecheck synccheck initcheck; do
    run "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      python -m pytest -m gpu -x -q -p no:cacheprovider tests/test_cuda_ops.py \
      -k "$SYNC_TESTS"
  done
fi
if [[ "$step" == engines || "$step" == all ]]; then
  run bench_engines python benchmarks/bench_gpu.py --part engines "$@"
fi
if [[ "$step" == bench || "$step" == all ]]; then
  run bench python benchmarks/bench_gpu.py --part trt --tag "$TAG" "$@"
fi
if [[ "$step" == bench_hf || "$step" == all ]]; then
  run bench_hf python benchmarks/bench_gpu.py --part transformers --tag "$TAG" "$@"
fi
if [[ "$step" == bench* || "$step" == all ]]; then
  cp benchmarks/results/gpu_"$TAG".json benchmarks/results/gpu_"$TAG".md "$OUT/" 2>/dev/null || true
fi
# The device tool brings back at most 8 files of $OUT: pack them into one.
if [[ "$OUT" != benchmarks/results/gpu_logs ]] && (($(ls "$OUT" | wc -l) > 1)); then
  tar czf /tmp/gpu_logs.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/gpu_logs.tgz "$OUT/"
fi
echo "== done ($step): $([[ $status -eq 0 ]] && echo ok || echo FAILURES, see $OUT)"
exit $status

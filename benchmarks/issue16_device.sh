#!/usr/bin/env bash
# Issue 16 on the GPU machine, in steps that fit its calls: the side-by-side settings, the
# profile, the bf16 drift and the GPU tests, each step's output kept as it goes. Run from the
# repository root after the wheel install line of ../shared/device/README.md, with
# .reference/ prepared as the top of side_by_side.py says and the courthouse images in
# .data/courthouse (the shared folder does not travel).
# Usage: benchmarks/issue16_device.sh STEPS...
#   prepare      lingbot-ros-prepare for the timed configuration (kernels built ahead, timed)
#   sbs          side_by_side.py, both settings (torch_compile on, float16 heads)
#   bench        lingbot-ros-bench --profile, the same configuration
#   bench_exact  the same with the GELUs after fc1 as kernels of their own
#                (benchmarks/bench_variant.py exact_gelu): what 5f9f8af buys
#   drift        bf16_drift.py: ours in float32, float16 heads eager and compiled, the reference
#   tests        the GPU tests (test_cache_gpu, test_graphs_gpu, test_engine_gpu first),
#                at most TESTS_S seconds (default 200)
#   use_kernels  FlashInfer's kernels of an earlier call, from .kernels/ (carried), loaded
#                without building them (benchmarks/device_kernels.sh use)
#   save_kernels the kernels built in this call into $OUT, for the next (device_kernels.sh save)
# COMMIT names our commit for the results (the machine's copy of .git may be stale);
# LOGS is where the outputs collect (default /tmp/issue16); each step ends by packing them
# into $OUT/issue16_logs.tgz, so a call cut short still returns what finished.
set -uo pipefail
PY=${PYTHON:-python3}
LOGS=${LOGS:-/tmp/issue16}
COMMIT=${COMMIT:-$(cat .reference/OURS_COMMIT 2>/dev/null || git rev-parse HEAD)}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
BENCH=(--preset release --device cuda --dtype bfloat16 --frames 100 --compile --head-dtype float16
       --profile)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
echo "ours $COMMIT" | tee -a "$LOGS/gpu.txt"
for step in "$@"; do
  echo "=== $step ($(date +%T))"; t0=$SECONDS
  case $step in
    prepare) $PY -m lingbot_ros.tools.prepare --set preset:=release --set dtype:=bfloat16 \
                 --set torch_compile:=true --set head_dtype:=float16 2>&1 | tee "$LOGS/prepare.txt" ;;
    sbs) $PY benchmarks/side_by_side.py --reference .reference --ours-compile \
             --ours-head-dtype float16 --ours-commit "$COMMIT" --budget-s 400 \
             --reference-timeout-s 140 --ours-timeout-s 90 --out "$LOGS/sbs" 2>&1 | tail -n 24 ;;
    bench) $PY -m lingbot_ros.tools.bench "${BENCH[@]}" --out "$LOGS/bench.json" \
               > "$LOGS/bench.txt" 2>&1; tail -n 3 "$LOGS/bench.txt" ;;
    bench_exact) $PY benchmarks/bench_variant.py exact_gelu "${BENCH[@]}" --out "$LOGS/$step.json" \
                     > "$LOGS/$step.txt" 2>&1
                 tail -n 3 "$LOGS/$step.txt" ;;
    drift) timeout 430 $PY benchmarks/bf16_drift.py --reference .reference --images .data/courthouse \
               --runs ours-fp32,ours-bf16-heads16,ours-bf16-heads16-compiled,ref-fp32,ref-bf16 \
               --ours-commit "$COMMIT" --work /tmp/issue16_drift --resume --timeout 200 \
               --out "$LOGS/drift" > "$LOGS/drift_stdout.txt" 2>&1
           tail -n 22 "$LOGS/drift/bf16_drift.txt" 2>/dev/null || tail -n 20 "$LOGS/drift_stdout.txt" ;;
    use_kernels) bash benchmarks/device_kernels.sh use .kernels ;;
    save_kernels) bash benchmarks/device_kernels.sh save "${OUT:-/tmp}" ;;
    tests) timeout "${TESTS_S:-200}" $PY -m pytest -q -ra test/test_cache_gpu.py test/test_graphs_gpu.py test/test_engine_gpu.py \
               test/test_gelu_linear.py test/test_head_dtype.py test/test_compiled_blocks.py \
               test/test_words.py test/test_memory_gpu.py 2>&1 | tee "$LOGS/gpu_tests.txt" | tail -n 8 ;;
    *) echo "unknown step: $step (prepare sbs bench bench_exact drift tests use_kernels save_kernels)"; exit 2 ;;
  esac
  echo "$step: $((SECONDS - t0)) s" | tee -a "$LOGS/steps.txt"
  [[ -n ${OUT:-} ]] && tar -czf "$OUT/issue16_logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
done

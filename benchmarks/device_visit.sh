#!/usr/bin/env bash
# Copyright 2026 The lingbot_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# The GPU figures of the shipped configuration (config/lingbot.yaml, release structure, random
# weights), step by step, each step's output packed into $OUT as it ends so that a run cut
# short still returns what finished. Run from the repository root on the GPU machine after the
# wheel line of ../shared/device/README.md (the --ros wheels). Carried, git-ignored:
# .reference/ (the reference checkout, see the top of side_by_side.py), .data/courthouse (the
# sample images) and, from an earlier run, .kernels/flashinfer_kernels.tgz.
#
# Usage: benchmarks/device_visit.sh STEPS...
#   use_kernels   FlashInfer's kernels of an earlier run from .kernels/ (no rebuild)
#   save_kernels  this run's FlashInfer kernels into $OUT, for the next (carry them as .kernels/)
#   prepare       lingbot-ros-prepare --params-file config/lingbot.yaml: kernels and compile, timed
#   restart       the node started twice on a checkpoint file after prepare: seconds to active
#   live15 live30 live2
#                 the node over DDS at a 15 Hz camera, a 30 Hz camera and two 15 Hz cameras,
#                 640x480 rgb8, depth + points + map, counted beside it (benchmarks/live_node.py)
#   bench         lingbot-ros-bench --profile: steady frame time, kernels and graph segments
#   bench:N:=V,.. the same without the profile, with parameters changed (--set N:=V each), to
#                 compare a candidate with the shipped file in one call
#   sbs           side_by_side.py: the reference's profiler and ours, both settings
#   drift:SEED    bf16_drift.py on weights drawn with SEED: the reference in float32 and bf16,
#                 ours as shipped (ours-shipped: the parameter table's defaults) and ours in
#                 float32 (the parity yardstick); when every run ends well, its JSON and text
#                 as performance_table.py names them: bf16_drift.{json,txt} for seed 0,
#                 bf16_drift_seed<SEED>.{json,txt} for another; DRIFT_RUNS names other runs
#   tests         the GPU tests, at most TESTS_S seconds (default 200), with what each printed
# COMMIT names our commit in the results (the machine's copy of .git may be stale).
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/device_visit_out}
LOGS=${LOGS:-/tmp/device_visit}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
PARAMS=config/lingbot.yaml
SOURCE=.data/courthouse
mkdir -p "$LOGS" "$OUT"
export PYTHONUNBUFFERED=1
# prepare writes the bytecode the node's modules lack; where torch's folder is read-only it
# says to give Python a writable folder for it, as a robot's image would
torch_dir=$($PY -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
[[ -w $torch_dir ]] || export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/lingbot_pycache}
# the run's figures go into copies of the results files, which come back in the log pack
for f in live side_by_side; do
  [[ -f $LOGS/$f.json ]] || cp "benchmarks/results/$f.json" "$LOGS/$f.json"
done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
echo "ours $COMMIT" | tee -a "$LOGS/gpu.txt"
echo "PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-} PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-}" \
    | tee -a "$LOGS/gpu.txt"
LIVE=(--params "$PARAMS" --source "$SOURCE" --size 640x480 --set preset:=release
      --set publish_depth:=true --set publish_points:=true --set publish_map:=true)
live() {  # name, time limit, then live_node.py arguments
  local name=$1 limit=$2; shift 2
  timeout "$limit" $PY benchmarks/live_node.py "${LIVE[@]}" "$@" --node-log "$LOGS/$name.log" \
      --out "$LOGS/$name" | tail -n 8
}
record() {  # run name in live.json, then live() arguments: the shipped parameter file
  local as=$1; shift
  live "$@" --record "$as" --config shipped --results "$LOGS/live.json" --commit "$COMMIT"
}
for step in "$@"; do
  echo "=== $step ($(date +%T))"; t0=$SECONDS
  case $step in
    use_kernels) bash benchmarks/device_kernels.sh use .kernels ;;
    save_kernels) bash benchmarks/device_kernels.sh save "$OUT" ;;
    prepare) $PY -m lingbot_ros.tools.prepare --params-file "$PARAMS" --set preset:=release \
                 2>&1 | tee "$LOGS/prepare.txt" ;;
    restart) ckpt=/tmp/lingbot_random_release.safetensors
             [[ -f $ckpt ]] || $PY benchmarks/random_checkpoint.py --preset release --out "$ckpt" \
                 | tee -a "$LOGS/restart.txt"
             for pass in 1 2; do
               live "restart_$pass" 150 --rate 15 --frames 60 --warmup 0 --block 60 \
                   --set checkpoint:="$ckpt" | head -n 3 | tee -a "$LOGS/restart.txt"
             done ;;
    live15) record 15hz live_15hz 150 --rate 15 --frames 450 ;;
    live30) record 30hz live_30hz 150 --rate 30 --frames 900 --block 250 ;;
    live2) record 2cam_15hz live_2cam_15hz 150 --rate 15 --frames 450 --cameras 2 ;;
    bench) $PY -m lingbot_ros.tools.bench --params-file "$PARAMS" --frames 100 --profile \
               --out "$LOGS/model_bench.json" > "$LOGS/model_bench.txt" 2>&1
           tail -n 3 "$LOGS/model_bench.txt" ;;
    bench:*) sets=(); IFS=, read -ra pairs <<< "${step#bench:}"
             for pair in "${pairs[@]}"; do sets+=(--set "$pair"); done
             name=model_bench_$(tr -c 'A-Za-z0-9_\n' _ <<< "${step#bench:}")
             $PY -m lingbot_ros.tools.bench --params-file "$PARAMS" --frames 100 "${sets[@]}" \
                 --out "$LOGS/$name.json" > "$LOGS/$name.txt" 2>&1
             tail -n 1 "$LOGS/$name.txt" ;;
    sbs) $PY benchmarks/side_by_side.py --reference .reference --ours-commit "$COMMIT" \
             --budget-s 400 --reference-timeout-s 140 --ours-timeout-s 100 --out "$LOGS/sbs" \
             --record --config shipped --results "$LOGS/side_by_side.json" 2>&1 | tail -n 24 ;;
    drift:*) seed=${step#drift:}
             name=bf16_drift; [[ $seed == 0 ]] || name=bf16_drift_seed$seed
             timeout 480 $PY benchmarks/bf16_drift.py --reference .reference --images "$SOURCE" \
                 --runs "${DRIFT_RUNS:-ref-fp32,ref-bf16,ours-shipped,ours-fp32}" --seed "$seed" \
                 --ours-commit "$COMMIT" --work "/tmp/drift_$seed" --resume --timeout 300 \
                 --out "$LOGS/drift_seed$seed" > "$LOGS/drift_seed${seed}_stdout.txt" 2>&1 \
               && for ext in json txt; do
                    cp "$LOGS/drift_seed$seed/bf16_drift.$ext" "$LOGS/$name.$ext"
                  done
             tail -n 20 "$LOGS/drift_seed$seed/bf16_drift.txt" 2>/dev/null \
                 || tail -n 20 "$LOGS/drift_seed${seed}_stdout.txt" ;;
    tests) timeout "${TESTS_S:-200}" $PY -m pytest -q -rA -m gpu test --ignore=test/unit/test_flake8.py \
               --ignore=test/unit/test_pep257.py 2>&1 \
               | tee "$LOGS/gpu_tests.txt" | tail -n 8 ;;
    *) echo "unknown step: $step"; exit 2 ;;
  esac
  echo "$step: $((SECONDS - t0)) s" | tee -a "$LOGS/steps.txt"
  tar -czf "$OUT/device_visit_logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
done

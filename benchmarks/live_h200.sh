#!/usr/bin/env bash
# Issue 14 on the H200, one call: kernels built ahead (lingbot-ros-prepare, timed), then the
# live node over DDS counted beside it (benchmarks/live_node.py): 15 Hz with our executor and
# with rclpy's, 30 Hz, two cameras at 15 Hz. Release structure, bf16, depth + points + map,
# 640x480 rgb8 from the courthouse images. Run from the repository root after the wheel
# install line of ../shared/device/README.md; OUT is the folder the results go to.
# Usage: benchmarks/live_h200.sh [FRAMES_15HZ] [STEPS...]
#   steps: use_kernels save_kernels floor dds prepare 15 rclpy 30 two soak restart outputs30 15p 30p twop soakp restartp
#   15p 30p twop soakp restartp: 15, 30, two, soak and restart with the model in a process
#   of its own (model_process:=true), written beside the in-process runs as *_model_process
#   floor: the ROS floor (benchmarks/ros_floor.py): a relay in the node's place sends a
#   frame's messages at once for each image, with and without the depth image, and through
#   the node's queue, worker and output thread (--threads)
#   dds: DDS alone, the package's transport profile (DDS_TRANSPORTS="--transport default ..."
#   for others): what arrives and the stamp-to-callback floor
#   outputs30: 30 Hz three times, all outputs; without the map and the path; the pose alone
#   (odometry, TF, camera_info): what each group of outputs costs the step and its p99
#   restart: a random-weight checkpoint file of the structure (untimed), then the node started
#   on it twice (start-up by phase in the node's log and the report's first lines)
#   use_kernels / save_kernels: FlashInfer's kernels of an earlier call from .kernels/, or this
#   call's into $OUT for the next (benchmarks/device_kernels.sh)
# SET="name:=value ..." adds node parameters to every step (e.g. SET="torch_compile:=true";
# prepare then compiles ahead too)
set -uo pipefail
OUT=${OUT:-/tmp/live_out}
mkdir -p "$OUT/logs"
N=${1:-900}
shift || true
STEPS=${*:-prepare 15 rclpy 30 two}
PY=${PYTHON:-python3}
SPY=${PY_SPY:-}
PRESET=${PRESET:-release}  # tiny: a dry run on a CPU
# ../shared does not travel to the GPU machine: a copy of the images in .data/ (git-ignored)
SOURCE=${SOURCE:-$( [[ -d .data/courthouse ]] && echo .data/courthouse || echo ../shared/data/courthouse)}
COMMON=(--source "$SOURCE" --set preset:=$PRESET --set dtype:=${DTYPE:-bfloat16} --set publish_depth:=true
        --set publish_points:=true --set publish_map:=true --size 640x480)
EXTRA=()
for item in ${SET:-}; do EXTRA+=(--set "$item"); done
COMMON+=("${EXTRA[@]}")
run() {  # name, seconds it may take, then live_node.py arguments
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date +%T))"
  timeout "$limit" $PY benchmarks/live_node.py "${COMMON[@]}" "$@" --node-log "$OUT/logs/$name.log" \
      --out "$OUT/logs/$name" | tail -n 12
}
for step in $STEPS; do
  case $step in
    dds) echo "=== dds ($(date +%T))"
         for r in 15 30; do
           timeout 200 $PY benchmarks/dds_images.py --source "$SOURCE" --rate $r --frames $((r * 10)) \
               ${DDS_TRANSPORTS:---transport package} \
               | tee -a "$OUT/logs/dds_images.txt"
         done ;;
    use_kernels) bash benchmarks/device_kernels.sh use .kernels ;;
    save_kernels) bash benchmarks/device_kernels.sh save "$OUT" ;;
    floor) echo "=== floor ($(date +%T))"
           timeout 150 $PY benchmarks/ros_floor.py --source "$SOURCE" --rate 15 --frames 450 \
               --out "$OUT/logs/ros_floor_15hz" | tail -n 4
           timeout 150 $PY benchmarks/ros_floor.py --source "$SOURCE" --rate 15 --frames 450 \
               --no-depth --out "$OUT/logs/ros_floor_15hz_no_depth" | tail -n 4
           timeout 150 $PY benchmarks/ros_floor.py --source "$SOURCE" --rate 15 --frames 450 \
               --threads --out "$OUT/logs/ros_floor_15hz_threads" | tail -n 4 ;;
    prepare) for pass in ${PREPARE_PASSES:-first}; do
               echo "=== prepare, $pass ($(date +%T))"; t0=$SECONDS
               $PY -m lingbot_ros.tools.prepare --set preset:=$PRESET \
                   --set dtype:=${DTYPE:-bfloat16} "${EXTRA[@]}" 2>&1 | tee -a "$OUT/logs/prepare.txt"
               echo "prepare $pass: $((SECONDS - t0)) s wall" | tee -a "$OUT/logs/prepare.txt"
             done ;;
    15) run live_15hz $((N / 15 + 90)) --rate 15 --frames "$N" \
            ${SPY:+--profile-seconds 15 --py-spy "$SPY" --profile-mode ${PROFILE_MODE:-gil}} ;;
    rclpy) run live_15hz_rclpy_executor $((N / 30 + 90)) --rate 15 --frames $((N / 2)) \
               --set executor:=rclpy ;;
    30) run live_30hz $((N / 10 + 90)) --rate 30 --frames $((N * 8 / 3)) --block 500 ;;
    two) run live_2cam_15hz $((N / 15 + 90)) --rate 15 --frames "$N" --cameras 2 ;;
    outputs30) n30=$((N * 2))
               run live_30hz_all $((n30 / 30 + 90)) --rate 30 --frames $n30 --block 500
               run live_30hz_no_map_path $((n30 / 30 + 90)) --rate 30 --frames $n30 --block 500 \
                   --set publish_map:=false --set publish_path:=false
               run live_30hz_pose_only $((n30 / 30 + 90)) --rate 30 --frames $n30 --block 500 \
                   --set publish_map:=false --set publish_path:=false --set publish_depth:=false \
                   --set publish_points:=false ;;
    soak) run live_30hz_10k 520 --rate 30 --frames 10000 --block 1000 --warmup 200 ;;
    15p) run live_15hz_model_process $((N / 15 + 90)) --rate 15 --frames "$N" \
             --set model_process:=true ;;
    30p) run live_30hz_model_process $((N / 10 + 90)) --rate 30 --frames $((N * 8 / 3)) \
             --block 500 --set model_process:=true ;;
    twop) run live_2cam_15hz_model_process $((N / 15 + 90)) --rate 15 --frames "$N" \
              --cameras 2 --set model_process:=true ;;
    soakp) run live_30hz_10k_model_process 520 --rate 30 --frames 10000 --block 1000 \
               --warmup 200 --set model_process:=true ;;
    restartp) CKPT=${CKPT:-/tmp/lingbot_random_$PRESET.safetensors}
              [[ -f $CKPT ]] || $PY benchmarks/random_checkpoint.py --preset $PRESET --out "$CKPT" \
                  | tee -a "$OUT/logs/restart.txt"
              for pass in 1 2; do
                run restart_model_process_$pass 120 --rate 15 --frames 60 --warmup 0 --block 60 \
                    --set checkpoint:="$CKPT" --set model_process:=true | head -n 3 \
                    | tee -a "$OUT/logs/restart.txt"
              done ;;
    restart) CKPT=${CKPT:-/tmp/lingbot_random_$PRESET.safetensors}
             [[ -f $CKPT ]] || $PY benchmarks/random_checkpoint.py --preset $PRESET --out "$CKPT" \
                 | tee -a "$OUT/logs/restart.txt"
             for pass in 1 2; do
               run restart_$pass 120 --rate 15 --frames 60 --warmup 0 --block 60 \
                   --set checkpoint:="$CKPT" | head -n 3 | tee -a "$OUT/logs/restart.txt"
             done ;;
  esac
  tar -czf "$OUT/live_logs.tgz" -C "$OUT" logs  # after every step: a later one may be cut off
done

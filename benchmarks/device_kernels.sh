#!/usr/bin/env bash
# FlashInfer's attention kernels, carried from one device call to the next.
#
# The GPU machine keeps nothing under ~/.cache between calls, so every call rebuilt the
# kernels (60-100 s of nvcc, about a sixth of a call). FlashInfer loads a kernel library
# without building it when it finds it in its AOT folder (FLASHINFER_AOT_DIR, inside the
# installed package: data/aot/<name>/<name>.so); what it builds at run time goes to
# ~/.cache/flashinfer/<version>/<arch>/cached_ops/<name>/<name>.so.
# Usage: benchmarks/device_kernels.sh save DIR   pack the libraries built here into
#                                                 DIR/flashinfer_kernels.tgz (DIR: $OUT)
#        benchmarks/device_kernels.sh use DIR    unpack DIR/flashinfer_kernels.tgz into the
#                                                 AOT folder, if FlashInfer's version and the
#                                                 GPU's architecture are the ones it was built for
# Run after the wheel install line of ../shared/device/README.md. Nothing of this is
# committed: DIR is an ignored folder carried to the machine, or $OUT on it.
set -uo pipefail
PY=${PYTHON:-python3}
verb=${1:-}; dir=${2:-}
[[ -n $verb && -n $dir ]] || { echo "usage: $0 save|use DIR"; exit 2; }
read -r version jit aot < <($PY - <<'PYTHON'
from flashinfer.jit import env
print(env.flashinfer_version, env.FLASHINFER_WORKSPACE_DIR, env.FLASHINFER_AOT_DIR)
PYTHON
) || { echo "device_kernels: FlashInfer does not import"; exit 1; }
tag="$version/$(basename "$jit")"  # the version and the architecture folder, e.g. 0.6.18.post1/90a
case $verb in
  save) libs=$(cd "$jit/cached_ops" 2>/dev/null && find . -mindepth 2 -maxdepth 2 -name '*.so')
        [[ -n $libs ]] || { echo "device_kernels: nothing built in $jit/cached_ops"; exit 0; }
        mkdir -p "$dir"
        echo "$tag" > /tmp/flashinfer_kernels_tag
        tar -czf "$dir/flashinfer_kernels.tgz" -C /tmp flashinfer_kernels_tag -C "$jit/cached_ops" $libs
        echo "device_kernels: $(echo "$libs" | wc -l) libraries of $tag," \
             "$(du -h "$dir/flashinfer_kernels.tgz" | cut -f1) packed (16 MiB at most come back)" ;;
  use) pack="$dir/flashinfer_kernels.tgz"
       [[ -f $pack ]] || { echo "device_kernels: no $pack, the kernels build at first use"; exit 0; }
       got=$(tar -xzOf "$pack" flashinfer_kernels_tag)
       if [[ $got != "$tag" ]]; then
         echo "device_kernels: $pack holds $got, this machine runs $tag: not used"; exit 0
       fi
       mkdir -p "$aot" && tar -xzf "$pack" -C "$aot" --exclude flashinfer_kernels_tag
       echo "device_kernels: $(tar -tzf "$pack" | grep -c '\.so$') libraries of $tag in $aot" ;;
  *) echo "usage: $0 save|use DIR"; exit 2 ;;
esac

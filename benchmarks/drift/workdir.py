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

"""
The work folder every child reads: the images, the weights file and the job, written once.

``images.npy`` (the preprocessed ping-pong stack), ``weights.safetensors`` (the drawn
weights, several GB for the released structure: never under ``--out``), ``weights_info.json``
and ``job.json`` (the settings and what the children need). With ``resume`` a folder whose
job is the same is reused as it stands, and the runs that finished in it with it.
"""

import dataclasses
import json
from pathlib import Path
import time
from typing import Optional, Tuple

from drift.images import image_stack
from drift.reference import reference_constructor_args
from drift.runs import Settings
from drift.weights import weight_plan, write_checkpoint

import numpy as np


def prepare(settings: Settings, reference: Optional[Path], folder: Path, work: Path,
            resume: bool) -> Tuple[dict, dict, float]:
    """Write images.npy, weights.safetensors and job.json into ``work`` (or reuse them)."""
    t0 = time.monotonic()
    stack, _, image_info = image_stack(folder, settings)
    plan = weight_plan(settings.preset)
    job = {'settings': dataclasses.asdict(settings),
           'reference': str(reference) if reference is not None else None,
           'draws': {s.key: s.draw.value for s in plan}, 'images_sha256': image_info['sha256']}
    if settings.preset == 'release':
        job['reference_constructor_args'] = reference_constructor_args(settings)
    job_path, info_path = work / 'job.json', work / 'weights_info.json'
    if resume and job_path.is_file() and info_path.is_file() and \
            (work / 'weights.safetensors').is_file() and (work / 'images.npy').is_file() and \
            json.loads(job_path.read_text()) == job:
        print(f'reusing the images and weights in {work}', flush=True)
        return image_info, json.loads(info_path.read_text()), time.monotonic() - t0
    for old in work.glob('*.npz'):  # arrays of other settings must not be resumed
        old.unlink()
    np.save(work / 'images.npy', stack.numpy())
    weights_info = write_checkpoint(plan, settings.seed, work / 'weights.safetensors',
                                    settings.preset)
    info_path.write_text(json.dumps(weights_info))
    job_path.write_text(json.dumps(job))
    return image_info, weights_info, time.monotonic() - t0

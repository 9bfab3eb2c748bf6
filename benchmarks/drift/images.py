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
The drift's images: the courthouse frames through our preprocessing, played ping-pong.

The frames are preprocessed once, by the function our tools use, and played 0..n-1,
n-2..1, 0.. up to the run's length, so consecutive frames always differ (no repeat at the
turns) and a window fills and evicts as it would on a camera.
"""

import hashlib
from pathlib import Path
from typing import List, Optional, Tuple

from commits import REPO
from drift.runs import Settings

import torch

IMAGE_FOLDERS = (REPO.parent / 'shared' / 'data' / 'courthouse', REPO / '.data' / 'courthouse')


def ping_pong(images: int, frames: int) -> List[int]:
    """Return ``frames`` indices into ``images`` frames: 0..n-1, n-2..1, 0.. (no repeats)."""
    if images < 1:
        raise ValueError('no images to play')
    if images == 1:
        return [0] * frames
    period = 2 * (images - 1)
    return [p if p < images else period - p for p in (i % period for i in range(frames))]


def find_images(given: Optional[str]) -> Path:
    """Return the courthouse folder: ``given``, else the shared copy, else ``.data/``."""
    if given:
        for path in (Path(given), REPO / given):
            if path.is_dir():
                return path.resolve()
        raise FileNotFoundError(f'--images {given}: no such folder')
    for path in IMAGE_FOLDERS:
        if path.is_dir():
            return path.resolve()
    raise FileNotFoundError(f'no courthouse images in {[str(p) for p in IMAGE_FOLDERS]}; '
                            'pass --images')


def image_stack(folder: Path, settings: Settings) -> Tuple[torch.Tensor, List[int], dict]:
    """Preprocess the folder's images as our tools do; return the ping-pong stack and info."""
    from lingbot_ros.model.config import ModelConfig
    from lingbot_ros.streaming.preprocess import list_images, load_images
    paths = list_images(folder)
    patch = ModelConfig.preset(settings.preset).patch_size
    base = load_images(paths, settings.image_size, patch)
    order = ping_pong(len(paths), settings.frames)
    stack = base[order].contiguous()
    info = {'folder': str(folder), 'files': len(paths), 'first': paths[0].name,
            'last': paths[-1].name, 'model_hw': list(stack.shape[-2:]),
            'preprocessing': f'lingbot_ros.streaming.preprocess.load_images(image_size='
                             f'{settings.image_size}, patch_size={patch})',
            'order': 'ping-pong ' + ','.join(map(str, order[:3])) + ',...,'
                     + ','.join(map(str, order[-3:])),
            'sha256': hashlib.sha256(stack.numpy().tobytes()).hexdigest()}
    return stack, order, info

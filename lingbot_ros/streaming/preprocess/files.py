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
Image and video files -> model input, through Pillow exactly as the reference reads them.

The reference resizes with Pillow's bicubic filter to width ``image_size`` and a height
rounded to the patch size (:func:`~.transform.plan_transform`), keeps the centre
``image_size`` rows of taller results, and scales to [0, 1]. Images of different sizes
in one stack are centred on the largest grid over white.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator, List, Sequence, Tuple, Union

from lingbot_ros.streaming.preprocess.transform import FrameTransform, plan_transform, TO_UNIT
import numpy as np
import torch

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')

PathLike = Union[str, Path]


def pil():
    """Return Pillow's ``Image`` and ``ImageOps``, or say how to install it."""
    try:
        from PIL import Image, ImageOps
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError('reading image files needs Pillow (pip install Pillow, '
                          'or the python3-pil package)') from exc
    return Image, ImageOps


def _open_rgb(source, name: str):
    """Open like the reference: EXIF orientation, RGBA over white, then RGB."""
    image_mod, image_ops = pil()
    try:
        img = image_mod.open(source)
        img = image_ops.exif_transpose(img)
        if img.mode == 'RGBA':
            white = image_mod.new('RGBA', img.size, (255, 255, 255, 255))
            img = image_mod.alpha_composite(white, img)
        return img.convert('RGB')
    except (OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f'{name}: not a readable image ({exc})') from exc


def load_rgb(path: PathLike) -> np.ndarray:
    """Read an image file as ``uint8 [H, W, 3]`` RGB, oriented and flattened as upstream."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'{path}: no such image file')
    return np.asarray(_open_rgb(path, str(path)))


def pil_to_model(img, plan: FrameTransform) -> torch.Tensor:
    """Resize a Pillow RGB image onto ``plan``'s grid with Pillow: ``float32 [3, h, w]``."""
    image_mod, _ = pil()
    new_h, new_w = plan.resized_hw
    resized = img.resize((new_w, new_h), image_mod.Resampling.BICUBIC)
    arr = np.asarray(resized)[plan.offset_xy[1]:plan.offset_xy[1] + plan.model_hw[0]]
    return TO_UNIT[torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
                   .long()]


def _stack_padded(images: List[torch.Tensor], plans: List[FrameTransform]
                  ) -> Tuple[torch.Tensor, List[FrameTransform]]:
    """Centre differently sized grids on the largest one, filling with white (1.0)."""
    hw = (max(p.model_hw[0] for p in plans), max(p.model_hw[1] for p in plans))
    out = torch.ones((len(images), 3) + hw, dtype=torch.float32)
    done = []
    for i, (img, plan) in enumerate(zip(images, plans)):
        top, left = (hw[0] - img.shape[1]) // 2, (hw[1] - img.shape[2]) // 2
        out[i, :, top:top + img.shape[1], left:left + img.shape[2]] = img
        done.append(plan.padded(hw))
    return out, done


def load_images_with_transforms(paths: Sequence[PathLike], image_size: int = 518,
                                patch_size: int = 14
                                ) -> Tuple[torch.Tensor, List[FrameTransform]]:
    """Load and preprocess image files: ``float32 [S, 3, H, W]`` in [0, 1] and transforms."""
    if not paths:
        raise ValueError('no images given')
    images, plans = [], []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f'{path}: no such image file')
        img = _open_rgb(path, str(path))
        plan = plan_transform((img.height, img.width), image_size, patch_size)
        images.append(pil_to_model(img, plan))
        plans.append(plan)
    return _stack_padded(images, plans)


def load_images(paths: Sequence[PathLike], image_size: int = 518,
                patch_size: int = 14) -> torch.Tensor:
    """Load and preprocess image files into ``float32 [S, 3, H, W]`` in [0, 1]."""
    return load_images_with_transforms(paths, image_size, patch_size)[0]


def list_images(folder: PathLike) -> List[Path]:
    """Image files (.jpg/.jpeg/.png, any case) of a folder, sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f'{folder}: no such folder')
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise ValueError(f'{folder}: no .jpg/.jpeg/.png images in this folder')
    return files


def load_image_folder(folder: PathLike, image_size: int = 518,
                      patch_size: int = 14) -> torch.Tensor:
    """Preprocess every image of a folder (sorted by name) into ``float32 [S, 3, H, W]``."""
    return load_images(list_images(folder), image_size, patch_size)


def video_frames(path: PathLike, fps: float = 10.0) -> Iterator[np.ndarray]:
    """
    Yield ``uint8 [H, W, 3]`` RGB frames of a video, sampled and re-encoded as upstream.

    Keeps every ``round(source_fps / fps)``-th frame and passes it through a default
    OpenCV JPEG encode and a Pillow decode, which is what the reference's model sees.
    """
    import cv2

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'{path}: no such video file')
    if fps <= 0:
        raise ValueError(f'fps={fps} is invalid: expected > 0')
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise ValueError(f'{path}: OpenCV cannot open this video')
    try:
        interval = max(1, round((cap.get(cv2.CAP_PROP_FPS) or 30) / fps))
        index = 0
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            if index % interval == 0:
                ok, jpeg = cv2.imencode('.jpg', frame)
                if not ok:
                    raise ValueError(f'{path}: frame {index} cannot be JPEG-encoded')
                yield np.asarray(_open_rgb(io.BytesIO(jpeg.tobytes()), f'{path}[{index}]'))
            index += 1
    finally:
        cap.release()


def load_video(path: PathLike, fps: float = 10.0, image_size: int = 518,
               patch_size: int = 14) -> torch.Tensor:
    """Preprocess a video's sampled frames into ``float32 [S, 3, H, W]``."""
    image_mod, _ = pil()
    frames = [pil_to_model(image_mod.fromarray(f),
                           plan_transform(f.shape[:2], image_size, patch_size))
              for f in video_frames(path, fps)]
    if not frames:
        raise ValueError(f'{path}: the video has no readable frames')
    return torch.stack(frames)

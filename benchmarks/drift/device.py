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

"""What both sides' runs do to the device alike: wait for it, set its float32 maths, name it."""

import os
import platform

import torch


def sync(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (nothing to wait for on the CPU)."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def set_float32_matmuls(strict: bool) -> dict:
    """Switch TF32 off (strict) or leave PyTorch's defaults; return the resulting flags."""
    if strict:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return {'matmul_tf32': bool(torch.backends.cuda.matmul.allow_tf32),
            'cudnn_tf32': bool(torch.backends.cudnn.allow_tf32)}


def device_name(device: torch.device) -> str:
    """Return a readable name of ``device``."""
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return f'CPU {platform.processor() or platform.machine()} ({os.cpu_count()} cores, ' \
           f'{torch.get_num_threads()} torch threads)'

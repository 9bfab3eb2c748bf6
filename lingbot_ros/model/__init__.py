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
The network, pure PyTorch; no pages, no ROS.

Patch embedding, the aggregator's frame and global blocks, the camera and depth heads,
3D RoPE and pose encodings, the model configuration and presets, checkpoint loading
(key for key, strictly), ``hf://`` checkpoint resolution, CUDA-graph capture of a
streaming frame and the ``torch.compile`` pieces.

It sees a KV cache only through :class:`~.cached_attention.CachedAttention` (and
:class:`~.graphs.StagedAttention` inside a graph), which the streaming layer fills. May
import torch, safetensors and huggingface_hub; never the ``cache`` package,
``streaming``, ``ros`` or ``tools``.
"""

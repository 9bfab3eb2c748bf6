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
The paged KV cache and attention over it; knows nothing of the model.

Public API (see each module): :class:`PagedStreamCache` (one stream; a drop-in for
:class:`DenseStreamCache`), :class:`StreamBatch` (several streams of one pool, one
attention call per layer), :class:`AttentionBackend` (how either runs attention),
:class:`StreamLayout` with :func:`aggregator_layout` and :func:`camera_head_layout`
(bounds and pool-size formula), :class:`KVPool`, :class:`CacheOverflow` (the typed
overflow event), :class:`CacheStats`.
"""

from importlib import import_module
from typing import Any

# name -> the module that defines it; imported on first use (PEP 562), so importing one
# submodule (the node's process needs only ``stats``) does not import torch with the rest
_WHERE = {'AttentionBackend': 'backend_choice', 'StreamBatch': 'batch',
          'DenseStreamCache': 'dense', 'aggregator_layout': 'layout',
          'camera_head_layout': 'layout', 'StreamLayout': 'layout', 'CacheOverflow': 'overflow',
          'KVPool': 'pool', 'CacheStats': 'stats', 'PagedStreamCache': 'stream'}

__all__ = ['aggregator_layout', 'AttentionBackend', 'CacheOverflow', 'CacheStats',
           'camera_head_layout', 'DenseStreamCache', 'KVPool', 'PagedStreamCache', 'StreamBatch',
           'StreamLayout']


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    return getattr(import_module(f'.{where}', __name__), name)

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

Holds the pool (:class:`KVPool`: pages allocated once), one stream's paged cache with
its transaction (:class:`PagedStreamCache`: ``begin`` -> ``attend`` -> ``commit`` or
``rollback``), the slot allocator and page table behind it, the attention backends
(:class:`AttentionBackend`), the layout and its pool-size formula (:class:`StreamLayout`,
:func:`aggregator_layout`, :func:`camera_head_layout`), the typed overflow
(:class:`CacheOverflow`) and :class:`CacheStats`. May import torch, numpy and FlashInfer
(optional, lazily); never the ``model`` package, ``streaming``, ``ros`` or ``tools``.
"""

from importlib import import_module
from typing import Any

# name -> the module that defines it; imported on first use (PEP 562), so importing one
# submodule (the node's process needs only ``stats``) does not import torch with the rest
_WHERE = {'AttentionBackend': 'backend_choice', 'aggregator_layout': 'layout',
          'camera_head_layout': 'layout', 'StreamLayout': 'layout', 'CacheOverflow': 'overflow',
          'KVPool': 'pool', 'CacheStats': 'stats', 'PagedStreamCache': 'stream'}

__all__ = ['aggregator_layout', 'AttentionBackend', 'CacheOverflow', 'CacheStats',
           'camera_head_layout', 'KVPool', 'PagedStreamCache', 'StreamLayout']


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    return getattr(import_module(f'.{where}', __name__), name)

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
``lingbot-ros-bench`` with one speed cut undone in the process: the A/B of that cut.

A cut measured against an older commit is measured across machines and sessions; undone
here, it is measured beside itself, on one machine in one call. Usage::

    python3 benchmarks/bench_variant.py VARIANT [lingbot-ros-bench arguments...]

VARIANT is one of:
  exact_gelu   the GELU after each ``fc1`` as a kernel of its own (``F.gelu(fc(x))``),
               not in the GEMM's epilogue (what ``gelu_linear`` buys)

(A variant ``pieces`` measured the aggregator's layers compiled as one graph each, against
the blocks' pre/post pairs, on an H100 at d110bd6: 45 kernels fewer, the same time. The step
went, since it ran the blocks without ``Module.__call__`` and so without their hooks, and the
variant with it: ``benchmarks/README.md``, thirteenth session.)
"""

from __future__ import annotations

import enum
import sys

from lingbot_ros.model import camera_head, layers
from lingbot_ros.tools import bench
import torch
import torch.nn.functional as F


class Variant(enum.Enum):
    EXACT_GELU = 'exact_gelu'


def exact_gelu(fc: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """Return GELU(fc(x)) as a product and then a GELU kernel."""
    return F.gelu(fc(x))


def undo(variant: Variant) -> None:
    """Undo ``variant``'s cut in this process (before the engine is built)."""
    if variant is Variant.EXACT_GELU:
        layers.gelu_linear = camera_head.gelu_linear = exact_gelu


def main(argv: list[str]) -> int:
    names = [v.value for v in Variant]
    if not argv or argv[0] not in names:
        print(f'usage: bench_variant.py {{{",".join(names)}}} [bench arguments]',
              file=sys.stderr)
        return 2
    undo(Variant(argv[0]))
    return bench.main(argv[1:])


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

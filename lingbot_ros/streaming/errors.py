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
What a session may refuse a frame or a saved state with; importable without torch.

The node handles these before it has loaded any model code, so they name nothing of it.
"""


class FrameRejected(ValueError):
    """
    A frame the model could not use (e.g. a non-finite output).

    Stepped one at a time, the session's state is unchanged. ``frames`` says how many
    frames the rejection costs: 2 when a kept frame queued ahead is found non-finite and
    the frame queued behind it (which attended to it) goes too.
    """

    def __init__(self, text: str = '', frames: int = 1) -> None:
        super().__init__(text, frames)  # both in args: it pickles whole (the model process)
        self.frames = int(frames)

    def __str__(self) -> str:
        return str(self.args[0])


class SizeChanged(ValueError):
    """A frame of another size than the stream's; the state is unchanged (reset to change)."""


class StateError(ValueError):
    """A saved stream state that cannot be resumed; the message is one line saying why."""


class StateMismatch(StateError):
    """A state saved by another model, weights, dtype, image grid or stream settings."""


class StateCorrupt(StateError):
    """A state file that is not one, is cut short, or whose parts do not add up."""


def out_of_memory_error() -> type:
    """
    Return torch's CUDA out-of-memory exception, or a class nothing raises without torch.

    For an ``except`` clause evaluated when an exception arrives: one raised by torch
    (here or unpickled from the model's process) has imported torch by then.
    """
    import sys
    torch = sys.modules.get('torch')
    return getattr(getattr(torch, 'cuda', None), 'OutOfMemoryError', _NoTorchError)


class _NoTorchError(Exception):
    """Stands for torch's out-of-memory error in a process that never imported torch."""

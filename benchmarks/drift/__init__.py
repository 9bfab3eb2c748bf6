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
The parts of ``bf16_drift.py``: our model's bf16 drift and the reference's, on one yardstick.

``runs`` (the run kinds and their engine configurations, ``ours-shipped`` from the parameter
table), ``weights`` (the weight recipe and its file), ``images`` (the frames through our
preprocessing), ``workdir`` (what the children read), ``ours`` and ``reference`` (one run of
each side), ``children`` (each run in its own process), ``layer_trace`` (``--trace``),
``comparison`` and ``report``. Our package is imported only inside functions, except by
``ours``, which only our own children import: the reference's processes never meet it.
"""

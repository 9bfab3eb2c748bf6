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
Checkpoints in, model out: strict, pickle-free, and without a second copy of the weights.

``.pt`` / ``.pth`` files are read with ``torch.load(weights_only=True)`` (memory-mapped
where the format allows), the state dict taken from the top level or from ``'model'``;
``.safetensors`` files are read tensor by tensor. The model is built on the meta device
and the loaded tensors are assigned into it, so a 1.16 B-parameter checkpoint needs its
own size in memory once, not twice. Any missing, unexpected or mis-shaped key is an
error naming the file and the keys.

Files that are not checkpoints at all (empty, text, a Git LFS pointer, a zip archive cut
short, a safetensors header that does not add up) are recognised from their first bytes
before anything is parsed, and every failure is one line naming the file and what it is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
import pickle
import re
import struct
from typing import Callable, Dict, Iterable, Mapping, Optional, Union
import zipfile

import torch
from torch import nn

from .config import ModelConfig
from .layers import LayerScale, low_precision_layer
from .network import LingBotMap

PathLike = Union[str, Path]
TORCH_SUFFIXES = ('.pt', '.pth')
SAFETENSORS_SUFFIX = '.safetensors'
SHOW_KEYS = 5

# What the first bytes say about a file (torch.save writes a zip archive since 1.6,
# a bare pickle, protocol 2, before that).
ZIP_MAGIC = b'PK\x03\x04'
PICKLE_PROTO = 0x80
LFS_POINTER = b'version https://git-lfs.github.com/spec/v1'
SNIFF_BYTES = 1024
# torch.load(weights_only=True) wraps the one line that matters in paragraphs of advice.
WEIGHTS_ONLY_BOILERPLATE = ('Weights only load failed', 'Please file an issue',
                            'Check the documentation', '(1)', '(2)')
REFUSAL_WORDS = ('global', 'class', 'allowlist', 'reduce', 'instantiate', 'blocked')
TEXT_FRACTION = 0.95  # printable share of the first bytes above which a file is text
REASON_CHARS = 300
# safetensors: an 8-byte little-endian header length, then that much JSON.
SAFETENSORS_LENGTH_BYTES = 8
SAFETENSORS_MAX_HEADER = 100_000_000  # the library's own limit

# Seeded random weights: the parity fixtures' recipe (fixture config.json,
# 'weights.rerandomise_rules'); every path is non-zero and activations stay O(1).
BIAS_STD = 0.05
NORM_WEIGHT_MEAN, NORM_WEIGHT_STD = 1.0, 0.1
LAYERSCALE_MEAN, LAYERSCALE_STD = 0.2, 0.05
FREE_PARAM_STD = 0.5
# Last layer of the camera pose branch: small, biased so fov > 0 and rotation ~ identity.
POSE_FC2_WEIGHT_SCALE = 0.1
POSE_FC2_BIAS_STD = 0.02
POSE_FC2_BIAS_OFFSET = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25, 0.3, 0.3)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the reason."""


def _keys_text(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    head = ', '.join(keys[:SHOW_KEYS])
    more = f', ... ({len(keys) - SHOW_KEYS} more)' if len(keys) > SHOW_KEYS else ''
    return f'{len(keys)} ({head}{more})'


def read_state_dict(path: PathLike) -> Dict[str, torch.Tensor]:
    """Read a state dict (CPU tensors, memory-mapped where possible) from a checkpoint file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f'checkpoint {path}: no such file')
    suffix = path.suffix.lower()
    if suffix not in TORCH_SUFFIXES + (SAFETENSORS_SUFFIX,):
        raise CheckpointError(f'checkpoint {path}: unknown format {suffix!r}; expected one of '
                              f'{TORCH_SUFFIXES + (SAFETENSORS_SUFFIX,)}')
    try:
        size = path.stat().st_size
        with open(path, 'rb') as f:
            head = f.read(SNIFF_BYTES)
    except OSError as exc:
        raise CheckpointError(f'checkpoint {path}: cannot be read: {_one_line(exc)}') from exc
    not_weights = _not_weights(head, size)
    if not_weights is not None:
        raise CheckpointError(f'checkpoint {path}: {not_weights}')
    if suffix == SAFETENSORS_SUFFIX:
        return _read_safetensors(path, head, size)
    return _read_torch(path, head, size)


def _one_line(exc: BaseException) -> str:
    """Collapse an exception's text (torch's are often paragraphs) into one short line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = ' '.join(lines) if lines else type(exc).__name__
    if type(exc).__name__ not in text and not isinstance(exc, OSError):
        text = f'{type(exc).__name__}: {text}'
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + '...'


def _is_text(head: bytes) -> bool:
    if b'\x00' in head:
        return False
    try:
        chars = head.decode('utf-8')
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not just a character cut at the end of the sample
            return False
        chars = head[:exc.start].decode('utf-8')
    if not chars:
        return False
    printable = sum(c.isprintable() or c in '\t\n\r\f\v' for c in chars)
    return printable >= TEXT_FRACTION * len(chars)


def _lfs_pointer(head: bytes) -> str:
    fields = dict(ln.split(' ', 1) for ln in head.decode('utf-8', 'replace').splitlines()
                  if ' ' in ln)
    oid = fields.get('oid', '').strip()
    size = fields.get('size', '').strip()
    what = ', '.join(part for part in (oid and f'oid {oid}',
                                       size.isdigit() and f'size {int(size)} bytes') if part)
    return (f'a Git LFS pointer{f" ({what})" if what else ""}, not the file itself: run '
            f"'git lfs pull' in the repository it came from, or download the real file")


def _not_weights(head: bytes, size: int) -> Optional[str]:
    """Say what the file is when its first bytes show it holds no weights at all."""
    if size == 0:
        return 'an empty file (0 bytes), not a checkpoint'
    if head.startswith(LFS_POINTER):
        return _lfs_pointer(head)
    if not _is_text(head):
        return None
    first = head.decode('utf-8', 'replace').strip().splitlines()
    first = first[0][:60] if first else ''
    if re.match(r'<(!doctype\s+html|html)', first, re.IGNORECASE):
        return (f'an HTML page of {size} bytes, not a checkpoint (a download that got a web '
                f'page instead of the file?)')
    return f'a text file of {size} bytes, not a checkpoint (it starts with {first!r})'


def _read_safetensors(path: Path, head: bytes, size: int) -> Dict[str, torch.Tensor]:
    from safetensors import safe_open
    from safetensors import SafetensorError
    problem = _safetensors_problem(path, head, size)
    if problem is not None:
        raise CheckpointError(f'checkpoint {path}: not a readable safetensors file: {problem}')
    try:
        with safe_open(str(path), framework='pt', device='cpu') as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f'checkpoint {path}: not a readable safetensors file: '
                              f'{_one_line(exc)}') from exc


def _safetensors_problem(path: Path, head: bytes, size: int) -> Optional[str]:
    """Check the header and the file size before the library sees the file."""
    if size < SAFETENSORS_LENGTH_BYTES:
        return (f'{size} bytes is shorter than the {SAFETENSORS_LENGTH_BYTES}-byte header '
                f'length: the file is truncated')
    (length,) = struct.unpack('<Q', head[:SAFETENSORS_LENGTH_BYTES])
    if length > SAFETENSORS_MAX_HEADER:
        return (f'the header length field says {length} bytes, which is not a safetensors '
                f'header (first bytes {head[:SAFETENSORS_LENGTH_BYTES].hex(" ")})')
    if SAFETENSORS_LENGTH_BYTES + length > size:
        return (f'the header needs {SAFETENSORS_LENGTH_BYTES + length} bytes but the file has '
                f'{size}: the file is truncated')
    with open(path, 'rb') as f:
        f.seek(SAFETENSORS_LENGTH_BYTES)
        raw = f.read(length)
    try:
        header = json.loads(raw.decode('utf-8'))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        return f'the {length}-byte header is not valid JSON ({_one_line(exc)})'
    if not isinstance(header, dict):
        return f'the header is JSON {type(header).__name__}, not an object'
    offsets = [entry.get('data_offsets') for key, entry in header.items()
               if key != '__metadata__' and isinstance(entry, dict)]
    data = size - SAFETENSORS_LENGTH_BYTES - length
    need = max((o[1] for o in offsets if isinstance(o, list) and len(o) == 2
                and isinstance(o[1], int)), default=0)
    if need > data:
        return (f'the tensors need {need} bytes after the header but the file has {data} '
                f'({size} bytes in all): the file is truncated')
    return None


def _zip_problem(path: Path, size: int) -> Optional[str]:
    """Open the archive's directory (cheap: the end of the file) to catch a cut-short copy."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        # A zip start without the directory at its end is what a cut-short copy looks like.
        reason = 'its end, the zip directory, is missing' if 'not a zip file' in str(exc) \
            else _one_line(exc)
        return (f'a truncated or corrupt zip archive of {size} bytes ({reason}); PyTorch '
                f'checkpoints are zip archives: download or copy the file again')
    if not any(name.endswith('data.pkl') for name in names):
        return (f'a zip archive of {size} bytes without a data.pkl entry: not a PyTorch '
                f'checkpoint')
    return None


def _what_torch_file(head: bytes) -> str:
    if head.startswith(ZIP_MAGIC):
        return 'not a readable PyTorch zip checkpoint'
    if head[:1] == bytes([PICKLE_PROTO]):
        return 'not a readable legacy (pickle) PyTorch checkpoint'
    return (f'an unknown binary format (first bytes {head[:8].hex(" ")}; a PyTorch '
            f'checkpoint is a zip archive or a legacy pickle) that PyTorch cannot read')


def _read_torch(path: Path, head: bytes, size: int) -> Dict[str, torch.Tensor]:
    is_zip = head.startswith(ZIP_MAGIC)
    problem = _zip_problem(path, size) if is_zip else None
    if problem is not None:
        raise CheckpointError(f'checkpoint {path}: {problem}')
    try:  # only zip archives can be memory-mapped
        obj = torch.load(path, map_location='cpu', weights_only=True, mmap=is_zip)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f'checkpoint {path}: {_unpickling_reason(exc, head)}') from exc
    except Exception as exc:  # noqa: BLE001 - torch.load raises anything on a bad file
        raise CheckpointError(f'checkpoint {path}: {_what_torch_file(head)}: '
                              f'{_one_line(exc)}') from exc
    if isinstance(obj, Mapping) and isinstance(obj.get('model'), Mapping):
        obj = obj['model']
    if not isinstance(obj, Mapping):
        raise CheckpointError(f'checkpoint {path}: expected a state dict (or one under '
                              f"'model'), found {type(obj).__name__}")
    not_tensors = [str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise CheckpointError(f'checkpoint {path}: entries that are not tensors: '
                              f'{_keys_text(not_tensors)}')
    return dict(obj)


def _unpickling_reason(exc: pickle.UnpicklingError, head: bytes) -> str:
    """Tell a weights_only refusal (code, objects) from pickle data that is just broken."""
    text = re.sub(r'\x1b\[[0-9;]*m', '', str(exc))  # torch bolds its advice for terminals
    if 'WeightsUnpickler error:' in text:
        text = text.split('WeightsUnpickler error:', 1)[1].split('Check the documentation')[0]
    else:
        text = ' '.join(ln for ln in (ln.strip() for ln in text.splitlines())
                        if not ln.startswith(WEIGHTS_ONLY_BOILERPLATE))
    detail = ' '.join(text.split())
    # The first sentence names the global or opcode; the rest is advice on allowlisting it.
    reason = re.split(r'(?<=\.)\s', detail)[0][:REASON_CHARS] if detail else _one_line(exc)
    lowered = reason.lower()
    if 'operand' not in lowered and any(word in lowered for word in REFUSAL_WORDS):
        return ('refused: it holds pickled code or objects, not a plain state dict of '
                f'tensors and containers, and code is never unpickled here ({reason})')
    return f'{_what_torch_file(head)}: the pickled data is broken ({reason})'


def check_state_dict(state: Mapping[str, torch.Tensor], model: nn.Module,
                     source: str) -> None:
    """Raise :class:`CheckpointError` unless ``state`` has exactly the model's keys and shapes."""
    expected = model.state_dict()
    missing = set(expected) - set(state)
    unexpected = set(state) - set(expected)
    wrong = [f'{k} {list(state[k].shape)} vs {list(expected[k].shape)}'
             for k in sorted(set(state) & set(expected)) if state[k].shape != expected[k].shape]
    problems = []
    if missing:
        problems.append(f'missing keys {_keys_text(missing)}')
    if unexpected:
        problems.append(f'unexpected keys {_keys_text(unexpected)}')
    if wrong:
        problems.append(f'wrong shapes (checkpoint vs model) {_keys_text(wrong)}')
    if problems:
        raise CheckpointError(f'checkpoint {source} does not fit model {model_name(model)}: '
                              + '; '.join(problems))


def model_name(model: nn.Module) -> str:
    cfg = getattr(model, 'cfg', None)
    return repr(cfg.name) if cfg is not None else type(model).__name__


def _build_meta(cfg: ModelConfig) -> LingBotMap:
    with torch.device('meta'):
        return LingBotMap(cfg)


AGGREGATOR_PREFIX = 'aggregator.'


def matmul_parameters(model: nn.Module) -> frozenset:
    """
    Qualified names of the parameters of linear and convolution layers in ``model``.

    Those autocast runs in its low precision: a head's last layer (``layers.keep_float32``)
    is left out, it computes in float32 and keeps its weights so.
    """
    return frozenset(f'{prefix}.{name}' if prefix else name
                     for prefix, module in model.named_modules()
                     if low_precision_layer(module)
                     for name, _ in module.named_parameters(recurse=False))


def storage_dtype(name: str, dtype: torch.dtype, autocast_dtype: Optional[torch.dtype] = None,
                  head_dtype: Optional[torch.dtype] = None, matmul: bool = True,
                  head_autocast: Optional[torch.dtype] = None) -> torch.dtype:
    """
    Return the dtype a floating-point weight ``name`` is kept in on the device.

    Under autocast the aggregator's linear and convolution weights (``matmul``) are kept
    in ``autocast_dtype``, which autocast would cast them to at every call anyway; its
    other parameters (LayerNorms, LayerScales, tokens, position tables) stay float32, as
    plain autocast over float32 weights keeps them. (The reference's demo casts the whole
    aggregator: its DINO trunk then adds bf16 tokens, position table and LayerScale
    products, a bf16 residual stream.) With them in float32 the residual stream is float32
    throughout; on the CPU smoke run of ``benchmarks/bf16_drift.py`` our bf16 rotation
    drift fell from 0.82 to 0.19 degrees (the reference's 0.89). Heads that compute in
    float32 keep their linear and convolution weights in ``head_dtype`` (None falls back
    to ``dtype``) and the rest, their last layers included, in float32 (``head_dtype``
    applies to matmul weights only): the depth head's last convolution gives log-depth,
    and its weights rounded to bf16 alone moved the median depth by about 0.3 % on the CPU
    smoke run. Heads that compute under autocast too (``head_autocast``, their dtype, with
    an ``autocast_dtype``) keep their linear and convolution weights in that dtype and
    the rest in float32, whatever ``head_dtype`` says.
    """
    if name.startswith(AGGREGATOR_PREFIX):
        if autocast_dtype is None:
            return dtype
        return autocast_dtype if matmul else torch.float32
    if head_autocast is not None and autocast_dtype is not None:
        return head_autocast if matmul else torch.float32
    if head_dtype is not None and not matmul:
        return torch.float32
    return head_dtype or dtype


def _upcast_own(module: nn.Module, args: tuple) -> None:
    """Swap the module's own low-precision parameters for float32 copies while it runs."""
    kept = {}
    for name, param in module._parameters.items():
        if param is not None and param.is_floating_point() and param.dtype != torch.float32:
            kept[name] = param
            module._parameters[name] = param.float()
    module._low_precision_kept = kept


def _restore_own(module: nn.Module, args: tuple, output: object) -> None:
    """Put the stored parameters back (also after an exception: the hook always runs)."""
    module._parameters.update(getattr(module, '_low_precision_kept', {}))
    module._low_precision_kept = {}


def compute_in_float32(module: nn.Module) -> nn.Module:
    """
    Let ``module`` keep its weights in a low precision yet compute exactly as in float32.

    Every submodule that owns parameters is given hooks that, for the length of its own
    forward, use float32 copies of them: only one layer's copy exists at a time (at most
    the largest layer of the heads), so the heads' weights cost
    half the memory in bfloat16 while their arithmetic stays float32; the only change is
    each weight rounded to bfloat16 (a relative error of at most 2**-9). Idempotent.
    """
    for sub in module.modules():
        if getattr(sub, '_float32_compute', False) or not any(
                True for _ in sub.named_parameters(recurse=False)):
            continue
        sub.register_forward_pre_hook(_upcast_own)
        sub.register_forward_hook(_restore_own, always_call=True)
        sub._float32_compute = True
    return module


def _finish(model: LingBotMap, device: torch.device,
            autocast_dtype: Optional[torch.dtype],
            head_dtype: Optional[torch.dtype] = None,
            head_autocast: Optional[torch.dtype] = None) -> LingBotMap:
    model.aggregator.init_buffers(device)
    leftover = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
                if t.is_meta]
    if leftover:
        raise CheckpointError(f'tensors left unmaterialised: {_keys_text(leftover)}')
    heads = head_autocast if autocast_dtype is not None else None
    # the weights are in their dtypes already; this sets the modes (and channels-last)
    model.set_autocast_dtype(autocast_dtype, heads=heads)
    if heads is None and head_dtype not in (None, torch.float32):
        compute_in_float32(model.camera_head)
        compute_in_float32(model.depth_head)
    return model.eval().requires_grad_(False)


def load_model(cfg: ModelConfig, checkpoint: Optional[PathLike] = None,
               device: Union[str, torch.device] = 'cpu', dtype: torch.dtype = torch.float32,
               seed: int = 0, autocast_dtype: Optional[torch.dtype] = None,
               head_dtype: Optional[torch.dtype] = None,
               head_autocast: Optional[torch.dtype] = None) -> LingBotMap:
    """
    Build the model for inference: from ``checkpoint`` strictly, or seeded random weights.

    ``dtype`` is the storage dtype of the weights (fp32 as released); ``autocast_dtype``
    (None, bf16, fp16) stores the aggregator's linear and convolution weights in that
    dtype (its other parameters in float32) and runs it under autocast, as the reference's
    GPU demo runs it. ``head_dtype`` (None: ``dtype``) stores the camera
    and depth heads' weights in that dtype; they still compute in float32
    (:func:`compute_in_float32`). ``head_autocast`` (a dtype, with an ``autocast_dtype``)
    runs the heads under autocast in that dtype, their linear and convolution weights
    kept in it (``head_dtype`` is then ignored); without an ``autocast_dtype`` it changes
    nothing.

    Each weight reaches the device once, already in its storage dtype: a checkpoint's
    tensors are cast on the host and then moved; random weights are drawn one tensor
    at a time. So the device never holds a float32 copy of weights kept in a lower
    precision (for the release structure that copy would be as large as the model).
    """
    device = torch.device(device)
    matmul = matmul_parameters(_build_meta(cfg))

    def final(name: str) -> torch.dtype:
        return storage_dtype(name, dtype, autocast_dtype, head_dtype, name in matmul,
                             head_autocast)
    if checkpoint is None:
        model = random_init(cfg, seed, device=device, dtype=dtype, storage=final)
        return _finish(model, device, autocast_dtype, head_dtype, head_autocast)
    state = read_state_dict(checkpoint)
    model = _build_meta(cfg)
    check_state_dict(state, model, str(checkpoint))
    state = {k: _placed(v, final(k), device) for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    return _finish(model, device, autocast_dtype, head_dtype, head_autocast)


def _placed(tensor: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """
    One checkpoint tensor on ``device`` in its storage ``dtype``.

    On a GPU it is moved first and cast there: the host then only copies (casting a
    release checkpoint's float32 on the host is most of a restart's work), and the device
    holds one float32 tensor at a time beyond the model. On the CPU it is cast in place of a copy.
    """
    if not tensor.is_floating_point():
        return tensor.to(device)
    if device.type == 'cuda':
        return tensor.to(device).to(dtype)
    return tensor.to(dtype).to(device)


def random_init(cfg: ModelConfig, seed: int, device: Union[str, torch.device] = 'cpu',
                dtype: torch.dtype = torch.float32,
                storage: Optional[Callable[[str], torch.dtype]] = None) -> LingBotMap:
    """
    Return a model with seeded random weights of sane scale (same seed, same device: same).

    Linear/conv weights N(0, 1/fan_in), biases N(0, 0.05^2), LayerNorm N(1, 0.1^2) /
    N(0, 0.05^2), LayerScale N(0.2, 0.05^2), free tokens and tables N(0, 0.5^2); the
    pose branch's last layer is scaled down and offset so the field of view is positive.
    Values are drawn in ``dtype``, one tensor at a time, and each is then kept in
    ``storage(name)`` (default ``dtype``): the device never holds more than the final
    weights plus one tensor being drawn.
    """
    device = torch.device(device)
    model = _build_meta(cfg)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    fc2 = model.camera_head.pose_branch.fc2
    late = None  # the pose bias: drawn in turn, then drawn again last (the recipe's order)
    with torch.no_grad():
        for prefix, module in model.named_modules():
            for name, param in list(module.named_parameters(recurse=False)):
                mean, std = _init_stats(module, name, param)
                drawn = torch.empty(param.shape, dtype=dtype, device=device)
                drawn.normal_(mean, std, generator=gen)
                if module is fc2 and name == 'weight':
                    drawn.mul_(POSE_FC2_WEIGHT_SCALE)
                if module is fc2 and name == 'bias':
                    late = (prefix, drawn)
                    continue
                _place(module, name, drawn, storage, f'{prefix}.{name}' if prefix else name)
        prefix, drawn = late
        drawn.normal_(0.0, POSE_FC2_BIAS_STD, generator=gen)
        drawn.add_(torch.tensor(POSE_FC2_BIAS_OFFSET, dtype=dtype, device=device))
        _place(fc2, 'bias', drawn, storage, f'{prefix}.bias')
    model.aggregator.init_buffers(device)
    return model.eval()


def _place(module: nn.Module, name: str, drawn: torch.Tensor,
           storage: Optional[Callable[[str], torch.dtype]], qualified: str) -> None:
    """Put a drawn tensor in as the parameter ``name``, cast to its storage dtype."""
    if storage is not None:
        drawn = drawn.to(storage(qualified))
    module._parameters[name] = nn.Parameter(drawn)


def _init_stats(module: nn.Module, name: str, param: torch.Tensor) -> tuple:
    """Return (mean, std) of the random draw for one parameter."""
    if isinstance(module, nn.LayerNorm):
        return (NORM_WEIGHT_MEAN, NORM_WEIGHT_STD) if name == 'weight' else (0.0, BIAS_STD)
    if isinstance(module, LayerScale):
        return LAYERSCALE_MEAN, LAYERSCALE_STD
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
        if name == 'bias':
            return 0.0, BIAS_STD
        if isinstance(module, nn.ConvTranspose2d):
            fan_in = param.shape[0] * param[0, 0].numel() / math.prod(module.stride)
        else:
            fan_in = param[0].numel()
        return 0.0, 1.0 / math.sqrt(fan_in)
    return 0.0, FREE_PARAM_STD

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

"""The MLP's first layer and GELU: exact in float32, one fused GEMM in half precision on CUDA."""

from lingbot_ros.model.layers import gelu_epilogue, gelu_linear, Mlp
import pytest
import torch
from torch import nn
import torch.nn.functional as F

# the largest |GELU_erf(x) - GELU_tanh(x)| over the reals (at |x| = 2.70)
TANH_GELU_GAP = 4.8e-4


def _layer(seed: int, dim: int = 64, hidden: int = 256) -> nn.Linear:
    torch.manual_seed(seed)
    fc = nn.Linear(dim, hidden)
    with torch.no_grad():
        fc.bias.normal_(0.0, 0.5)     # GELU's bend lands inside the outputs' range
    return fc


def _plain(fc: nn.Linear, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round the product to ``dtype`` as the GEMM writes it, then apply the exact GELU."""
    product = F.linear(x.to(dtype), fc.weight.to(dtype), fc.bias.to(dtype))
    return F.gelu(product.float())


def test_the_float32_path_is_the_exact_gelu_bit_for_bit():
    fc, x = _layer(0), torch.randn(2, 7, 64)
    assert torch.equal(gelu_linear(fc, x), F.gelu(fc(x)))
    mlp = Mlp(64, 256)
    assert torch.equal(mlp(x), mlp.fc2(F.gelu(mlp.fc1(x))))


def test_the_cpu_under_autocast_keeps_autocast_and_the_exact_gelu():
    fc, x = _layer(1), torch.randn(3, 64)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        got, want = gelu_linear(fc, x), F.gelu(fc(x))
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, want)


@pytest.mark.parametrize('shape', [(9, 64), (2, 5, 64), (2, 3, 4, 64)])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16])
def test_the_fused_call_keeps_rows_weight_and_bias_where_they_belong(shape, dtype):
    fc, x = _layer(2), torch.randn(shape)
    got = gelu_epilogue(fc, x, dtype)
    assert got.dtype == dtype and got.shape == (*shape[:-1], 256)
    # the GEMM's own rounding in dtype, nothing else (the CPU applies the exact GELU)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(got.float(), _plain(fc, x, dtype), atol=tol, rtol=tol)


def test_the_fused_call_traces_as_one_graph():
    fc, x = _layer(3), torch.randn(4, 64)
    traced = torch.compile(lambda t: gelu_epilogue(fc, t, torch.bfloat16), backend='eager',
                           fullgraph=True)
    assert torch.equal(traced(x), gelu_epilogue(fc, x, torch.bfloat16))


def _kernels(fn) -> list:
    """Names of the CUDA kernels one call of ``fn`` launches."""
    from torch.profiler import profile, ProfilerActivity
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type.name == 'CUDA']


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_on_cuda_half_precision_is_one_gemm_within_the_tanh_gap(dtype):
    # as the engine runs: weights that need no gradient, no autograd (autocast then casts the
    # weights at every call, as the fused path does, instead of keeping a cached copy)
    fc = _layer(4, 1024, 4096).cuda().requires_grad_(False)
    x = torch.randn(978, 1024, device='cuda')
    with torch.no_grad(), torch.autocast('cuda', dtype=dtype):
        got = gelu_linear(fc, x)
        fused = _kernels(lambda: gelu_linear(fc, x))
        unfused = _kernels(lambda: F.gelu(fc(x)))
    assert got.dtype == dtype
    assert len(fused) < len(unfused), (fused, unfused)
    # no GELU of its own after the GEMM (PyTorch's is an elementwise kernel named for it)
    assert not [name for name in fused if 'gelu' in name.lower() and 'elementwise' in name.lower()]
    want = _plain(fc, x, dtype)
    # the tanh form's gap plus the roundings in dtype (the product's, the written value's;
    # the two GEMMs may also sum in another order)
    ulps = 2 * torch.finfo(dtype).eps * want.abs()
    assert ((got.float() - want).abs() <= TANH_GELU_GAP + ulps + 1e-6).float().mean() > 0.99
    torch.testing.assert_close(got.float(), want, atol=TANH_GELU_GAP + 1e-3, rtol=2e-2)

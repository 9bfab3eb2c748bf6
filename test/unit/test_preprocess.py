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

"""Preprocessing: the reference's file path bit for bit, and the live path agreeing with it."""

import json
from pathlib import Path
import shutil

import cv2
from lingbot_ros.model.graphs import CaptureStreams
from lingbot_ros.model.pose import intrinsics_from_fov
from lingbot_ros.streaming import preprocess as pp
from lingbot_ros.streaming.preprocess import upload as up
from lingbot_ros.streaming.preprocess.resample import Resampler
import numpy as np
from PIL import Image
import pytest
import torch

DATA = Path(__file__).resolve().parents[1] / 'data' / 'parity'
PRE = DATA / 'preprocess'
CASES = json.loads((PRE / 'cases.json').read_text())['cases']


@pytest.fixture(scope='module')
def expected():
    return dict(np.load(PRE / 'preprocess.npz'))


def _as_uint8(x: torch.Tensor) -> np.ndarray:
    u8 = np.round(x.numpy() * 255).astype(np.uint8)
    # Every value must be exactly k / 255 (ToTensor's arithmetic), not just close.
    assert torch.equal(torch.from_numpy(u8).float() / 255, x)
    return u8


@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_file_path_reproduces_reference(case, expected):
    images = pp.load_images([PRE / f for f in case['files']], image_size=case['image_size'])
    assert images.dtype == torch.float32
    assert tuple(images.shape) == tuple(case['output_shape_SCHW'])
    np.testing.assert_array_equal(_as_uint8(images), expected[case['array']])


def test_model_input_of_the_parity_sequence():
    images = pp.load_images(sorted((PRE / 'inputs' / 'chelsea_sweep').glob('*.png')), 84)
    np.testing.assert_array_equal(images.numpy(), np.load(DATA / 'basic' / 'images.npy')[:3])


@pytest.mark.parametrize('method', ['pil', 'torch'])
@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_array_path_matches_file_path(case, method, expected):
    for name, want in zip(case['files'], expected[case['array']]):
        frame, plan = pp.preprocess_frame(pp.load_rgb(PRE / name), 'cpu', case['image_size'],
                                          method=method)
        np.testing.assert_array_equal(_as_uint8(frame), want)
        assert plan.model_hw == want.shape[1:]


DEVICES = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('hw,size', [((48, 64), 56), ((1080, 1920), 518), ((300, 97), 70),
                                     ((5, 31), 84), ((77, 140), 140), ((41, 83), 42),
                                     ((400, 60), 28), ((480, 640), 518)])
def test_torch_resampler_equals_pillow(hw, size, device):
    rng = np.random.default_rng(hw[0] * 1000 + hw[1])
    rgb = rng.integers(0, 256, hw + (3,), dtype=np.uint8)
    rgb[: hw[0] // 2] = rng.integers(0, 2, (hw[0] // 2, hw[1], 1)) * 255  # hard edges: clipping
    plan = pp.plan_transform(hw, size)
    ref = np.asarray(Image.fromarray(rgb).resize(plan.resized_hw[::-1], Image.BICUBIC))
    top = plan.offset_xy[1]
    ref = ref[top:top + plan.model_hw[0]].transpose(2, 0, 1)
    frame, _ = pp.preprocess_frame(rgb, device, size, method='torch')  # float64 products
    np.testing.assert_array_equal(_as_uint8(frame.cpu()), ref)


@pytest.mark.parametrize('device', DEVICES)
def test_frames_in_a_row_each_keep_their_own_pixels(device):
    """On CUDA the upload buffer is reused: a frame must not see the next one's pixels."""
    rng = np.random.default_rng(11)
    frames = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(4)]
    want = [pp.preprocess_frame(f, 'cpu', 56, method='torch')[0] for f in frames]
    uploads = pp.FrameUploads()
    got = [pp.preprocess_frame(f, device, 56, method='torch', uploads=uploads)[0]
           for f in frames]
    for frame in frames:
        frame[:] = 0  # the caller's arrays change after the call: nothing may follow them
    for g, w in zip(got, want):
        assert torch.equal(g.cpu(), w)


def test_frames_go_up_the_plain_way_where_memory_cannot_be_pinned(monkeypatch):
    """A container's locked-memory limit must not cost a frame: pinning is tried once."""
    real, tries = torch.empty, []

    def empty(*args, **kwargs):
        if kwargs.get('pin_memory'):
            tries.append(1)
            raise RuntimeError('CUDA error: out of memory (cudaHostAlloc)')
        return real(*args, **kwargs)
    monkeypatch.setattr(torch, 'empty', empty)
    upload = up.PinnedUpload()
    frame = np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3)
    for _ in range(2):
        assert torch.equal(upload(frame, torch.device('cpu')), torch.from_numpy(frame))
    assert tries == [1] and 'cudaHostAlloc' in upload.unavailable


@pytest.mark.skipif(not torch.cuda.is_available(), reason='page-locked uploads need CUDA')
def test_pinned_uploads_turn_through_their_ring_without_overwriting_a_pending_one():
    upload = up.PinnedUpload()
    device = torch.device('cuda')
    torch.cuda._sleep(200_000_000)  # keep the device busy: the uploads queue behind it
    frames = [np.full((48, 64, 3), i, np.uint8) for i in range(2 * upload.RING + 1)]
    got = [upload(f, device) for f in frames]
    for f, g in zip(frames, got):
        assert torch.equal(g.cpu(), torch.from_numpy(f))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='page-locked uploads need CUDA')
def test_a_tensor_upload_does_not_wait_for_the_work_queued_before_it():
    """A pageable ``.to('cuda')`` returns only after the kernels queued before it."""
    frames = [torch.rand(3, 64, 96) for _ in range(3)]
    torch.cuda._sleep(500_000_000)  # about a third of a second of device work
    uploads = pp.FrameUploads()
    got = [uploads.upload(f, 'cuda') for f in frames]
    assert not torch.cuda.current_stream().query(), 'the upload waited for the device'
    for f, g in zip(frames, got):
        assert g.dtype == f.dtype and torch.equal(g.cpu(), f)


GRAPH_CASES = [((480, 640, 3), 518), ((720, 1280, 3), 518), ((2000, 300, 3), 140),
               ((48, 64, 1), 56), ((700, 518, 3), 518), ((60, 40, 3), 518)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason='CUDA graphs need CUDA')
@pytest.mark.parametrize('shape,size', GRAPH_CASES)
def test_graphed_resize_equals_the_eager_one_and_each_frame_keeps_its_pixels(shape, size):
    rng = np.random.default_rng(shape[0] + size)
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(3)]
    want = [pp.preprocess_frame(f, 'cuda', size, method='torch')[0].cpu() for f in frames]
    uploads = pp.FrameUploads(graphed=True)
    got = [pp.preprocess_frame(f, 'cuda', size, method='torch', uploads=uploads)[0]
           for f in frames]  # replayed after each other: outputs must not alias
    assert uploads.resize_status().startswith('graphed'), uploads.resize_status()
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.is_contiguous()
        assert torch.equal(g.cpu(), w)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='CUDA graphs need CUDA')
def test_a_graphed_resize_keeps_what_it_reads_when_the_caches_let_it_go():
    """A graph holds addresses: the weights and the table must outlive the resampler's."""
    device = torch.device('cuda')
    frame = np.random.default_rng(3).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    plan = pp.plan_transform(frame.shape[:2], 518)
    want = pp.preprocess_frame(frame, device, 518, method='torch')[0].cpu()
    kept = Resampler()
    resampler = up.GraphedResampler(frame.shape, plan, device, kept, up.PinnedUpload(),
                                    CaptureStreams())
    kept.clear()
    # blocks of the freed tensors' sizes, filled with NaN: they take that memory if it is free
    junk = [torch.full(hw, float('nan'), dtype=dtype, device=device)
            for hw, dtype in [((518, 640), torch.float64), ((392, 480), torch.float64),
                              ((256,), torch.float32)] * 8]
    assert torch.equal(resampler(frame).cpu(), want)
    del junk


@pytest.mark.skipif(not torch.cuda.is_available(), reason='CUDA graphs need CUDA')
@pytest.mark.parametrize('shape,size', GRAPH_CASES[:3])
def test_a_graphed_resize_stays_within_its_memory_bound(shape, size):
    device = torch.device('cuda')
    plan = pp.plan_transform(shape[:2], size)
    streams = CaptureStreams()
    up.GraphedResampler((8, 8, 3), pp.plan_transform((8, 8), 14), device, Resampler(),
                        up.PinnedUpload(), streams)  # the capture stream's cuBLAS workspace
    # exists now: it is not this resize's memory
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    resampler = up.GraphedResampler(shape, plan, device, Resampler(), up.PinnedUpload(),
                                    streams)
    out = resampler(np.zeros(shape, np.uint8))
    torch.cuda.synchronize()
    used = torch.cuda.max_memory_allocated() - before
    bound = pp.resample_graph_bytes(shape[:2], plan.resized_hw, plan.model_hw[0], shape[2])
    assert used <= bound + out.numel() * 4, (used, bound)  # the bound and the clone handed out


def test_graphed_resizers_are_kept_per_shape_bounded_and_given_up_after_a_failure(
        monkeypatch):
    """The registry's logic, on the CPU: one capture per (shape, grid), at most MAX_SHAPES."""
    built = []

    class Fake:
        def __init__(self, shape, plan, device, resampler, upload, streams):
            built.append(shape)
            self.plan = plan

        def __call__(self, frame):
            return torch.full((3,) + self.plan.model_hw, float(frame[0, 0, 0]))
    monkeypatch.setattr(up, 'GraphedResampler', Fake)
    graphs = up.GraphedResizes(Resampler(), up.PinnedUpload(), CaptureStreams())
    cpu = torch.device('cpu')
    assert graphs.status() == ''
    shapes = [(48 + 14 * i, 64, 3) for i in range(graphs.MAX_SHAPES + 1)]
    for shape in shapes + shapes[-1:]:
        frame = np.full(shape, 7, np.uint8)
        out = graphs.run(frame, pp.plan_transform(shape[:2], 56), cpu)
        assert out is not None and float(out[0, 0, 0]) == 7.0
    assert built == shapes  # the repeated shape replayed its own capture
    assert graphs.status() == f'graphed ({graphs.MAX_SHAPES} frame shapes)'

    def refuse(*_):
        raise RuntimeError('CUDA error: operation not permitted when stream is capturing')
    monkeypatch.setattr(up, 'GraphedResampler', refuse)
    frame = np.zeros((30, 64, 3), np.uint8)
    assert graphs.run(frame, pp.plan_transform((30, 64), 56), cpu) is None
    assert graphs.status().startswith('eager (capture failed: CUDA error')
    assert graphs.run(frame, pp.plan_transform((30, 64), 56), cpu) is None  # not retried


def test_graphed_is_the_eager_resize_where_there_is_no_cuda():
    frame = np.random.default_rng(5).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    uploads = pp.FrameUploads(graphed=True)
    for method in ('torch', 'pil'):
        want, _ = pp.preprocess_frame(frame, 'cpu', 56, method=method)
        got, _ = pp.preprocess_frame(frame, 'cpu', 56, method=method, uploads=uploads)
        assert torch.equal(got, want)
    assert uploads.resize_status() == ''


def test_grey_and_tensor_frames():
    rng = np.random.default_rng(7)
    grey = rng.integers(0, 256, (30, 60), dtype=np.uint8)
    rgb = np.repeat(grey[:, :, None], 3, axis=2)
    want, _ = pp.preprocess_frame(rgb, 'cpu', 28, method='pil')
    for method in ('pil', 'torch'):
        got, _ = pp.preprocess_frame(grey, 'cpu', 28, method=method)
        assert torch.equal(got, want)
        got, _ = pp.preprocess_frame(torch.from_numpy(rgb), 'cpu', 28, method=method)
        assert torch.equal(got, want)


def test_resize_method_takes_members_and_names():
    rgb = np.random.default_rng(8).integers(0, 256, (30, 60, 3), dtype=np.uint8)
    want, _ = pp.preprocess_frame(rgb, 'cpu', 28, method='pil')
    for method in pp.ResizeMethod:
        for given in (method, method.value):
            got, _ = pp.preprocess_frame(rgb, 'cpu', 28, method=given)
            assert torch.equal(got, want)
    with pytest.raises(ValueError, match="expected 'auto', 'pil' or 'torch'"):
        pp.preprocess_frame(rgb, method='PIL')


@pytest.mark.parametrize('wh,grid,top', [((1920, 1080), (294, 518), 0),
                                         ((640, 480), (392, 518), 0),
                                         ((1080, 1920), (518, 518), 203),
                                         ((1000, 1015), (518, 518), 7)])
def test_plan_transform_reference_examples(wh, grid, top):
    plan = pp.plan_transform((wh[1], wh[0]))
    assert plan.model_hw == grid and plan.offset_xy == (0, top)


def test_intrinsics_map_back_to_input_pixels():
    plan = pp.plan_transform((1920, 1080))  # portrait: resized to 924 rows, 203 cropped
    k_model = intrinsics_from_fov(torch.tensor(1.0), torch.tensor(0.8), plan.model_hw)
    k_in = plan.intrinsics_to_input(k_model)
    torch.testing.assert_close(k_in[:2, 2], torch.tensor([540.0, 960.0]))  # the centre
    sx, sy = plan.scale_xy
    torch.testing.assert_close(k_in[0, 0], k_model[0, 0] / sx)
    torch.testing.assert_close(k_in[1, 1], k_model[1, 1] / sy)


def test_different_sizes_are_padded_with_white(tmp_path):
    files = [PRE / 'inputs' / 'chelsea_sweep' / '000000.png',
             PRE / 'inputs' / 'chelsea_portrait' / '000000.png']
    images, plans = pp.load_images_with_transforms(files, 84)
    assert images.shape == (2, 3, 84, 84)
    alone = pp.load_images(files[:1], 84)[0]  # 42 x 84
    assert torch.equal(images[0, :, 21:63], alone)
    assert torch.all(images[0, :, :21] == 1.0) and torch.all(images[0, :, 63:] == 1.0)
    assert plans[0].offset_xy == (0, -21) and plans[1].offset_xy == (0, 35)


def test_folder_listing_and_loading(tmp_path):
    src = sorted((PRE / 'inputs' / 'chelsea_sweep').glob('*.png'))
    names = ['b.PNG', 'a.png', 'c.Png']
    for s, n in zip(src, names):
        shutil.copy(s, tmp_path / n)
    Image.open(src[0]).convert('RGB').save(tmp_path / 'd.JPEG', quality=95)
    (tmp_path / 'notes.txt').write_text('not an image')
    (tmp_path / 'sub.png').mkdir()
    listed = pp.list_images(tmp_path)
    assert [p.name for p in listed] == ['a.png', 'b.PNG', 'c.Png', 'd.JPEG']
    folder = pp.load_image_folder(tmp_path, 84)
    assert torch.equal(folder[:3], pp.load_images([tmp_path / n for n in sorted(names)], 84))


def test_rgba_is_composited_on_white(tmp_path):
    rgba = np.zeros((28, 56, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[:, :28, 3] = 255  # left half opaque red, right half transparent
    Image.fromarray(rgba, 'RGBA').save(tmp_path / 'x.png')
    rgb = pp.load_rgb(tmp_path / 'x.png')
    assert (rgb[:, :28] == (200, 0, 0)).all() and (rgb[:, 28:] == 255).all()


def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match='no such image'):
        pp.load_images([tmp_path / 'missing.png'])
    with pytest.raises(FileNotFoundError, match='no such folder'):
        pp.list_images(tmp_path / 'nope')
    with pytest.raises(ValueError, match='no .jpg'):
        pp.list_images(tmp_path)
    (tmp_path / 'broken.png').write_bytes(b'\x89PNG not really')
    with pytest.raises(ValueError, match='not a readable image'):
        pp.load_images([tmp_path / 'broken.png'])
    with pytest.raises(ValueError, match='multiple of patch_size'):
        pp.plan_transform((100, 100), 500)
    with pytest.raises(ValueError, match='too wide'):
        pp.plan_transform((1, 5000))
    with pytest.raises(ValueError, match='uint8'):
        pp.preprocess_frame(np.zeros((10, 10, 3), np.float32))
    with pytest.raises(ValueError, match='HxWx3'):
        pp.preprocess_frame(np.zeros((10, 10, 4), np.uint8))
    with pytest.raises(ValueError, match='method'):
        pp.preprocess_frame(np.zeros((10, 10, 3), np.uint8), method='cv2')
    with pytest.raises(FileNotFoundError, match='no such video'):
        pp.load_video(tmp_path / 'missing.mp4')
    (tmp_path / 'bad.avi').write_text('not a video')
    with pytest.raises(ValueError, match='cannot open'):
        pp.load_video(tmp_path / 'bad.avi')


def test_video_sampling_and_jpeg_roundtrip(tmp_path):
    path = tmp_path / 'clip.avi'
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 30.0, (84, 42))
    assert writer.isOpened()
    for i in range(10):
        writer.write(np.full((42, 84, 3), 20 * i + 20, np.uint8))
    writer.release()
    frames = list(pp.video_frames(path, fps=10))  # 30 fps source: every 3rd frame
    assert len(frames) == 4
    means = [f.mean() for f in frames]
    np.testing.assert_allclose(means, [20.0, 80.0, 140.0, 200.0], atol=4.0)
    video = pp.load_video(path, fps=10, image_size=84)
    assert video.shape == (4, 3, 42, 84)
    assert torch.equal(video[1], pp.preprocess_frame(frames[1], 'cpu', 84)[0])

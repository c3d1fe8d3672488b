"""One DDP step on 2 gloo ranks (real processes, 127.0.0.1) == one single-process step on the
same global batch: the gradients match.

The four images have the same size, so padding (and with it the anchor set) is the same whether
an image is batched with one other image or with three; the per-image sampling seeds make
anchor/RoI sampling independent of the rank an image lands on.  The mask head's slots are shared by
the images of a rank's batch (roi_heads.mask_slots), so its random subset depends on which images
share a rank once the foreground exceeds the cap: the equality holds below the cap, which this test
sets high enough (16 per image: every foreground slot the demo's sampler gives).
"""
from __future__ import annotations

import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp

from mpirun_kit.maskrcnn.config import resolve_config
from mpirun_kit.maskrcnn.data.coco import CocoDataset
from mpirun_kit.maskrcnn.modeling.meta_arch import build_model


def _batch(root: Path) -> list[dict]:
    ds = CocoDataset(root / "annotations/instances_train.json", root / "train", train=True, min_sizes=(96,),
                     max_size=128, flip_prob=0.5, num_classes=3)
    size = max({tuple(ds.coco.imgs[i][k] for k in ("height", "width")) for i in ds.ids},
               key=lambda s: sum(1 for i in ds.ids if (ds.coco.imgs[i]["height"], ds.coco.imgs[i]["width"]) == s))
    idx = [n for n, i in enumerate(ds.ids) if (ds.coco.imgs[i]["height"], ds.coco.imgs[i]["width"]) == size][:4]
    assert len(idx) == 4, "the fixture needs 4 images of one size"
    return [ds[(i, 1000 + i)] for i in idx]


def _model():
    torch.manual_seed(0)
    cfg, _ = resolve_config("demo", {"model.roi_heads.mask_rois_per_image": "16"})
    return build_model(cfg.model)


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _worker(rank: int, port: int, root: str, out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = _model()
        ddp = DistributedDataParallel(model)
        batch = _batch(Path(root))[2 * rank:2 * rank + 2]
        sum(ddp(batch).values()).backward()
        if rank == 0:
            torch.save(_grads(model), out)
    finally:
        dist.destroy_process_group()


def test_ddp_step_equals_single_process_step(shapes, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ddp_grads.pt"
    mp.spawn(_worker, args=(port, str(shapes), str(out)), nprocs=2, join=True)
    model = _model()
    sum(model(_batch(shapes)).values()).backward()
    single, ddp = _grads(model), torch.load(out)
    assert single.keys() == ddp.keys() and len(single) > 20
    for name in single:
        torch.testing.assert_close(ddp[name], single[name], rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


def _strided_ddp_run(match: bool) -> tuple[list[str], list[str], list[str]]:
    """A 1-rank gloo DDP (gradients as bucket views, as the trainer builds it) over a channels-last
    model whose 1x1 conv is used twice, as the RPN head is on every FPN level, with that weight
    given the other valid layout of a [O, C, 1, 1] tensor.  Returns (restrided, still differing,
    DDP's stride warnings over two steps)."""
    import warnings

    import torch.distributed as dist
    from torch import nn

    from mpirun_kit.maskrcnn.dist import match_grad_strides

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 16, 3, padding=1)
            self.pred = nn.Conv2d(16, 12, 1)

        def forward(self, xs):
            return sum(self.pred(self.conv(x)).sum() for x in xs)

    # oneDNN's channels-last weight gradient (what differs from the contiguous weight) comes with more than one
    # thread: with one, the gradient is contiguous and there is nothing to match; pinned, whatever ran before.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        return _strided_ddp_steps(Head, match, match_grad_strides, dist, warnings)
    finally:
        torch.set_num_threads(threads)


def _strided_ddp_steps(Head, match, match_grad_strides, dist, warnings):
    torch.manual_seed(0)
    m = Head().to(memory_format=torch.channels_last)
    m.pred.weight.data = m.pred.weight.data.clone(memory_format=torch.contiguous_format)  # (16, 1, 1, 1)
    xs = [torch.randn(2, 8, s, s).contiguous(memory_format=torch.channels_last) for s in (16, 8, 4)]
    changed, still = match_grad_strides(m.named_parameters(), lambda: m(xs)) if match else ([], [])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(m, gradient_as_bucket_view=True)
        # DDP's warning is TORCH_WARN_ONCE: once per process, so any earlier DDP test of the same pytest process
        # would have used it up; warn_always makes it say so on every step, whatever ran before.
        always = torch.is_warn_always_enabled()
        torch.set_warn_always(True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                ddp.zero_grad()
                ddp(xs).backward()
    finally:
        torch.set_warn_always(always)
        dist.destroy_process_group()
    return changed, still, [str(w.message) for w in caught if "Grad strides do not match" in str(w.message)]


def test_parameters_laid_out_as_their_gradients_spare_ddp_the_bucket_copy():
    """dist.match_grad_strides (the trainer runs it on a GPU with channels-last, before DDP): without
    it DDP warns that a gradient's strides differ from its bucket view's (and copies it every step);
    with it the weight takes its gradient's strides and DDP takes the gradients as they are."""
    _, _, warned = _strided_ddp_run(match=False)
    assert len(warned) >= 1
    changed, still, warned = _strided_ddp_run(match=True)
    assert changed == ["pred.weight"] and still == [] and warned == []


def test_the_trainers_stride_match_runs_the_model_twice_and_logs_what_it_did(shapes, tmp_path, caplog):
    """Trainer._match_grad_strides (on a GPU with channels-last it runs before DDP is built) drives
    the real model with its small synthetic batch; on the CPU, without channels-last, every gradient
    already has its parameter's strides: nothing to restride, and the parameters keep their values."""
    import logging

    from mpirun_kit.maskrcnn.dist import DistInfo
    from mpirun_kit.maskrcnn.train import Trainer, build_parser

    args = build_parser().parse_args(["--config", "demo", "--data-dir", str(shapes), "--output-dir", str(tmp_path),
                                      "--set", "device=cpu"])
    t = Trainer(args, DistInfo(0, 1, 0, 1))
    t._setup_runtime()
    t._build_model()
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    with caplog.at_level(logging.INFO, logger="mpirun_kit.maskrcnn.train"):
        t._match_grad_strides(t.model)
    assert "parameters laid out as their gradients: 0 restrided, 0 still differ" in caplog.text
    assert all(torch.equal(p, before[n]) and p.grad is None for n, p in t.model.named_parameters())

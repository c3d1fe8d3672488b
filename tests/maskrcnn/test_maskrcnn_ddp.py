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

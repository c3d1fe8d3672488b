"""The model: it can overfit a few images, produces well-formed detections, loads local weights."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mpirun_kit.maskrcnn.config import BackboneConfig, resolve_config
from mpirun_kit.maskrcnn.data.coco import CocoDataset
from mpirun_kit.maskrcnn.modeling.backbone import FrozenBatchNorm2d, ResNet, WeightsFileError, load_backbone_weights
from mpirun_kit.maskrcnn.modeling.meta_arch import build_model
from mpirun_kit.maskrcnn.modeling.postprocess import paste_masks

#: the overfit test's promise: after OVERFIT_STEPS steps on the same images the total loss is at
#: most 1/OVERFIT_FACTOR of its first value
OVERFIT_STEPS, OVERFIT_FACTOR = 80, 3.0


def tiny_cfg():
    cfg, _ = resolve_config("demo", {"input.min_size_train": "96", "input.max_size_train": "128",
                                     "input.min_size_test": "96", "input.max_size_test": "128"})
    return cfg


def test_overfits_a_handful_of_images(shapes):
    torch.manual_seed(0)
    cfg = tiny_cfg()
    ds = CocoDataset(shapes / "annotations/instances_train.json", shapes / "train", train=True,
                     min_sizes=(96,), max_size=128, flip_prob=0.0, num_classes=3)
    batch = [ds[(i, i)] for i in range(2)]
    model = build_model(cfg.model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
    history = []
    for _ in range(OVERFIT_STEPS):
        losses = model(batch)
        loss = sum(losses.values())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        history.append(float(loss.detach()))
    assert set(losses) == {"loss_rpn_cls", "loss_rpn_box", "loss_cls", "loss_box_reg", "loss_mask"}
    assert min(history[-5:]) * OVERFIT_FACTOR <= history[0], history


def test_eval_output_is_in_original_image_coordinates(shapes):
    torch.manual_seed(0)
    cfg = tiny_cfg()
    ds = CocoDataset(shapes / "annotations/instances_val.json", shapes / "val", train=False, min_sizes=(128,),
                     max_size=160)
    model = build_model(dataclasses.replace(cfg.model, roi_heads=dataclasses.replace(
        cfg.model.roi_heads, score_thresh_test=0.0))).eval()  # untrained: keep every box
    samples = [ds[0], ds[1]]
    out = model(samples)
    for o, s in zip(out, samples):
        h, w = s["orig_size"]
        n = o["boxes"].shape[0]
        assert 0 < n <= cfg.model.roi_heads.detections_per_img
        assert o["masks"].shape == (n, h, w) and o["masks"].dtype == torch.bool
        assert o["scores"].shape == (n,) and o["labels"].min() >= 1 and o["labels"].max() <= 3
        assert o["boxes"][:, 2].max() <= w and o["boxes"][:, 3].max() <= h and o["image_id"] == s["image_id"]


def test_paste_masks_fills_the_box():
    masks = torch.ones((1, 28, 28))
    out = paste_masks(masks, torch.tensor([[10.0, 20.0, 30.0, 25.0]]), 40, 50)
    ys, xs = torch.nonzero(out[0], as_tuple=True)
    assert (int(xs.min()), int(xs.max()), int(ys.min()), int(ys.max())) == (10, 29, 20, 24)


def _torchvision_like_r50_state():
    """A state_dict with torchvision's ResNet-50 keys (incl. fc.* and num_batches_tracked)."""
    ref = ResNet(BackboneConfig(freeze_at=0))
    state = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in ref.state_dict().items()}
    for k in list(state):
        if k.endswith("running_var"):
            state[k] = state[k].abs() + 0.5
            state[k.replace("running_var", "num_batches_tracked")] = torch.tensor(7)
    state["fc.weight"], state["fc.bias"] = torch.zeros(1000, 2048), torch.zeros(1000)
    return state


def test_loads_a_local_torchvision_layout_resnet50(tmp_path):
    state = _torchvision_like_r50_state()
    torch.save(state, tmp_path / "r50.pth")
    model = ResNet(BackboneConfig())
    load_backbone_weights(model, tmp_path / "r50.pth")
    assert torch.equal(model.layer3[5].conv2.weight, state["layer3.5.conv2.weight"])
    assert torch.equal(model.layer1[0].downsample[1].running_var, state["layer1.0.downsample.1.running_var"])
    assert isinstance(model.bn1, FrozenBatchNorm2d)
    frozen = {n.split(".")[0] for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {"conv1", "layer1"}  # stem + res2 frozen, the standard recipe


def test_weights_file_errors(tmp_path):
    model = ResNet(BackboneConfig(depth=(1, 1, 1, 1), base_width=16, stem_width=16))
    with pytest.raises(WeightsFileError, match=r"backbone weights file .*nope.pth does not exist; expected a local"):
        load_backbone_weights(model, tmp_path / "nope.pth")
    (tmp_path / "junk.pth").write_bytes(b"junk")
    with pytest.raises(WeightsFileError, match=r"junk.pth could not be read .*expected a torch.save'd state_dict"):
        load_backbone_weights(model, tmp_path / "junk.pth")
    torch.save(_torchvision_like_r50_state(), tmp_path / "r50.pth")
    with pytest.raises(WeightsFileError, match=r"r50.pth: shape mismatch for conv1.weight \(file \(64, 3, 7, 7\), "
                                               r"model \(16, 3, 7, 7\)\)"):
        load_backbone_weights(model, tmp_path / "r50.pth")


def test_amp_and_channels_last_paths_run(shapes):
    """The GPU's bf16 autocast + channels-last path, exercised with CPU autocast (no GPU here)."""
    torch.manual_seed(0)
    cfg = tiny_cfg()
    ds = CocoDataset(shapes / "annotations/instances_train.json", shapes / "train", train=True,
                     min_sizes=(96,), max_size=128, num_classes=3)
    model = build_model(cfg.model).to(memory_format=torch.channels_last)
    model.channels_last = True
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model([ds[(0, 0)], ds[(1, 1)]])
    sum(losses.values()).backward()
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())
    assert model.fpn.output[0].weight.grad is not None
    model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model([ds[(0, 0)]])
    assert out[0]["boxes"].dtype == torch.float32 and out[0]["masks"].shape[1:] == ds[(0, 0)]["orig_size"]


def test_demo_mask_slots_are_mostly_foreground_from_the_first_step(shapes, monkeypatch):
    """The fixed-shape step runs the mask head on every slot, valid or not (no host sync reads how
    many are), so the demo's slot count must be near what an untrained model has, its GT boxes
    (1-4 per synthetic image): otherwise its first steps pay for empty slots (README, Benchmarks)."""
    from mpirun_kit.maskrcnn.modeling import roi_heads

    torch.manual_seed(0)
    cfg = tiny_cfg()
    cap = roi_heads.mask_slots(cfg.model.roi_heads, 4)
    ds = CocoDataset(shapes / "annotations/instances_train.json", shapes / "train", train=True,
                     min_sizes=(96,), max_size=128, flip_prob=0.0, num_classes=3)
    model = build_model(cfg.model)
    seen, subsample = [], roi_heads.subsample

    def recording_subsample(*args, **kwargs):
        out = subsample(*args, **kwargs)
        seen.append(out[1])  # is_pos [B, S]: the mask batch is up to ``cap`` of these, any image's
        return out

    monkeypatch.setattr(roi_heads, "subsample", recording_subsample)
    with torch.no_grad():
        for first in range(0, 12, 4):
            model([ds[(i, i)] for i in range(first, first + 4)])
    filled = sum(min(int(p.sum()), cap) for p in seen) / (cap * len(seen))
    assert filled >= 0.5, f"{filled:.2f} of the demo's {cap} mask slots per batch hold a foreground RoI"

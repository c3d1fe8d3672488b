"""The remaining user-facing error messages: each says what failed, the value, and the fix."""
from __future__ import annotations

import json
import shutil
import socket
import sys

import pytest
import torch

from mpirun_kit.errors import LaunchError
from mpirun_kit.maskrcnn.config import BackboneConfig
from mpirun_kit.maskrcnn.data.coco import AnnotationFileError, CocoDataset, ImageFileMissingError
from mpirun_kit.maskrcnn.dist import DistInfo, init_distributed
from mpirun_kit.maskrcnn.modeling.backbone import ResNet, WeightsFileError, load_backbone_weights
from mpirun_kit.maskrcnn.train import main

TINY = ["--set", "input.min_size_train=96", "--set", "input.max_size_train=128", "--set", "input.min_size_test=96",
        "--set", "input.max_size_test=128"]


def _run(shapes, out, *extra):
    return main(["--config", "demo", "--data-dir", str(shapes), "--output-dir", str(out), *TINY, *extra], environ={})


def test_eval_only_without_a_checkpoint(shapes, tmp_path, capsys):
    assert _run(shapes, tmp_path, "--eval-only") == 64
    assert f"--eval-only needs a checkpoint: none in {tmp_path} (train first, or pass --resume PATH)" in capsys.readouterr().err


def test_training_set_too_small_for_the_batch(shapes, tmp_path, capsys):
    assert _run(shapes, tmp_path, "--set", "solver.ims_per_gpu=100") == 64
    assert "has 24 usable images, too few for one batch of solver.ims_per_gpu=100 on each of 1 ranks" in capsys.readouterr().err


def test_bad_config_value_from_the_command_line(shapes, tmp_path, capsys):
    assert _run(shapes, tmp_path, "--set", "solver.max_iter=many") == 64
    assert "config key 'solver.max_iter': expected int (like 450), got 'many'" in capsys.readouterr().err


def test_missing_data_without_synthetic_flag(tmp_path, capsys):
    assert _run(tmp_path / "nodata", tmp_path / "out") == 64
    err = capsys.readouterr().err
    assert "instances_val.json does not exist; expected a COCO json (pass --data-dir, or --synthetic-if-missing" in err


def test_bad_launcher_environment(tmp_path, capsys):
    rc = main(["--config", "demo", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path)],
              environ={"OMPI_COMM_WORLD_RANK": "one", "OMPI_COMM_WORLD_SIZE": "2"})
    assert rc == 64 and "OMPI_COMM_WORLD_RANK='one': expected an integer" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_asked_for_without_cuda(shapes, tmp_path, capsys):
    assert _run(shapes, tmp_path, "--set", "device=cuda") == 64
    assert "device='cuda' but torch.cuda.is_available() is False; use --set device=cpu or auto" in capsys.readouterr().err


def test_diverging_loss_stops_with_advice(shapes, tmp_path, capsys):
    rc = _run(shapes, tmp_path, "--set", "solver.base_lr=1e12", "--set", "solver.clip_grad_norm=0",
              "--set", "solver.warmup_iters=0", "--set", "log_period=1", "--set", "solver.max_iter=20",
              "--set", "solver.ims_per_gpu=2")
    err = capsys.readouterr().err
    assert rc == 1 and "lower solver.base_lr (e.g. --set solver.base_lr=0.01) or raise solver.warmup_iters" in err


def test_horovod_not_installed(monkeypatch):
    # CI builds Horovod; a None entry in sys.modules makes its import fail as on a host without it
    monkeypatch.setitem(sys.modules, "horovod.torch", None)
    with pytest.raises(LaunchError, match=r"backend=horovod but horovod.torch is not importable; install the optional"):
        init_distributed(DistInfo(), "cpu", "horovod")


def test_unreachable_master():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    info = DistInfo(1, 2, 1, 2, "127.0.0.1", port, "torchrun")
    with pytest.raises(LaunchError, match=rf"rank 1: could not join the gloo process group at 127.0.0.1:{port} .*"
                                          "check that the master is reachable"):
        init_distributed(info, "cpu", "auto", timeout_s=2)


def test_dataset_level_errors(tmp_path, shapes):
    d = json.loads((shapes / "annotations/instances_train.json").read_text())
    ann = tmp_path / "a.json"
    ann.write_text(json.dumps(dict(d, categories=[])))
    with pytest.raises(AnnotationFileError, match=rf"annotation file {ann} lists no categories"):
        CocoDataset(ann, shapes / "train", train=True, min_sizes=(96,), max_size=128)
    ann.write_text(json.dumps(dict(d, annotations=[dict(a, iscrowd=1) for a in d["annotations"]])))
    with pytest.raises(AnnotationFileError, match=rf"annotation file {ann}: no image has a usable \(non-crowd"):
        CocoDataset(ann, shapes / "train", train=True, min_sizes=(96,), max_size=128)
    shutil.copytree(shapes / "train", tmp_path / "img")
    ann.write_text(json.dumps(dict(d, images=d["images"][:2])))
    ds = CocoDataset(ann, tmp_path / "img", train=True, min_sizes=(96,), max_size=128)
    for i in ds.ids:
        (tmp_path / "img" / ds.coco.imgs[i]["file_name"]).write_bytes(b"garbage")
    with pytest.raises(ImageFileMissingError, match=rf"no image listed in {ann} could be read from {tmp_path / 'img'}"):
        ds[(0, 0)]


def test_backbone_key_mismatch(tmp_path):
    model = ResNet(BackboneConfig(depth=(1, 1, 1, 1), base_width=16, stem_width=16))
    state = dict(model.state_dict(), **{"layer5.0.conv1.weight": torch.zeros(1)})
    del state["layer4.0.conv3.weight"]
    torch.save(state, tmp_path / "w.pth")
    with pytest.raises(WeightsFileError, match=r"w.pth: 1 missing key\(s\) \(e.g. \['layer4.0.conv3.weight'\]\), "
                                               r"1 unexpected \(e.g. \['layer5.0.conv1.weight'\]\); expected torchvision"):
        load_backbone_weights(model, tmp_path / "w.pth")


@pytest.mark.parametrize("extra,message", [
    (["--set", "solver.cuda_graphs=true"], "solver.cuda_graphs=True needs a CUDA device, but this run is on cpu; "
                                           "use --set solver.cuda_graphs=false"),
    (["--set", "solver.amp=bf16"], "solver.amp='bf16' needs a CUDA device, but this run is on cpu; use --set solver.amp=none"),
    (["--set", "solver.channels_last=true"], "solver.channels_last=True needs a CUDA device"),
])
def test_gpu_only_settings_on_a_cpu_run_fail_at_start_naming_the_key(shapes, tmp_path, capsys, extra, message):
    assert _run(shapes, tmp_path, "--set", "device=cpu", *extra) == 64
    assert message in capsys.readouterr().err
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing ran

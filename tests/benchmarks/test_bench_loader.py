"""benchmarks/bench_loader.py: its argument checks, and a smoke run of its CLI end to end (a tiny set,
one loader worker) whose JSON holds the per-core and per-worker figures with the set they came from."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_loader  # noqa: E402


@pytest.mark.parametrize("argv,message", [
    (["--size", "640"], r"--size '640': expected WIDTHxHEIGHT, e.g. 640x480"),
    (["--size", "16x16"], r"--size '16x16': each side must be >= 32"),
    (["--workers", "1,x"], r"--workers '1,x': expected comma-separated counts, e.g. 1,2,4"),
    (["--workers", "0"], r"--workers '0': each count must be >= 1"),
    (["--batches", "0"], r"--batches must be >= 1, got 0"),
    (["--images", "2", "--ims-per-batch", "4"], r"--images \(2\) must be >= --ims-per-batch \(4\)"),
])
def test_bad_arguments_name_the_flag(argv, message):
    with pytest.raises(bench_loader.BenchError, match=message):
        bench_loader.parse_args(argv)


def test_bad_argument_exits_2_with_the_message(capsys):
    assert bench_loader.main(["--size", "640"]) == 2
    assert "bench_loader: error: --size '640'" in capsys.readouterr().err


def test_defaults_are_the_coco_like_set_at_the_presets_size():
    a = bench_loader.parse_args([])
    assert (a.width, a.height, a.objects, a.min_size, a.max_size, a.ims_per_batch) == (640, 480, 7, 800, 1333, 4)


def test_smoke_run_reports_per_core_and_per_worker_figures(tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    out = tmp_path / "loader.json"
    rc = bench_loader.main(["--images", "4", "--size", "64x48", "--min-size", "80", "--max-size", "120",
                            "--batches", "2", "--repeats", "1", "--workers", "1", "--workdir", str(tmp_path / "set"),
                            "--json", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert result["set"] == "4 JPEGs 64x48, 7 polygon objects each, resized to 80 (max 120)"
    assert result["per_core_images_per_s"] > 0 and set(result["workers_images_per_s"]) == {"1"}
    assert result["workers_images_per_s"]["1"] > 0 and result["bar_per_core_images_per_s"] == 50.0
    ann = json.loads((tmp_path / "set/annotations/instances_train.json").read_text())
    assert len(ann["images"]) == 4 and len(ann["annotations"]) == 4 * 7
    assert all(isinstance(a["segmentation"], list) for a in ann["annotations"])  # polygons, as COCO's
    # the per-core figure runs on one thread and gives the caller's count back: a test after this one in the
    # same process saw 1 thread, and DDP's channels-last stride test (tests/maskrcnn/test_maskrcnn_ddp.py) failed
    assert torch.get_num_threads() == threads

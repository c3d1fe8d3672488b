"""The fake-CUDA gate: the trainer's step as ``main()`` builds it, on fake ``cuda:0`` tensors.

Run by tests/maskrcnn/test_maskrcnn_gpu_path.py with the CUDA build of torch (``.venv-cuda``, made
by ``ops/quickstart.sh``; no GPU needed) and the project from the checkout on PYTHONPATH:

    .venv-cuda/bin/python tests/maskrcnn/fake_cuda_gate.py --data-dir D --output-dir O [--world-size 2]

Each rank builds a ``Trainer`` from the same argv ``main()`` parses (r50_fpn_1x, bf16 autocast,
channels-last), reads a batch from the real train DataLoader (the real collate), builds the model,
optimizer and -- with ``--world-size 2`` -- the ``DistributedDataParallel`` wrapper over a real
gloo group, then runs ``Trainer.forward_losses`` (the step's move to the device, the DDP forward
and the losses) and adds the result to a device-side loss window like the loop does, twice,
under ``FakeTensorMode`` with ``syncs.fail_on_host_syncs`` on top: any host sync, device -> host
copy, blocking upload or host/device mixing raises ``HostSyncError`` naming our file:line.  It
prints ``GATE OK rank R: ...`` or the error and exits 1.

What stands in for hardware (there is no GPU here), and only that:
* ``torch.cuda`` facts the trainer asks at start (is_available, set_device, current_device,
  device_count, capability 9.0 (H100), bf16 support) are answered as an H100 would;
* ``torch.cuda.is_available()`` answers True while the step runs (autocast switches itself off
  otherwise), not while the model moves (a real device would be initialised);
* pinning needs a CUDA context: the loader's ``pin_memory`` is switched off, and ``pin_memory()``
  calls in the step return their (fake) tensor as it is (``_PinningStandIn``); the copy out of
  pinned memory is what ``non_blocking`` relies on, and the gate checks the step asks for it;
* DDP's start-up checks (parameter shapes compared, parameters broadcast from rank 0) send
  parameter memory over gloo, which fake tensors do not have: they are skipped (``_no_init_sync``);
* the DDP forward runs inside ``no_sync()``: the C++ reducer's per-iteration timers record CUDA
  events, which need a device; ``no_sync`` skips only that gradient bookkeeping, and DDP's input
  handling (what moved inputs with ``device_ids``) runs unchanged.
Backward and the optimizer step cannot run on fake CUDA tensors (torch needs a device context):
the meta-device gate covers them (test_maskrcnn_gpu_path.py).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _answer_like_an_h100() -> None:
    cuda = torch.cuda
    cuda.is_bf16_supported = lambda *a, **k: True
    cuda.get_device_capability = lambda *a, **k: (9, 0)
    cuda.set_device = lambda *a, **k: None
    cuda.current_device = lambda: 0
    cuda.device_count = lambda: 1


def run_rank(args: argparse.Namespace) -> int:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mpirun_kit.maskrcnn.dist import read_dist_env
    from mpirun_kit.maskrcnn.syncs import HostSyncError, fail_on_host_syncs
    from mpirun_kit.maskrcnn.train import Trainer, build_parser

    argv = ["--config", "r50_fpn_1x", "--data-dir", str(args.data_dir), "--output-dir", str(args.output_dir),
            "--synthetic-if-missing", "--set", "device=cuda", "--set", "backend=gloo",
            "--set", "model.backbone.weights=", "--set", "model.num_classes=3",
            "--set", "data.train_ann=annotations/instances_train.json", "--set", "data.train_images=train",
            "--set", "data.val_ann=annotations/instances_val.json", "--set", "data.val_images=val",
            "--set", "data.synthetic_train=16", "--set", "data.synthetic_val=2", "--set", "data.num_workers=0",
            "--set", "input.min_size_train=(512,)", "--set", "input.max_size_train=768",
            # the start-up stride match runs backward, which fake CUDA tensors cannot (see the docstring);
            # tests/maskrcnn/test_maskrcnn_ddp.py checks it on a real gloo DDP
            "--set", "solver.ddp_match_grad_strides=false"]
    info = read_dist_env(os.environ)
    trainer = Trainer(build_parser().parse_args(argv), info)
    _answer_like_an_h100()
    available = torch.cuda.is_available
    torch.cuda.is_available = lambda: True  # only while the trainer picks its device
    try:
        trainer._setup_runtime()
    finally:
        torch.cuda.is_available = available
    trainer.args.output_dir.mkdir(parents=True, exist_ok=True)
    trainer._ensure_data()
    trainer._build_data()
    trainer.train_loader.pin_memory = False  # pinning needs a CUDA context (see the docstring)
    trainer.sampler.set_state(0, 0)
    loader = iter(trainer.train_loader)
    host_batches = [next(loader), next(loader)]
    model = trainer.new_model()
    _no_init_sync()
    ddp = None
    with FakeTensorMode(allow_non_fake_inputs=True) as fake:
        trainer._build_model(model)
        ddp = trainer.ddp_model if trainer.ddp_model is not trainer.model else None
        trainer.ddp_model.train()
        batches = [{k: fake.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
                   for b in host_batches]
        window = None
        torch.cuda.is_available = lambda: True
        strict = fail_on_host_syncs()
        try:
            with (ddp.no_sync() if ddp is not None else _nothing()), _PinningStandIn(), strict:
                for batch in batches:
                    losses, loss, stacked = trainer.forward_losses(batch)
                    window = stacked if window is None else window + stacked
        except HostSyncError as exc:
            print(f"GATE FAILED rank {info.rank}: {exc}", flush=True)
            trainer.comm.shutdown()
            return 1
        except Exception as exc:  # noqa: BLE001 - any failure of the fake step fails the gate, with what came before it
            print(f"GATE FAILED rank {info.rank}: {type(exc).__name__}: {str(exc).splitlines()[0]}\n"
                  f"  after {len(strict.problems)} flagged op(s):\n" + "\n".join(f"    {p}" for p in strict.problems),
                  flush=True)
            trainer.comm.shutdown()
            return 1
        finally:
            torch.cuda.is_available = available
    wrapped = type(trainer.ddp_model).__name__
    print(f"GATE OK rank {info.rank}: {len(batches)} steps' forward + losses on {loss.device} "
          f"({wrapped}, amp {trainer.amp_dtype}, canvas {tuple(batches[0]['images'].shape)}, "
          f"losses {sorted(losses)}, window {tuple(window.shape)} on {window.device}): no host sync, no device -> "
          "host copy, no host/device mixing", flush=True)
    trainer.comm.shutdown()
    return 0


def _no_init_sync() -> None:
    import torch.nn.parallel.distributed as ddp

    ddp._verify_param_shape_across_processes = lambda *a, **k: None
    ddp._sync_module_states = lambda *a, **k: None


class _PinningStandIn(TorchDispatchMode):
    """``aten._pin_memory`` has no fake kernel: answer it with the tensor itself (see the docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._overloadpacket.__name__ == "_pin_memory":
            return args[0]
        return func(*args, **(kwargs or {}))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--output-dir", type=Path, required=True)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--port", type=int, default=29731)
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args()
    if "RANK" in os.environ:
        return run_rank(args)
    # the launcher: one process per rank, torchrun's variables (read_dist_env reads them as main() does)
    procs = []
    for rank in range(args.world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.world_size), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(args.world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env))
    deadline = time.monotonic() + args.timeout
    rcs = []
    for pr in procs:
        try:
            rcs.append(pr.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pr.kill()
            rcs.append(pr.wait())
            print(f"GATE FAILED: rank {len(rcs) - 1} did not finish within {args.timeout:.0f} s", flush=True)
    return 0 if all(rc == 0 for rc in rcs) else 1


if __name__ == "__main__":
    sys.exit(main())

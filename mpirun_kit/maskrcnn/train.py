"""Training entry: ``python -m mpirun_kit.maskrcnn.train --config demo|r50_fpn_1x --data-dir D --output-dir O``.

The job layer runs this under mpirun, once per rank.  Flow: argv + environment -> resolved Config
(config.py) and DistInfo (dist.py) -> process group -> (rank 0 writes the synthetic set if asked
and absent; the others wait at a barrier) -> datasets, samplers, model, SGD, LR schedule ->
resume from a checkpoint -> the step loop -> COCO evaluation -> metrics.

Output (rank 0): plain lines a SageMaker metric regex can read -- ``step=120 loss=0.8400
lr=0.020000 ...`` every ``log_period`` steps and ``bbox_mAP=0.5120`` / ``segm_mAP=0.4700`` after
evaluation -- the same records as JSON lines in ``<output-dir>/metrics.jsonl`` and as TensorBoard
scalars in ``--tensorboard-dir`` (default ``<output-dir>/tensorboard``; needs the ``tensorboard``
package, the extra ``mpirun_kit[tensorboard]``), a tqdm progress bar when stderr is a terminal, and
``<output-dir>/metrics.json`` (written atomically) at the end.

Exit codes: 0 done; 143 (128 + SIGTERM) stopped by SIGTERM (spot interruption) after finishing the
current step and writing a checkpoint -- rerun with ``--resume auto`` to continue exactly there;
64 bad input (config, data, checkpoint); 70 the process group could not form; 1 training diverged.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from .. import progress as step_report  # hang detection: the master sees each rank's step
from ..core.files import write_json_atomic
from ..errors import MpirunKitError, SpecError
from .config import (Config, add_config_flags, check_device_support, config_from_dict, config_to_dict, loader_share,
                     lr_at, parse_overrides, resolve_config, resolve_schedule, scheduled_solver, step_host_syncs)
from .dist import Comm, DistInfo, end_process, init_distributed, read_dist_env

log = logging.getLogger("mpirun_kit.maskrcnn.train")

#: exit code after a SIGTERM-triggered checkpoint (128 + 15, as errors.py's table says)
EXIT_PREEMPTED = 128 + signal.SIGTERM


class TrainingDivergedError(MpirunKitError):
    """The loss became NaN or infinite."""

    exit_code = 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mpirun_kit.maskrcnn.train",
        description="Train and evaluate Mask R-CNN; run one process per rank (mpirun, torchrun or alone).",
        epilog="Exit codes: 0 ok; 143 stopped by SIGTERM after writing a checkpoint (resume with --resume auto); "
               "64 bad config/data/checkpoint; 70 process group failed; 1 loss diverged.",
    )
    add_config_flags(p)  # --config and --set: defined once, also read by config.schedule_for_program
    p.add_argument("--data-dir", required=True, type=Path, help="dataset root; the config's data.* paths are relative to it")
    p.add_argument("--output-dir", required=True, type=Path, help="checkpoints, metrics.jsonl, metrics.json")
    p.add_argument("--synthetic-if-missing", action="store_true",
                   help="write the synthetic shapes dataset into --data-dir when the train annotations are absent")
    p.add_argument("--resume", default="auto", metavar="auto|PATH|none",
                   help="auto: continue from <output-dir>/last_checkpoint if present (default); PATH: that file; none: start fresh")
    p.add_argument("--eval-only", action="store_true", help="evaluate the resumed checkpoint and exit")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config (preset + --set) as YAML and exit; nothing else runs")
    p.add_argument("--tensorboard-dir", type=Path, default=None, metavar="DIR",
                   help="TensorBoard event files (losses, lr, images_per_s, eval mAP): default <output-dir>/tensorboard; "
                        "on SageMaker pass /opt/ml/output/tensorboard with target.sagemaker.tensorboard_s3 set")
    p.add_argument("--stop-after-steps", type=int, default=0, metavar="N",
                   help="train at most N steps in this run, checkpoint and exit 0 without evaluating "
                        "(time-sliced jobs; the LR schedule still follows solver.max_iter)")
    return p


def denormals_flushed() -> bool:
    """Whether this process's intra-op threads treat denormal float32 as zero (FTZ/DAZ).

    A parallel multiply of the smallest denormal (made from its bit pattern: converting a Python
    float would already flush it on this thread) over a chunk per thread: any chunk whose thread
    keeps denormals leaves non-zero bits.  The bits are compared as integers (a float comparison
    under DAZ would read a denormal as 0).
    """
    import torch

    n = max(torch.get_num_threads(), 1) * 65536  # above ATen's grain size (32768): every thread takes a chunk
    x = torch.ones(n, dtype=torch.int32).view(torch.float32)  # 1.4e-45, the smallest denormal
    return int(torch.count_nonzero((x * 3.0).view(torch.int32))) == 0


class _RankFilter(logging.Filter):
    """Ranks other than 0 log warnings and errors only (no print patching)."""

    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return self.rank == 0 or record.levelno >= logging.WARNING


def _setup_logging(rank: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RankFilter(rank))
    handler.setFormatter(logging.Formatter("%(asctime)s rank%(rank)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


class _Progress:
    """A tqdm progress bar on a terminal; nothing otherwise (the periodic lines suffice)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None

    def update(self, done: int, total: int, text: str = "") -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, file=sys.stderr, dynamic_ncols=True, leave=True)
        self.bar.total = total
        self.bar.update(done - self.bar.n)
        self.bar.set_postfix_str(text, refresh=False)
        if done >= total:
            self.bar.close()
            self.bar = None


class _Scalars:
    """TensorBoard scalars for every metrics record (rank 0): ``train/*`` from the step lines, ``eval/*``
    from evaluation.  Without the ``tensorboard`` package it says so once and writes nothing."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.writer = None
        self.missing = False

    def add(self, record: Mapping[str, Any]) -> None:
        if self.missing:
            return
        if self.writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self.missing = True
                log.warning("no TensorBoard event files: the tensorboard package is not installed "
                            "(pip install 'mpirun_kit[tensorboard]'); metrics.jsonl has the same records")
                return
            self.writer = SummaryWriter(log_dir=str(self.log_dir))
        group = "eval" if any(k.endswith("mAP") for k in record) else "train"
        for k, v in record.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                self.writer.add_scalar(f"{group}/{k}", v, record["step"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    environ = os.environ if environ is None else environ
    if args.print_config:
        import yaml

        try:
            cfg, notes = resolve_config(args.config, parse_overrides(args.overrides))
        except MpirunKitError as exc:
            print(f"maskrcnn.train: error: {exc}", file=sys.stderr)
            return exc.exit_code
        print("".join(f"# {n}\n" for n in notes) + yaml.safe_dump(json.loads(json.dumps(config_to_dict(cfg))),
                                                                  sort_keys=False, default_flow_style=None), end="")
        return 0
    try:
        info = read_dist_env(environ)
    except MpirunKitError as exc:
        print(f"maskrcnn.train: error: {exc}", file=sys.stderr)
        return exc.exit_code
    _setup_logging(info.rank)
    try:
        return Trainer(args, info).run()
    except MpirunKitError as exc:
        log.error("%s", exc)
        print(f"maskrcnn.train: rank {info.rank}: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


class Trainer:
    def __init__(self, args: argparse.Namespace, info: DistInfo):
        self.args, self.info = args, info
        cfg, notes = resolve_config(args.config, parse_overrides(args.overrides))
        for note in notes:
            log.info("config: %s", note)
        self.cfg: Config = cfg
        self.stop_requested = False
        self.paused = False
        self.scalars = _Scalars(args.tensorboard_dir or args.output_dir / "tensorboard")
        self.skipped = 0
        self.step = 0
        self.epoch = 0
        self.position = 0

    # ------------------------------------------------------------- set-up
    def _setup_runtime(self) -> None:
        import numpy as np
        import torch

        cfg, info = self.cfg, self.info
        use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        # ranks share the host's cores: oversubscribing threads makes every rank slower; on a GPU
        # the rank needs few threads of its own and its loader workers take the rest of its share
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads, self.num_workers = loader_share(cpus, info.local_size, "cuda" if use_cuda else "cpu",
                                                 cfg.data.num_workers, cfg.threads_per_rank)
        torch.set_num_threads(threads)
        # in every intra-op thread (config.py flush_denormal says why); the probe runs a parallel
        # op and checks every thread's chunk, and the count of flushing ranks is logged
        if cfg.flush_denormal:
            from .ops import set_flush_denormal

            if not set_flush_denormal(True):
                log.warning("this CPU cannot flush denormals (no SSE3): the step may slow down from random weights")
        self.denormals_flushed = denormals_flushed()
        if cfg.flush_denormal and not self.denormals_flushed:
            log.warning("denormals are not flushed in every intra-op thread (the compiled ops are not loaded and "
                        "the thread pool existed before): the CPU step may slow down from random weights")
        if use_cuda:
            if not torch.cuda.is_available():
                raise SpecError("device='cuda' but torch.cuda.is_available() is False; use --set device=cpu or auto")
            # pinning (CUDA_VISIBLE_DEVICES) was applied by the job layer before this process started
            torch.cuda.set_device(info.local_rank % torch.cuda.device_count())
            self.device = torch.device("cuda", torch.cuda.current_device())
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cudnn.benchmark = cfg.solver.cudnn_benchmark
        else:
            self.device = torch.device("cpu")
        # bad settings for this device fail here, naming the key, before any data or model work
        check_device_support(cfg, self.device.type,
                             bf16_supported=use_cuda and torch.cuda.is_bf16_supported(),
                             capability=torch.cuda.get_device_capability(self.device) if use_cuda else (0, 0),
                             step_syncs=step_host_syncs(cfg))
        backend = init_distributed(info, self.device.type, cfg.backend)
        if backend == "horovod":
            import horovod.torch as hvd

            info = DistInfo(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), launcher=info.launcher)
            self.info = info
        self.comm = Comm(backend, info.rank, info.world_size)
        seed = cfg.seed * 1000 + info.rank
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        log.info("rank %d/%d (local %d) on %s, %d thread(s), %d loader worker(s) (%s), backend %s, denormals %s",
                 info.rank, info.world_size, info.local_rank, self.device, threads, self.num_workers,
                 f"data.num_workers={cfg.data.num_workers}" if cfg.data.num_workers >= 0 else
                 f"auto: {cpus} CPUs / {max(info.local_size, 1)} local ranks - {threads} threads",
                 backend, "flushed" if self.denormals_flushed else "kept")

    def _paths(self) -> dict[str, Path]:
        d, dc = self.args.data_dir, self.cfg.data
        return {"train_ann": d / dc.train_ann, "train_images": d / dc.train_images,
                "val_ann": d / dc.val_ann, "val_images": d / dc.val_images}

    def _ensure_data(self) -> None:
        p, dc = self._paths(), self.cfg.data
        if not self.args.synthetic_if_missing:
            return
        if self.info.is_main and not (p["train_ann"].is_file() and p["val_ann"].is_file()):
            from .data.synthetic import write_split

            log.info("writing the synthetic shapes dataset to %s (%d train, %d val images)",
                     self.args.data_dir, dc.synthetic_train, dc.synthetic_val)
            write_split(self.args.data_dir, "train", dc.synthetic_train, dc.synthetic_size, dc.synthetic_seed,
                        p["train_ann"], p["train_images"])
            write_split(self.args.data_dir, "val", dc.synthetic_val, dc.synthetic_size, dc.synthetic_seed,
                        p["val_ann"], p["val_images"])
        self.comm.barrier()  # the other ranks wait for rank 0's files (bounded by the group timeout)

    def _build_data(self) -> None:
        from torch.utils.data import DataLoader

        from .data.coco import CocoDataset
        from .data.sampler import EvalBatchSampler, TrainBatchSampler

        cfg, info, p = self.cfg, self.info, self._paths()
        # the workers pad the batch (data/batch.py); on CUDA the loader pins it, so the step's one
        # non_blocking copy does not make the host wait
        workers = getattr(self, "num_workers", max(cfg.data.num_workers, 0))  # set by _setup_runtime
        common = {"num_workers": workers, "collate_fn": self.collate, "worker_init_fn": _worker_init,
                  "pin_memory": self.device.type == "cuda", "persistent_workers": workers > 0}
        self.val_ds = CocoDataset(p["val_ann"], p["val_images"], train=False, min_sizes=(cfg.input.min_size_test,),
                                  max_size=cfg.input.max_size_test, num_classes=cfg.model.num_classes)
        self.val_loader = DataLoader(self.val_ds, batch_sampler=EvalBatchSampler(
            len(self.val_ds), cfg.test.ims_per_gpu, rank=info.rank, world_size=info.world_size), **common)
        if self.args.eval_only:
            return
        self.train_ds = CocoDataset(p["train_ann"], p["train_images"], train=True,
                                    min_sizes=cfg.input.min_size_train, max_size=cfg.input.max_size_train,
                                    flip_prob=cfg.input.flip_prob, num_classes=cfg.model.num_classes)
        self.sampler = TrainBatchSampler(self.train_ds.aspect_groups, cfg.solver.ims_per_gpu, rank=info.rank,
                                         world_size=info.world_size, seed=cfg.seed,
                                         grouping=cfg.data.aspect_ratio_grouping)
        if not self.sampler.epoch_batches(0):
            raise SpecError(f"training set {p['train_ann']} has {len(self.train_ds)} usable images, too few for one "
                            f"batch of solver.ims_per_gpu={cfg.solver.ims_per_gpu} on each of {info.world_size} ranks")
        self.train_loader = DataLoader(self.train_ds, batch_sampler=self.sampler, **common)

    @property
    def collate(self):
        """The DataLoader's collate_fn: samples -> one padded batch (data/batch.py)."""
        from .data.batch import Collate

        return Collate(self.cfg.input.canvas_multiple or self.cfg.input.size_divisibility)

    def new_model(self):
        """The model on the host, with the backbone weights the config names (no device yet)."""
        from .modeling.backbone import load_backbone_weights
        from .modeling.meta_arch import build_model

        cfg = self.cfg
        model = build_model(cfg.model, cfg.input.size_divisibility)
        if cfg.model.backbone.weights:
            w = Path(cfg.model.backbone.weights)
            load_backbone_weights(model.backbone, w if w.is_absolute() else self.args.data_dir / w)
        return model

    def _build_model(self, model=None) -> None:
        """Model on the device, optimizer, DDP/Horovod wrapping, LR schedule.

        ``model``: one from ``new_model()`` (the fake-CUDA gate builds it before entering the fake
        mode, where a module can move to the device once); None builds it here.
        """
        import torch

        cfg = self.cfg
        model = self.new_model() if model is None else model
        # the foreground RoIs per image ride along in the loss dict, averaged over the log window
        # and all-reduced with the losses (no host read of their own): the mask-head cap's evidence
        model.roi_heads.report_stats = True
        # on the CPU the mask head runs on the valid slots only: reading their count waits for no
        # device there, and the padding slots (loss weight 0) cost as much as real ones (issue #32:
        # 64 slots for 16 foreground RoIs in the peer benchmark); a GPU step keeps its fixed shapes
        model.roi_heads.compact_mask_slots = self.device.type == "cpu" and not cfg.solver.cuda_graphs
        # one conversion (device and layout together): a second .to would copy every weight again
        if self.device.type == "cuda" and cfg.solver.channels_last:
            model.to(self.device, memory_format=torch.channels_last)
            model.channels_last = True
        else:
            model.to(self.device)
        self.model = model
        amp = cfg.solver.amp if self.device.type == "cuda" else "none"
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
        if (self.device.type == "cuda" and cfg.solver.channels_last and cfg.solver.ddp_match_grad_strides
                and self.comm.backend in ("gloo", "nccl")):
            self._match_grad_strides(model)
        global_batch = cfg.solver.ims_per_gpu * self.info.world_size
        self.global_batch = global_batch
        self.schedule = resolve_schedule(cfg, global_batch)
        self.solver = scheduled_solver(cfg, self.schedule)
        log.info("%s", self.schedule.format())
        base = self.schedule.base_lr
        decay, no_decay = [], []
        for name, prm in model.named_parameters():
            if prm.requires_grad:
                # normalisation parameters get no weight decay (the standard recipe's WEIGHT_DECAY_NORM=0)
                is_norm = any(isinstance(m, torch.nn.GroupNorm) for n, m in model.named_modules()
                              if name.startswith(n + ".") and name.count(".") == n.count(".") + 1)
                (no_decay if is_norm else decay).append(prm)
        # fused: one kernel for the whole update on CUDA (torch has no fused SGD for CPU tensors)
        self.optimizer = torch.optim.SGD([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=base,
                                         momentum=cfg.solver.momentum, weight_decay=cfg.solver.weight_decay,
                                         fused=self.device.type == "cuda" or None)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=(amp == "fp16"))
        self.ddp_model = model
        if self.comm.backend in ("gloo", "nccl"):
            from torch.nn.parallel import DistributedDataParallel

            # buffers (FrozenBN statistics, pixel mean/std) never change: no per-forward broadcast;
            # gradients live in the all-reduce buckets (no copy); static_graph when the config says
            # every parameter gets a gradient every step (true since the step has fixed shapes).
            # device_ids=None: the step has already moved the batch (non_blocking, from pinned
            # memory); with device_ids DDP would copy every input tensor again, blocking
            import inspect

            # newer torch renames broadcast_buffers (same meaning for buffers equal at start)
            no_buffer_sync = ({"forward_sync_buffers": False}
                              if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                              else {"broadcast_buffers": False})
            self.ddp_model = DistributedDataParallel(
                model, device_ids=None, gradient_as_bucket_view=True, static_graph=cfg.solver.ddp_static_graph, **no_buffer_sync)
        elif self.comm.backend == "horovod":
            import horovod.torch as hvd

            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            self.optimizer = hvd.DistributedOptimizer(self.optimizer, named_parameters=model.named_parameters())
        if cfg.solver.cuda_graphs:
            from .ops import _loader

            # the library loads outside the trace (the loader takes a lock, which dynamo cannot
            # trace); fullgraph: a graph break would split the captured graphs (0 breaks is a test)
            _loader.active().load()
            self.ddp_model = torch.compile(self.ddp_model, mode="reduce-overhead", fullgraph=True, dynamic=False)
        # after any Horovod wrapping, so the schedule drives the optimizer that actually steps
        # the lambda must not capture self: a Trainer <-> scheduler cycle outlives main(), and the
        # persistent loader workers it holds (which ignore SIGTERM) then block the exit
        solver = self.solver
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_at(solver, s, global_batch) / base)

    def _match_grad_strides(self, model) -> None:
        """Lay the parameters out as their gradients come back on this GPU (dist.match_grad_strides):
        two forward/backward passes of a small synthetic batch (2 images of 256x320) under the
        run's autocast, before DDP builds its buckets.  An optimisation: a failure is logged, not raised."""
        import torch

        from .cost import synthetic_batch
        from .data.batch import collate, to_device
        from .dist import match_grad_strides

        batch = to_device(collate(synthetic_batch(2, 256, 320, 3), self.cfg.input.size_divisibility), self.device)

        def loss():
            with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None):
                losses = model(batch)
            return sum(v.float() for k, v in losses.items() if k.startswith("loss_"))

        try:
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                changed, still = match_grad_strides(model.named_parameters(), loss)
        except (RuntimeError, ValueError) as exc:
            log.warning("could not match the parameters' strides to their gradients (%s): DDP may copy some "
                        "gradients into its buckets each step", exc)
            return
        log.info("parameters laid out as their gradients: %d restrided, %d still differ%s", len(changed), len(still),
                 f" ({', '.join(still[:3])})" if still else "")

    def _resume(self) -> None:
        from .checkpoint import find_last, load_checkpoint, restore_rng

        arg = self.args.resume
        if arg == "none":
            path = None
        elif arg == "auto":
            path = find_last(self.args.output_dir)
        else:
            path = Path(arg)
        if path is None:
            if self.args.eval_only:
                raise SpecError(f"--eval-only needs a checkpoint: none in {self.args.output_dir} "
                                "(train first, or pass --resume PATH)")
            return
        state = load_checkpoint(path)
        saved = config_from_dict(state["config"])
        if saved != self.cfg:
            diffs = _diff(config_to_dict(saved), config_to_dict(self.cfg))
            log.warning("resuming %s with a config that differs from the saved one (%s); the current values win",
                        path, "; ".join(diffs[:5]))
        self.model.load_state_dict(state["model"])
        self.step = int(state["step"])
        if self.args.eval_only:
            return
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.epoch, self.position = int(state["sampler"]["epoch"]), int(state["sampler"]["position"])
        self.skipped = int(state.get("skipped_images", 0))
        rngs = state["rng"]
        if len(rngs) == self.info.world_size:
            restore_rng(rngs[self.info.rank])
        else:
            log.warning("checkpoint %s was written by %d ranks, this run has %d: RNG streams are reseeded, so the "
                        "continuation is statistically but not bit-for-bit the same", path, len(rngs), self.info.world_size)
        log.info("resumed from %s at step %d (epoch %d, batch %d)", path, self.step, self.epoch, self.position)

    # --------------------------------------------------------------- loop
    def _save(self) -> None:
        from .checkpoint import capture_rng, save_checkpoint

        rngs = self.comm.gather_object(capture_rng())
        if not self.info.is_main:
            return
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                 "sampler": {"epoch": self.epoch, "position": self.position}, "rng": rngs,
                 "step": self.step, "config": config_to_dict(self.cfg), "skipped_images": self.skipped,
                 "world_size": self.info.world_size}
        path = save_checkpoint(self.args.output_dir, state)
        log.info("checkpoint %s written", path)

    def _emit(self, record: dict[str, Any]) -> None:
        """One metrics record: a plain ``k=v`` line on stdout and a JSON line (rank 0 only)."""
        if not self.info.is_main:
            return
        line = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items())
        print(line, flush=True)
        with open(self.args.output_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        self.scalars.add(record)

    def _on_sigterm(self, signum, frame) -> None:
        # only a flag: the current step finishes, then every rank checkpoints and exits together
        self.stop_requested = True

    def to_device(self, batch) -> dict[str, Any]:
        """The step's one host -> device move of a collated batch (a list of samples is collated first)."""
        from .data.batch import is_batch, to_device

        return to_device(batch if is_batch(batch) else self.collate(batch), self.device)

    def forward_losses(self, batch) -> tuple[dict[str, Any], Any, Any]:
        """Move the batch, run the (DDP-wrapped) model under autocast: (losses, total, [total, *losses]).

        The fake-CUDA gate (tests/maskrcnn/fake_cuda_gate.py) runs exactly this under a mode that
        fails on any host sync, device -> host copy or host/device mixing.
        """
        import torch

        batch = self.to_device(batch)
        # no autocast context at all without amp: the meta-device gate runs this, and autocast
        # refuses device types it has no policy for
        amp = (torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype is not None
               else contextlib.nullcontext())
        with amp:
            losses = self.ddp_model(batch)
        # the model's other entries are statistics for the log (roi_heads.report_stats), not losses
        loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
        return losses, loss, torch.stack([loss.detach(), *(v.detach() for v in losses.values())]).float()

    def train_step(self, batch, trainable: list | None = None) -> tuple[dict[str, Any], Any]:
        """Forward, backward and optimizer step on one batch; nothing here reads the device on the host.

        ``batch``: what the train loader yields (data/batch.py), or a list of samples.  Returns (the
        loss dict, [total, *losses] as one float device tensor for the log window).
        tests/maskrcnn/test_maskrcnn_syncs.py counts the host syncs of exactly this call.
        """
        losses, loss, stacked = self.forward_losses(batch)
        self.backward_and_step(loss, trainable)
        return losses, stacked

    def backward_and_step(self, loss, trainable: list | None = None) -> None:
        """Backward, (clipping,) the optimizer and LR-schedule steps for the loss ``forward_losses`` gave.

        The backward gate (tests/maskrcnn/test_maskrcnn_gpu_path.py) runs exactly this on the
        ``meta`` device under ``syncs.fail_on_host_syncs("meta")``: no host read, no device -> host
        copy, in autograd or in the optimizer.
        """
        import torch

        solver = self.cfg.solver
        if trainable is None:
            trainable = [p for p in self.model.parameters() if p.requires_grad]
        # set_to_none is the default; Horovod's DistributedOptimizer.zero_grad() takes no arguments
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        if self.comm.backend == "horovod":
            # Horovod reduces gradients inside step(); unscaling/clipping must see reduced ones
            self.optimizer.synchronize()
        if solver.clip_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(trainable, solver.clip_grad_norm)
        if self.comm.backend == "horovod":
            with self.optimizer.skip_synchronize():
                self.scaler.step(self.optimizer)
        else:
            self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()

    def _train(self, clock=time) -> int:
        import torch

        cfg, solver = self.cfg, self.solver
        progress = _Progress(self.info.is_main and sys.stderr.isatty())
        self.ddp_model.train()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        it = None
        t0, step0 = clock.monotonic(), self.step
        window = None  # the sum of [total, *losses] since the last log step, on the device
        window_steps = 0
        last_loss = float("nan")
        while self.step < solver.max_iter:
            if it is None:
                self.sampler.set_state(self.epoch, self.position)
                it = iter(self.train_loader)
            try:
                batch = next(it)
            except StopIteration:
                self.epoch, self.position, it = self.epoch + 1, 0, None
                continue
            self.skipped += sum(len(m.get("skipped", ())) for m in batch["meta"])
            # stays on the device until a log step: no per-step GPU synchronisation
            losses, stacked = self.train_step(batch, trainable)
            window = stacked if window is None else window + stacked
            window_steps += 1
            self.step += 1
            step_report.step(self.step)
            self.position += 1
            stop = False
            if self.step % cfg.log_period == 0 or self.step == solver.max_iter:
                # The one host read per log interval (syncs.PERIODIC_SYNCS): the window's mean and
                # the stop flag in one all-reduce.  SIGTERM may reach the ranks at different steps,
                # so every rank stops at the first log step after any rank got it (at most
                # log_period steps later), all at the same step.
                # [stop flag, ranks flushing denormals, mean window]: the flush count shows the
                # mode is on in every rank (config.py flush_denormal), at no extra message
                local = torch.cat([torch.tensor([float(self.stop_requested), float(self.denormals_flushed)]),
                                   (window / window_steps).cpu()])
                reduced = self.comm.allreduce_sum(local)
                stop, mean = bool(reduced[0] > 0), reduced[2:] / self.info.world_size
                window, window_steps = None, 0
                last_loss = float(mean[0])
                if not math.isfinite(float(mean[0])):
                    raise TrainingDivergedError(f"loss is {float(mean[0])} at step {self.step}; lower solver.base_lr "
                                                "(e.g. --set solver.base_lr=0.01) or raise solver.warmup_iters")
                rate = (self.step - step0) * self.global_batch / max(clock.monotonic() - t0, 1e-9)
                eta = (solver.max_iter - self.step) * self.global_batch / max(rate, 1e-9)
                rec = {"step": self.step, "loss": float(mean[0]), "lr": self.scheduler.get_last_lr()[0],
                       **{k: float(v) for k, v in zip(losses, mean[1:])}, "images_per_s": rate, "eta_s": round(eta),
                       "denormal_flush_ranks": int(reduced[1])}
                self._emit(rec)
            progress.update(self.step, solver.max_iter, f"loss={last_loss:.3f}")
            last = self.step == solver.max_iter
            pause = bool(self.args.stop_after_steps) and self.step - step0 >= self.args.stop_after_steps
            if stop or last or pause or self.step % solver.checkpoint_period == 0:
                self._save()
            if pause and not last:
                log.info("--stop-after-steps %d: paused at step %d; continue with --resume auto",
                         self.args.stop_after_steps, self.step)
                self.paused = True
                return 0
            if stop:
                log.warning("SIGTERM: stopped after step %d with a checkpoint in %s; rerun with --resume auto",
                            self.step, self.args.output_dir)
                return EXIT_PREEMPTED
            if self.schedule.eval_period and self.step % self.schedule.eval_period == 0 and not last:
                self._evaluate()
        return 0

    def _evaluate(self) -> dict[str, float] | None:
        from .evaluate import evaluate

        progress = _Progress(self.info.is_main and sys.stderr.isatty())
        t0 = time.monotonic()
        metrics = evaluate(self.model, self.val_ds, self.val_loader, self.comm, progress=progress.update)
        if metrics is not None:
            self._emit({"step": self.step, **{k: round(v, 4) for k, v in metrics.items()},
                        "eval_s": round(time.monotonic() - t0, 1)})
        return metrics

    def run(self) -> int:
        self._setup_runtime()
        try:
            self.args.output_dir.mkdir(parents=True, exist_ok=True)
            self._ensure_data()
            self._build_data()
            self._build_model()
            self._resume()
            t0 = time.monotonic()
            if not self.args.eval_only:
                previous = signal.signal(signal.SIGTERM, self._on_sigterm)
                try:
                    rc = self._train()
                finally:
                    signal.signal(signal.SIGTERM, previous)
                if rc or self.paused:
                    return rc
            import torch

            skipped = int(self.comm.allreduce_sum(torch.tensor([float(self.skipped)])).item())
            metrics = self._evaluate()
            if self.info.is_main:
                if skipped:
                    log.warning("%d unreadable image(s) were skipped during training (see the warnings above)", skipped)
                final = {"step": self.step, "skipped_images": skipped, "world_size": self.info.world_size,
                         "train_wall_s": round(time.monotonic() - t0, 1), **(metrics or {})}
                write_json_atomic(self.args.output_dir / "metrics.json", final, indent=2, sort_keys=True)
                print(f"bbox_mAP={final.get('bbox_mAP', 0.0):.4f} segm_mAP={final.get('segm_mAP', 0.0):.4f} "
                      f"skipped_images={skipped}", flush=True)
            return 0
        finally:
            self.scalars.close()
            self.comm.shutdown()


def _worker_init(worker_id: int) -> None:
    # a SIGTERM sent to the whole process group must not kill the loader workers mid-batch: the
    # main process finishes its step, checkpoints, and then shuts them down itself
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    out = []
    for k in a:
        if isinstance(a[k], dict):
            out += _diff(a[k], b.get(k, {}), f"{prefix}{k}.")
        elif a[k] != b.get(k):
            out.append(f"{prefix}{k}: saved {a[k]!r}, now {b.get(k)!r}")
    return out


if __name__ == "__main__":
    # not sys.exit(main()): a rank ends without interpreter finalization (dist.end_process says why)
    end_process(main)

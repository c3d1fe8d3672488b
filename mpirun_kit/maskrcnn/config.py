"""Typed Mask R-CNN configuration: the first value in the training data flow.

``resolve_config(preset, overrides)`` starts from ``Config()`` (whose defaults ARE the standard
R50-FPN 1x COCO recipe), applies a preset from ``PRESETS`` (plain data: dotted key -> value) and
then the user's ``--set key=value`` overrides, which always win.  The result is a frozen, printable
value; train.py saves ``config_to_dict(cfg)`` in every checkpoint and rebuilds it with
``config_from_dict``.  Nothing here reads the environment or the filesystem.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import yaml

from ..errors import SpecError

log = logging.getLogger(__name__)


class ConfigError(SpecError):
    """A config key or value is invalid (unknown key, wrong type, unknown preset)."""


@dataclass(frozen=True)
class BackboneConfig:
    #: blocks per stage res2..res5 (ResNet-50: 3, 4, 6, 3)
    depth: tuple[int, ...] = (3, 4, 6, 3)
    #: stem output channels and the inner width of the first bottleneck stage
    stem_width: int = 64
    base_width: int = 64
    #: "frozen_bn" (pretrained statistics, the standard recipe) or "gn" (GroupNorm, for
    #: training a small backbone from scratch where there are no statistics to freeze)
    norm: str = "frozen_bn"
    gn_groups: int = 32
    #: 0 = train everything, 1 = freeze the stem, 2 = stem + res2 (standard)
    freeze_at: int = 2
    #: local path to an ImageNet ResNet-50 state_dict in torchvision's layout ("" = random init);
    #: never downloaded at run time.  Relative paths are relative to --data-dir.
    weights: str = ""


@dataclass(frozen=True)
class RPNConfig:
    anchor_sizes: tuple[int, ...] = (32, 64, 128, 256, 512)  # one size per level P2..P6
    aspect_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    pre_nms_topk_train: int = 2000  # per level
    pre_nms_topk_test: int = 1000  # per level
    post_nms_topk_train: int = 1000  # per image
    post_nms_topk_test: int = 1000  # per image
    nms_thresh: float = 0.7
    min_size: float = 0.0
    fg_iou_thresh: float = 0.7
    bg_iou_thresh: float = 0.3
    batch_size_per_image: int = 256
    positive_fraction: float = 0.5


@dataclass(frozen=True)
class RoIHeadsConfig:
    batch_size_per_image: int = 512
    positive_fraction: float = 0.25
    fg_iou_thresh: float = 0.5
    box_pool_size: int = 7
    mask_pool_size: int = 14
    sampling_ratio: int = 2
    fc_dim: int = 1024
    mask_conv_dim: int = 256
    mask_num_convs: int = 4
    mask_resolution: int = 28
    #: mask-head slots per image on average: the head runs on this x images slots per batch (fixed
    #: shapes), filled on the device with the foreground RoIs of any image of the batch: a random
    #: subset when there are more, padding slots without loss when there are fewer.  0 = every
    #: foreground slot the sampler can give (batch_size_per_image * positive_fraction per image)
    mask_rois_per_image: int = 0
    bbox_reg_weights: tuple[float, ...] = (10.0, 10.0, 5.0, 5.0)
    score_thresh_test: float = 0.05
    nms_thresh_test: float = 0.5
    detections_per_img: int = 100


@dataclass(frozen=True)
class ModelConfig:
    num_classes: int = 80  # foreground classes; background is implicit
    fpn_channels: int = 256
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    rpn: RPNConfig = field(default_factory=RPNConfig)
    roi_heads: RoIHeadsConfig = field(default_factory=RoIHeadsConfig)
    #: ImageNet statistics in RGB 0-255, the layout torchvision weights expect
    pixel_mean: tuple[float, ...] = (123.675, 116.28, 103.53)
    pixel_std: tuple[float, ...] = (58.395, 57.12, 57.375)


@dataclass(frozen=True)
class InputConfig:
    min_size_train: tuple[int, ...] = (800,)  # one is drawn per image
    max_size_train: int = 1333
    min_size_test: int = 800
    max_size_test: int = 1333
    flip_prob: float = 0.5
    size_divisibility: int = 32
    #: the padded canvas of a batch is rounded up to this (0 = size_divisibility): a few fixed
    #: canvas shapes, so cudnn.benchmark tunes a few times instead of for every new padded size
    canvas_multiple: int = 0


@dataclass(frozen=True)
class DataConfig:
    #: paths relative to --data-dir
    train_ann: str = "annotations/instances_train2017.json"
    train_images: str = "train2017"
    val_ann: str = "annotations/instances_val2017.json"
    val_images: str = "val2017"
    #: loader worker processes per rank; -1 = follow the host: its CPUs divided by the ranks on it,
    #: less the rank's own intra-op threads (``loader_share``; the number is in the log and the plan)
    num_workers: int = -1
    aspect_ratio_grouping: bool = True
    #: the synthetic shapes set that --synthetic-if-missing writes when train_ann is absent
    synthetic_train: int = 600
    synthetic_val: int = 100
    synthetic_size: int = 160
    synthetic_seed: int = 2026


@dataclass(frozen=True)
class SolverConfig:
    base_lr: float = 0.02
    #: base_lr is for this global batch; the effective LR scales linearly with the real one
    reference_batch: int = 16
    ims_per_gpu: int = 2
    momentum: float = 0.9
    weight_decay: float = 1e-4
    max_iter: int = 90000
    #: LR drops by gamma at these fractions of max_iter (60k and 80k of 90k in the 1x recipe)
    steps: tuple[float, ...] = (2 / 3, 8 / 9)
    gamma: float = 0.1
    warmup_iters: int = 1000
    warmup_factor: float = 0.001
    checkpoint_period: int = 5000
    #: "none", "bf16" or "fp16" (fp16 uses a grad scaler); CUDA only (a CPU run with it fails at start)
    amp: str = "none"
    #: NHWC activations and weights (tensor-core convolutions); CUDA only, sm70 or newer
    channels_last: bool = False
    clip_grad_norm: float = 0.0  # 0 = off
    #: scale max_iter, warmup_iters, checkpoint_period and test.eval_period by reference_batch /
    #: global batch (the linear scaling rule: same images seen, same LR-per-image), see resolve_schedule
    scale_schedule: bool = False
    #: let cuDNN pick the fastest convolution algorithms per input shape (CUDA)
    cudnn_benchmark: bool = False
    #: DDP static_graph=True: valid (every parameter gets a gradient in every step: the step has
    #: fixed shapes), but off in the presets: with it torch's reducer reads one host scalar per
    #: parameter per step (84 on R50-FPN, counted by syncs.py on CPU); whether those wait for the
    #: GPU needs a GPU run of benchmarks/bench_maskrcnn_gpu.py --set solver.ddp_static_graph=true
    ddp_static_graph: bool = False
    #: on a GPU with channels-last: before DDP builds its buckets, lay each parameter out as its
    #: gradient comes back (two small forward/backward passes at start; dist.match_grad_strides), so
    #: no gradient is copied into its bucket view each step (issue #36)
    ddp_match_grad_strides: bool = True
    #: capture the model's forward and backward in CUDA graphs (torch.compile mode="reduce-overhead",
    #: fullgraph: the tests trace it with 0 graph breaks); needs a step without host syncs (checked
    #: at start).  Unverified until a GPU run: one graph per canvas and boxes-per-image shape
    cuda_graphs: bool = False


@dataclass(frozen=True)
class TestConfig:
    ims_per_gpu: int = 2
    eval_period: int = 0  # 0 = only at the end


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    input: InputConfig = field(default_factory=InputConfig)
    data: DataConfig = field(default_factory=DataConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    test: TestConfig = field(default_factory=TestConfig)
    seed: int = 1
    log_period: int = 20
    #: "auto" = cuda when available, else cpu
    device: str = "auto"
    #: "auto" = nccl on cuda, gloo on cpu; "horovod" when installed
    backend: str = "auto"
    #: intra-op CPU threads per rank (0 = follow the host: its CPUs / the ranks on it on the CPU, where
    #: the step runs on them; ``CUDA_RANK_THREADS`` on a GPU, where the step only launches kernels
    #: and the rest of the rank's share goes to the loader's workers)
    threads_per_rank: int = 0
    #: CPU: treat denormal floats as zero (torch.set_flush_denormal, in every rank before its first
    #: parallel op, so every intra-op thread inherits it).  From random weights the gradients of a
    #: CPU step drift into the denormal range within a few steps, and x86 handles each denormal
    #: operand in microcode: issue #32 measured convolution_backward 7.9 s -> 106.8 s and the 1-thread
    #: step 5-15x slower without it.  Values below 1.2e-38 (float32) become 0, far below anything a
    #: loss or an update can resolve.  false keeps them (torch's default, bit-exact IEEE arithmetic)
    flush_denormal: bool = True


#: Presets are data: dotted key -> value, applied over ``Config()``; the user's --set wins.
PRESETS: dict[str, dict[str, Any]] = {
    # The standard recipe is the dataclass defaults.
    # GPU defaults (issue #11): bf16 autocast (fp16 + grad scaler: --set solver.amp=fp16), NHWC,
    # 4 images per GPU, cuDNN autotuning, and the 1x schedule scaled to the real global batch
    # (DDP: no buffer broadcast, gradients as bucket views, always; static_graph: see its key).
    "r50_fpn_1x": {
        "model.backbone.weights": "pretrained/R-50.pth",
        "solver.ims_per_gpu": 4,
        "solver.amp": "bf16",
        "solver.channels_last": True,
        "solver.cudnn_benchmark": True,
        "solver.scale_schedule": True,
        # the mask head on 128 of the batch's foreground RoIs (4 images), not on 4 x 128 fixed
        # slots: COCO train2017 has 7.3 objects per image (860,001 / 118,287), each a foreground
        # RoI itself (GT boxes join the proposals) plus the proposals that overlap it, so 32 per
        # image holds every GT and ~3 proposals per GT on average; crowded images take the slots
        # the sparse ones leave.  An estimate from annotation counts: check it against the
        # foreground counts of a GPU run (README, Mask R-CNN)
        "model.roi_heads.mask_rois_per_image": 32,
        # canvases in steps of 128 px (short side 640..896, long side up to 1408): a few dozen shapes
        # for cudnn.benchmark to tune once each, for ~10 % more padding than steps of 32
        "input.canvas_multiple": 128,
        "test.ims_per_gpu": 4,
    },
    # CPU demo: a narrow, shallow ResNet trained from scratch (GroupNorm: nothing to freeze)
    # on the synthetic shapes set at ~160 px, 3 classes.  Chosen so that 2 CPU ranks reach
    # bbox mAP >= 0.5 / segm mAP >= 0.45 in minutes (benchmarks/bench_maskrcnn_cpu.py).
    "demo": {
        "model.num_classes": 3,
        "model.fpn_channels": 64,
        "model.backbone.depth": (1, 1, 1, 1),
        "model.backbone.stem_width": 16,
        "model.backbone.base_width": 16,
        "model.backbone.norm": "gn",
        "model.backbone.gn_groups": 8,
        "model.backbone.freeze_at": 0,
        "model.rpn.anchor_sizes": (16, 32, 64, 128, 256),
        "model.rpn.pre_nms_topk_train": 200,
        "model.rpn.pre_nms_topk_test": 200,
        "model.rpn.post_nms_topk_train": 100,
        "model.rpn.post_nms_topk_test": 100,
        "model.rpn.batch_size_per_image": 128,
        "model.roi_heads.batch_size_per_image": 64,
        "model.roi_heads.fc_dim": 256,
        "model.roi_heads.mask_conv_dim": 64,
        "model.roi_heads.mask_num_convs": 2,
        # 16 mask slots per batch of 4 images: a synthetic image has 1-4 objects, so an untrained
        # model (whose foreground is its GT boxes, ~10 per batch) fills most of them and a trained
        # one (about 13 foreground RoIs per image) trains a random 16 of its ~50.  The mask head
        # runs on every slot, valid or not (fixed shapes, no host sync): 12 per image made the
        # first steps ~28 % slower than the old variable-size head (README, Benchmarks)
        "model.roi_heads.mask_rois_per_image": 4,
        "model.roi_heads.detections_per_img": 20,
        "input.min_size_train": (128, 144, 160),
        "input.max_size_train": 224,
        "input.min_size_test": 160,
        "input.max_size_test": 224,
        "data.train_ann": "annotations/instances_train.json",
        "data.train_images": "train",
        "data.val_ann": "annotations/instances_val.json",
        "data.val_images": "val",
        "data.num_workers": 0,
        "solver.base_lr": 0.02,
        "solver.reference_batch": 8,
        "solver.ims_per_gpu": 4,
        "solver.max_iter": 450,
        "solver.warmup_iters": 50,
        "solver.checkpoint_period": 150,
        "solver.clip_grad_norm": 10.0,
        "test.ims_per_gpu": 4,
        "log_period": 20,
        "threads_per_rank": 1,
    },
}


def _fields(obj: Any) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(obj)}


def _coerce(key: str, current: Any, value: Any) -> Any:
    """Convert ``value`` (yaml-parsed or str) to the type of the current value at ``key``."""
    expected = type(current).__name__
    try:
        if isinstance(current, bool):
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            raise ValueError
        if isinstance(current, int):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if isinstance(current, float):
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if isinstance(current, str):
            return str(value)
        if isinstance(current, tuple):
            if isinstance(value, str):
                value = [v for v in value.strip("()[] ").split(",") if v.strip()]
                value = [yaml.safe_load(v) for v in value]
            items = value if isinstance(value, (list, tuple)) else [value]
            kind = type(current[0]) if current else float
            return tuple(_coerce(key, kind(0), v) for v in items)
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"config key {key!r}: expected {expected} (like {current!r}), got {value!r}; "
                      f"fix the value in --set {key}=...")


def set_key(cfg: Config, key: str, value: Any) -> Config:
    """Return ``cfg`` with the dotted ``key`` replaced by ``value`` (coerced to the field's type)."""
    parts = key.split(".")
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            pass  # keep the raw string; _coerce reports it if the field wants something else

    def rec(node: Any, i: int) -> Any:
        fields = _fields(node)
        name = parts[i]
        if name not in fields:
            where = ".".join(parts[:i]) or "top level"
            raise ConfigError(f"unknown config key {key!r}: no {name!r} in {where}; "
                              f"valid keys there: {', '.join(sorted(fields))}")
        current = getattr(node, name)
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(current):
                raise ConfigError(f"config key {key!r} is a section; set one of its keys, "
                                  f"e.g. {key}.{next(iter(_fields(current)))}=...")
            return dataclasses.replace(node, **{name: _coerce(key, current, value)})
        if not dataclasses.is_dataclass(current):
            raise ConfigError(f"unknown config key {key!r}: {'.'.join(parts[:i + 1])} is a value, not a section")
        return dataclasses.replace(node, **{name: rec(current, i + 1)})

    return rec(cfg, 0)


def get_key(cfg: Config, key: str) -> Any:
    node: Any = cfg
    for p in key.split("."):
        node = getattr(node, p)
    return node


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``["solver.base_lr=0.01", ...]`` -> ``{"solver.base_lr": "0.01"}``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set solver.base_lr=0.01")
        out[key.strip()] = value
    return out


def resolve_config(preset: str, overrides: Mapping[str, Any] | None = None) -> tuple[Config, list[str]]:
    """Defaults <- preset <- user overrides.

    Returns:
        The resolved config and a list of notes, one per preset value a user override replaced
        (the caller logs them: presets yield to the user, and say so).
    Raises:
        ConfigError: unknown preset, unknown key or a value of the wrong type.
    """
    if preset not in PRESETS:
        raise ConfigError(f"unknown config preset {preset!r}; expected one of: {', '.join(sorted(PRESETS))}")
    cfg = Config()
    for key, value in PRESETS[preset].items():
        cfg = set_key(cfg, key, value)
    notes = []
    for key, value in (overrides or {}).items():
        before = get_key(cfg, key) if key in PRESETS[preset] else None
        cfg = set_key(cfg, key, value)
        if key in PRESETS[preset] and get_key(cfg, key) != before:
            notes.append(f"{key}: preset {preset!r} says {before!r}, user value {get_key(cfg, key)!r} wins")
    validate(cfg)
    return cfg, notes


def validate(cfg: Config) -> None:
    """Cross-field checks that single-field coercion cannot do."""
    m = cfg.model
    if m.num_classes < 1:
        raise ConfigError(f"model.num_classes={m.num_classes}: expected >= 1 foreground class")
    if len(m.backbone.depth) != 4 or min(m.backbone.depth) < 1:
        raise ConfigError(f"model.backbone.depth={m.backbone.depth}: expected 4 stages of >= 1 block, e.g. (3,4,6,3)")
    if m.backbone.norm not in ("frozen_bn", "gn"):
        raise ConfigError(f"model.backbone.norm={m.backbone.norm!r}: expected 'frozen_bn' or 'gn'")
    if len(m.rpn.anchor_sizes) != 5:
        raise ConfigError(f"model.rpn.anchor_sizes={m.rpn.anchor_sizes}: expected 5 sizes, one per level P2..P6")
    if m.roi_heads.mask_rois_per_image < 0:
        raise ConfigError(f"model.roi_heads.mask_rois_per_image={m.roi_heads.mask_rois_per_image}: expected >= 0 "
                          "(0 = every foreground slot)")
    d, cm = cfg.input.size_divisibility, cfg.input.canvas_multiple
    if d < 1 or cm < 0 or (cm and cm % d):
        raise ConfigError(f"input.canvas_multiple={cm}, input.size_divisibility={d}: expected size_divisibility >= 1 "
                          f"and canvas_multiple 0 (= size_divisibility) or a multiple of it, e.g. {4 * max(d, 1)}")
    if cfg.data.num_workers < -1:
        raise ConfigError(f"data.num_workers={cfg.data.num_workers}: expected -1 (follow the host) or >= 0 worker processes")
    if cfg.threads_per_rank < 0:
        raise ConfigError(f"threads_per_rank={cfg.threads_per_rank}: expected 0 (follow the host) or >= 1 threads")
    if cfg.solver.amp not in ("none", "bf16", "fp16"):
        raise ConfigError(f"solver.amp={cfg.solver.amp!r}: expected 'none', 'bf16' or 'fp16'")
    if cfg.backend not in ("auto", "gloo", "nccl", "horovod"):
        raise ConfigError(f"backend={cfg.backend!r}: expected 'auto', 'gloo', 'nccl' or 'horovod'")
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device={cfg.device!r}: expected 'auto', 'cpu' or 'cuda'")
    if cfg.solver.ims_per_gpu < 1 or cfg.solver.max_iter < 1:
        raise ConfigError(f"solver.ims_per_gpu={cfg.solver.ims_per_gpu}, solver.max_iter={cfg.solver.max_iter}: "
                          "expected both >= 1")
    if any(not 0 < s < 1 for s in cfg.solver.steps):
        raise ConfigError(f"solver.steps={cfg.solver.steps}: expected fractions of max_iter in (0, 1)")


def config_to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def config_from_dict(d: Mapping[str, Any]) -> Config:
    """Inverse of ``config_to_dict`` (used on resume); unknown keys are errors."""
    cfg = Config()

    def walk(prefix: str, sub: Mapping[str, Any]) -> None:
        nonlocal cfg
        for k, v in sub.items():
            key = f"{prefix}{k}"
            if isinstance(v, Mapping):
                walk(key + ".", v)
            else:
                cfg = set_key(cfg, key, v)

    walk("", d)
    validate(cfg)
    return cfg


def lr_at(solver: SolverConfig, step: int, global_batch: int) -> float:
    """The LR for ``step`` (0-based): linear scaling, linear warmup, step decay."""
    lr = solver.base_lr * global_batch / solver.reference_batch
    for frac in solver.steps:
        if step >= int(frac * solver.max_iter):
            lr *= solver.gamma
    if step < solver.warmup_iters:
        alpha = step / solver.warmup_iters
        lr *= solver.warmup_factor * (1 - alpha) + alpha
    return lr


@dataclass(frozen=True)
class Schedule:
    """The solver schedule resolved for a global batch (what the trainer runs and prints)."""

    global_batch: int
    reference_batch: int
    scale: float  # reference_batch / global_batch, 1.0 when solver.scale_schedule is off
    max_iter: int
    steps: tuple[int, ...]  # iterations where the LR drops
    warmup_iters: int
    checkpoint_period: int
    eval_period: int
    base_lr: float  # the LR after warmup (linear scaling of solver.base_lr)

    def format(self) -> str:
        how = (f"x{self.scale:g} (reference batch {self.reference_batch} / global batch {self.global_batch})"
               if self.scale != 1.0 else f"unscaled (global batch {self.global_batch})")
        return (f"schedule {how}: max_iter={self.max_iter} lr_steps={list(self.steps)} warmup_iters={self.warmup_iters} "
                f"checkpoint_period={self.checkpoint_period} eval_period={self.eval_period or 'end'} "
                f"lr={self.base_lr:g}")


#: a GPU rank's own intra-op threads when ``threads_per_rank`` is 0: its step launches kernels, and
#: its CPU work (the optimizer's bookkeeping, the loader's pin thread) needs no more
CUDA_RANK_THREADS = 2


def loader_share(cpus: int, local_ranks: int, device_type: str, num_workers: int = -1,
                 threads_per_rank: int = 0) -> tuple[int, int]:
    """(intra-op threads, loader workers) for one rank of ``local_ranks`` on a host of ``cpus``.

    Each rank gets an equal share of the host's CPUs (at least 1).  Its own threads: the
    ``threads_per_rank`` set, else the whole share on the CPU (the step computes there) and
    ``CUDA_RANK_THREADS`` on a GPU.  Its loader workers: the ``num_workers`` set (>= 0), else the
    rest of the share (0 on the CPU, where the workers would take cores from the step).  On a p5
    (192 vCPUs, 8 ranks): 2 threads and 22 workers per rank.  Pure: the trainer passes the CPUs it
    may run on.
    """
    share = max(1, cpus // max(local_ranks, 1))
    threads = threads_per_rank or (min(share, CUDA_RANK_THREADS) if device_type == "cuda" else share)
    workers = num_workers if num_workers >= 0 else max(0, share - threads)
    return threads, workers


def loader_note(cfg: Config) -> str:
    """The plan's words for the loader workers a rank of ``cfg`` will start (the host decides 'auto')."""
    if cfg.data.num_workers >= 0:
        return f"loader workers per rank: {cfg.data.num_workers} (data.num_workers)"
    threads = cfg.threads_per_rank or f"{CUDA_RANK_THREADS} on GPU, all on CPU"
    return (f"loader workers per rank: auto (data.num_workers=-1: the host's CPUs / its ranks, less the rank's "
            f"threads ({threads}); the trainer logs the number)")


def resolve_schedule(cfg: Config, global_batch: int) -> Schedule:
    """The linear scaling rule applied to ``cfg`` for ``global_batch`` images per step.

    With ``solver.scale_schedule`` every iteration count (max_iter, warmup, checkpoint and eval
    periods) is multiplied by reference_batch / global_batch, so the run sees as many images as
    the recipe; the LR steps stay at their fractions of max_iter; the LR itself scales up by
    global_batch / reference_batch (always, as lr_at does).  Example: the 1x recipe (90k
    iterations at 16 images) on 32 GPUs x 4 images = 128 -> 11250 iterations.
    """
    if global_batch < 1:
        raise ConfigError(f"global batch {global_batch}: expected >= 1 image per step")
    s, t = cfg.solver, cfg.test
    scale = s.reference_batch / global_batch if s.scale_schedule else 1.0
    n = lambda v: max(1, int(round(v * scale))) if v else 0  # noqa: E731
    max_iter = n(s.max_iter)
    return Schedule(global_batch=global_batch, reference_batch=s.reference_batch, scale=scale, max_iter=max_iter,
                    steps=tuple(int(f * max_iter) for f in s.steps), warmup_iters=n(s.warmup_iters),
                    checkpoint_period=n(s.checkpoint_period), eval_period=n(t.eval_period),
                    base_lr=s.base_lr * global_batch / s.reference_batch)


def scheduled_solver(cfg: Config, schedule: Schedule) -> SolverConfig:
    """``cfg.solver`` with the resolved iteration counts (what lr_at and the step loop read)."""
    return dataclasses.replace(cfg.solver, max_iter=schedule.max_iter, warmup_iters=schedule.warmup_iters,
                               checkpoint_period=schedule.checkpoint_period)


def check_device_support(cfg: Config, device_type: str, bf16_supported: bool = False,
                         capability: tuple[int, int] = (0, 0), step_syncs: Sequence[str] = ()) -> None:
    """Refuse, at start, settings the chosen device cannot honour (a pure function: the trainer passes
    the facts, tests pass made-up ones).

    Raises:
        ConfigError naming the key, what the device lacks and the --set that fixes it.
    """
    s = cfg.solver
    if device_type != "cuda":
        for key, bad in (("solver.amp", s.amp != "none"), ("solver.channels_last", s.channels_last),
                         ("solver.cuda_graphs", s.cuda_graphs)):
            if bad:
                raise ConfigError(f"{key}={get_key(cfg, key)!r} needs a CUDA device, but this run is on {device_type}; "
                                  f"use --set {key}={'none' if key == 'solver.amp' else 'false'} (or run on a GPU)")
        return
    if s.amp == "bf16" and not bf16_supported:
        raise ConfigError(f"solver.amp='bf16' but this GPU (sm{capability[0]}{capability[1]}) has no bfloat16 support; "
                          "use --set solver.amp=fp16 (with a grad scaler) or none")
    if s.channels_last and capability < (7, 0):
        raise ConfigError(f"solver.channels_last=true needs tensor cores (sm70 or newer), this GPU is "
                          f"sm{capability[0]}{capability[1]}; use --set solver.channels_last=false")
    if s.cuda_graphs and step_syncs:
        raise ConfigError("solver.cuda_graphs=true needs a training step without host syncs, but this step "
                          f"still waits for the GPU in: {', '.join(step_syncs)}; use --set solver.cuda_graphs=false")


def step_host_syncs(cfg: Config) -> list[str]:
    """What, by configuration, still makes a CUDA training step wait for the host (empty: nothing)."""
    out = []
    if cfg.solver.amp == "fp16":
        out.append("GradScaler.step (solver.amp=fp16 reads the found-inf flag on the host)")
    return out


def add_config_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The trainer's config flags, ``--config`` and ``--set``: their one definition, shared by the
    training entry's parser (train.py ``build_parser``) and ``schedule_for_program``."""
    parser.add_argument("--config", required=True, choices=sorted(PRESETS),
                        help="preset: r50_fpn_1x (COCO) or demo (CPU)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set solver.base_lr=0.01 (repeatable; wins over the preset)")
    return parser


class _RaisingParser(argparse.ArgumentParser):
    """A parser whose errors are ConfigError (argparse would print and exit the planning process)."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message)


def schedule_for_program(program: Sequence[str], world_size: int) -> str | None:
    """The resolved schedule line for a planned rank argv, or None when it is not this trainer.

    ``mpirun_kit plan`` calls this with the program every rank runs (``... -m
    mpirun_kit.maskrcnn.train --config P --set k=v ...``) and the number of ranks, so the plan
    shows the iterations and LR the job will really use.  Pure: parses the argv with the trainer's
    own flag definitions (``add_config_flags``), reads nothing.
    """
    argv = list(program)
    try:
        i = argv.index("mpirun_kit.maskrcnn.train")
    except ValueError:
        return None
    parser = add_config_flags(_RaisingParser(add_help=False, allow_abbrev=False))
    try:
        args, _ = parser.parse_known_args(argv[i + 1:])
    except ConfigError as exc:
        # no --config at all: not a run this can resolve; anything else is the job's mistake
        return None if "required" in str(exc) else f"maskrcnn config: error: {exc}"
    try:
        cfg, _ = resolve_config(args.config, parse_overrides(args.overrides))
    except ConfigError as exc:
        return f"maskrcnn config: error: {exc}"
    return (f"maskrcnn {resolve_schedule(cfg, cfg.solver.ims_per_gpu * max(world_size, 1)).format()}; "
            f"{loader_note(cfg)}")

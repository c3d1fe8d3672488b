"""Mask R-CNN model parts: backbone.py (ResNet, FrozenBatchNorm) -> fpn.py (P2-P6) -> rpn.py
(proposals) -> roi_heads.py (box + mask heads) -> postprocess.py; meta_arch.py wires them and
``build_model(cfg.model)`` is the one constructor the trainer calls."""

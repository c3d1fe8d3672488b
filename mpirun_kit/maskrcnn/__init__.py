"""Mask R-CNN training module: model (modeling/), COCO data (data/), detection ops (ops/, csrc/),
distributed set-up (dist.py), checkpoints, COCO evaluation and the training entry (train.py).

Data flow: config.py (typed, presets + --set overrides) -> data/ (COCO json -> padded batches)
-> modeling/ (R50-FPN Mask R-CNN, ops from ops/) -> train.py (DDP loop, checkpoint.py, evaluate.py).
Importing this package has no side effects.
"""

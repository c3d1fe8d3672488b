"""COCO-format data: synthetic.py writes a shapes dataset, coco.py reads any COCO json with
pycocotools into per-image targets, transforms.py resizes/flips, sampler.py yields checkpointable,
aspect-ratio-grouped, rank-sharded batches."""

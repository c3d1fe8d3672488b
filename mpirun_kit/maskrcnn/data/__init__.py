"""COCO-format data: synthetic.py writes a shapes dataset; coco.py reads any COCO json with
pycocotools into per-image samples (resize to min/max side, horizontal flip); sampler.py yields
checkpointable, aspect-ratio-grouped, rank-sharded batches (and the eval shards)."""

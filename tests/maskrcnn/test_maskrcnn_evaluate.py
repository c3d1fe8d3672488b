"""evaluate.py: COCO scoring is wired right (GT fed back scores AP 1.0) and degrades sanely."""
from __future__ import annotations

import numpy as np
import torch

from mpirun_kit.maskrcnn.data.coco import CocoDataset
from mpirun_kit.maskrcnn.evaluate import coco_metrics, to_coco_results


def _gt_as_detections(ds):
    """Each GT instance as a detection through the same conversion the model's output takes."""
    results = []
    for img_id in ds.ids:
        anns = [a for a in ds.coco.imgToAnns[img_id] if not a["iscrowd"]]
        boxes = torch.tensor([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
                              for a in anns])
        masks = torch.from_numpy(np.stack([ds.coco.annToMask(a) for a in anns])).bool()
        det = {"image_id": img_id, "boxes": boxes, "scores": torch.ones(len(anns)), "masks": masks,
               "labels": torch.tensor([ds.cat_to_label[a["category_id"]] for a in anns])}
        results += to_coco_results(det, ds.label_to_cat)
    return results


def test_ground_truth_fed_back_scores_ap_1(shapes):
    ds = CocoDataset(shapes / "annotations/instances_val.json", shapes / "val", train=False, min_sizes=(96,),
                     max_size=160)
    m = coco_metrics(ds.coco, _gt_as_detections(ds), image_ids=list(ds.ids))
    assert m["bbox_mAP"] == 1.0 and m["segm_mAP"] == 1.0 and m["bbox_AP50"] == 1.0


def test_wrong_labels_and_no_detections_score_low(shapes):
    ds = CocoDataset(shapes / "annotations/instances_val.json", shapes / "val", train=False, min_sizes=(96,),
                     max_size=160)
    wrong = [dict(r, category_id=r["category_id"] % 3 + 1) for r in _gt_as_detections(ds)]
    assert coco_metrics(ds.coco, wrong)["bbox_mAP"] == 0.0
    assert coco_metrics(ds.coco, [])["segm_mAP"] == 0.0

"""COCO evaluation of the FP32 PyTorch shapes detector on data/val.

    python evaluate_fp32.py [--weights weights/shapes_detector.pt]

Reads each PNG with PIL, preprocesses it with edgebuild.runtime.base.vision.preprocess (the same
function training and the device use), runs the model in batches, decodes with
decode_detections, maps boxes back to the original image and scores with pycocotools.
"""

import argparse
import contextlib
import io
import json
import os
import sys

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import edgebuild  # noqa: F401
except ImportError:  # running from a source checkout without edgebuild installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from shapes_detector import INPUT_SIZE, MEAN, RESIZE, STD, build_model, prepare  # noqa: E402

from edgebuild.runtime.base.vision import (  # noqa: E402
    DetectionParams,
    PreprocessSpec,
    decode_detections,
    preprocess,
    stack_batch,
)

SPEC = PreprocessSpec(input_size=INPUT_SIZE, resize=RESIZE, mean=MEAN, std=STD)
PARAMS = DetectionParams(score_threshold=0.001, nms_iou=0.6, max_detections=100)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, project_dir: str = HERE, batch_size: int = 32, verbose: bool = True
) -> dict[str, float]:
    """mAP50-95 / mAP50 of ``model`` on <project_dir>/data/val (written first if missing)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    prepare(project_dir)
    val_dir = os.path.join(project_dir, "data", "val")
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(os.path.join(val_dir, "annotations.json"))
    image_ids = sorted(coco.getImgIds())
    was_training = model.training
    model.eval()
    results = []
    for start in range(0, len(image_ids), batch_size):
        ids = image_ids[start : start + batch_size]
        tensors, transforms = [], []
        for image_id in ids:
            info = coco.loadImgs(image_id)[0]
            with Image.open(os.path.join(val_dir, "images", info["file_name"])) as im:
                pixels = np.asarray(im.convert("RGB"))
            tensor, transform = preprocess(pixels, SPEC)
            tensors.append(tensor)
            transforms.append(transform)
        out = model(torch.from_numpy(stack_batch(tensors)))
        boxes, scores = out["boxes"].numpy(), out["scores"].numpy()
        for i, image_id in enumerate(ids):
            det = decode_detections(boxes[i], scores[i], PARAMS)
            xyxy = transforms[i].boxes_to_original(det["boxes"])
            for box, score, label in zip(xyxy, det["scores"], det["labels"]):
                x0, y0, x1, y1 = (float(v) for v in box)
                results.append(
                    {
                        "image_id": int(image_id),
                        "category_id": int(label) + 1,
                        "bbox": [x0, y0, x1 - x0, y1 - y0],
                        "score": float(score),
                    }
                )
    model.train(was_training)
    if not results:
        return {"mAP50-95": 0.0, "mAP50": 0.0, "detections": 0}
    with contextlib.redirect_stdout(io.StringIO()):
        dets = coco.loadRes(results)
    with contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO()):
        evaluator = COCOeval(coco, dets, "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return {"mAP50-95": float(evaluator.stats[0]), "mAP50": float(evaluator.stats[1]), "detections": len(results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default=os.path.join(HERE, "weights", "shapes_detector.pt"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = build_model()
    model.load_state_dict(torch.load(args.weights, map_location="cpu", weights_only=True), strict=True)
    metrics = evaluate(model, HERE, args.batch_size, verbose=not args.json)
    if args.json:
        print(json.dumps(metrics))
    else:
        print("FP32 mAP50-95 {:.4f}  mAP50 {:.4f}".format(metrics["mAP50-95"], metrics["mAP50"]))


if __name__ == "__main__":
    main()

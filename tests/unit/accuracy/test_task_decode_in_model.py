"""Pose and segmentation with NMS inside the model, scored on the host: the in-model outputs read into the host
decode's results, and the gate's parity check (``evaluate.nms_parity``) finding the same metric and detections."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

from edgebuild.accuracy.evaluate import nms_parity
from edgebuild.accuracy.task_decode import InstanceCollector
from edgebuild.datasets.project_data import Sample
from edgebuild.errors import ModelError
from edgebuild.project.schema import PosePostprocess, SegmentationPostprocess
from edgebuild.runtime.base.vision import ImageTransform
from edgebuild.sources.export.nms_graph import append_nms, check_nms_settings
from tests.unit.sources.export.test_nms_graph_instances import _feeds, _head

TRANSFORM = ImageTransform(scale_x=1.0, scale_y=1.0, pad_x=0.0, pad_y=16.0, original_width=320, original_height=288)
METRIC = {"pose": "pose mAP50-95", "segmentation": "mask mAP50-95"}


def _project(kind: str, in_model: bool = True) -> SimpleNamespace:
    post = (PosePostprocess if kind == "pose" else SegmentationPostprocess)(in_model=in_model, score_threshold=0.2)
    return SimpleNamespace(task=SimpleNamespace(kind=kind, postprocess=post, classes=["a", "b"],
                                                preprocess=SimpleNamespace(input_size=[320, 320])),
                           model=SimpleNamespace(source=None, inputs=[SimpleNamespace(name="images")]),
                           metric=METRIC[kind])


class _Data:
    """Two images, each with two objects: enough for the metrics to be more than 0 or 1."""

    def __init__(self, kind: str) -> None:
        annotations = []
        for image in (1, 2):
            for n, (x, y) in enumerate([(30, 40), (150, 100)]):
                box = [x, y, 60, 50]
                more = ({"num_keypoints": 5, "keypoints": [v for i in range(5) for v in (x + 10 * i, y + 5 * i, 2)]}
                        if kind == "pose" else {"segmentation": [[x, y, x + 60, y, x + 60, y + 50, x, y + 50]]})
                annotations.append({"id": len(annotations) + 1, "image_id": image, "category_id": 1 + n,
                                    "iscrowd": 0, "bbox": box, "area": 3000, **more})
        truth = {"images": [{"id": i, "width": 320, "height": 288, "file_name": f"{i}.png"} for i in (1, 2)],
                 "annotations": annotations, "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
        if kind == "pose":
            truth["kpt_shape"] = [5, 3]
        self.coco = SimpleNamespace(ground_truth=truth, category_ids=[1, 2])
        self.samples = [Sample(path=None, image_id=i) for i in (1, 2)]  # type: ignore[arg-type]
        self.truth_masks: dict = {}  # as ValidationSet: the ground-truth masks drawn once per set

    def __len__(self) -> int:
        return 2

    def batches(self):
        yield self.samples, np.zeros((2, 3, 320, 320), np.float32), [TRANSFORM, TRANSFORM]


class _Head:
    """The raw head's outputs (the input batch is not read), and the same head with NMS appended."""

    backend = "fake"

    def __init__(self, kind: str, inside: bool) -> None:
        self.feeds = _feeds(kind, 2, 400, 2, seed=11)
        # the two ground-truth objects, as good anchors among the random ones
        for n, (x, y) in enumerate([(30, 56), (150, 116)]):
            self.feeds["boxes_in"][:, n] = [x, y, x + 60, y + 50]
            self.feeds["scores_in"][:, n] = [0.99, 0.0] if n == 0 else [0.0, 0.99]
            if kind == "pose":
                self.feeds["keypoints_in"][:, n] = [[x + 10 * i, y + 5 * i, 1.0] for i in range(5)]
            else:  # the mask: all of the box (prototype 0 is positive everywhere)
                self.feeds["mask_coefficients_in"][:, n] = np.eye(8)[0]
        if kind == "segmentation":
            self.feeds["prototypes_in"][:, 0] = 1.0
        model = append_nms(_head(kind, 400, 2), check_nms_settings(kind, _project(kind).task.postprocess.model_dump()))
        self.session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]) \
            if inside else None

    def run(self, inputs: dict) -> dict[str, np.ndarray]:
        if self.session is None:
            return {name[:-3]: value for name, value in self.feeds.items()}
        return dict(zip([o.name for o in self.session.get_outputs()], self.session.run(None, self.feeds)))


@pytest.mark.parametrize("kind", ["pose", "segmentation"])
def test_the_in_model_outputs_score_what_the_host_decode_of_the_head_scores(kind: str) -> None:
    data, project = _Data(kind), _project(kind)
    host, graph = InstanceCollector(project, data, raw_head=True), InstanceCollector(project, data)
    assert host.pre_nms_top_k == graph.pre_nms_top_k == 1000  # the graph's top-k, not Ultralytics' 30000
    for collect, runner in ((host, _Head(kind, False)), (graph, _Head(kind, True))):
        for chunk, batch, transforms in data.batches():
            collect.add(chunk, transforms, runner.run({"images": batch}))
    assert len(graph.results) == len(host.results) > 20
    for want, got in zip(host.results, graph.results):
        assert want["category_id"] == got["category_id"] and want["score"] == pytest.approx(got["score"], abs=1e-6)
        np.testing.assert_allclose(got["bbox"], want["bbox"], atol=1e-4)
        if kind == "pose":
            np.testing.assert_allclose(got["keypoints"], want["keypoints"], atol=1e-4)
        else:
            np.testing.assert_array_equal(got["mask"], want["mask"])
    metrics = graph.metrics()
    assert metrics == host.metrics() and 0.0 < metrics[METRIC[kind]]


@pytest.mark.parametrize("kind", ["pose", "segmentation"])
def test_the_gate_s_parity_check_runs_for_pose_and_segmentation(kind: str) -> None:
    parity = nms_parity(_project(kind), _Head(kind, False), _Head(kind, True), _Data(kind))  # type: ignore[arg-type]
    assert parity.metric == METRIC[kind] and parity.difference == 0.0 and not parity.nms_free
    assert parity.same_detections == parity.images == 2 and parity.largest_difference < 1e-4
    assert parity.in_model > 0


def test_a_raw_head_read_as_nms_inside_says_what_it_is() -> None:
    collect = InstanceCollector(_project("pose"), _Data("pose"))
    with pytest.raises(ModelError, match="num_detections.*not a model with NMS inside"):
        collect.add(*list(_Data("pose").batches())[0][::2], _Head("pose", False).run({}))

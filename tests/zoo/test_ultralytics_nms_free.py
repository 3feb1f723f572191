"""NMS-free heads ship as trained (issue 38 part 4): a YOLO26n and a YOLOv10n, built from their yaml files and
trained briefly on a generated YOLO dataset, go through ``edgebuild validate`` with their one-to-one head.

The exported graph has no NonMaxSuppression node and answers the four outputs NMS inside the model has;
the gate's FP32 mAP50-95 (ONNX Runtime on that graph) is within 0.01 of Ultralytics' own val of the same
checkpoint with its NMS-free head (``nms=False``: Ultralytics 8.4's val and export take the one-to-many
head and NMS unless told ``nms=False``) and ``rect=False``. An Ultralytics ONNX export of the NMS-free
head (``nms=False``: metadata end2end, output [N, 300, 6]) is read the same way. Both projects are the ones
``edgebuild init --model ... --data data.yaml`` writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.runtime.base.vision import NMS_OUTPUTS
from tests.support.zoo import train_briefly
from tests.zoo.test_ultralytics_source import _cocoeval, _shapes_dataset

pytestmark = pytest.mark.zoo

SIZE = 128


def _init(root: Path, model: Path, data: Path, trust: bool, int8: bool = False) -> None:
    """The project ``edgebuild init --model ... --data ...`` writes for ``model``, validated in FP32 only unless
    ``int8`` (the INT8 of these briefly trained one-to-one heads keeps less than a trained model's:
    docs/model-sources.md)."""
    root.mkdir()
    (root / model.name).write_bytes(model.read_bytes())
    args = ["init", str(root), "--model", str(root / model.name), "--data", str(data)]
    result = CliRunner().invoke(main, args + (["--trust-checkpoint"] if trust else []))
    assert result.exit_code == 0, result.output
    assert "NMS-free (one-to-one) head: no NMS added" in result.output, result.output
    text = (root / "edgebuild.toml").read_text()
    assert f"outputs = {json.dumps(list(NMS_OUTPUTS))}" in text and "in_model = true" in text, text
    assert ('head = "one-to-many"' in text) is trust, text  # a checkpoint's other head, offered in a comment
    if not int8:
        (root / "edgebuild.toml").write_text(text + '\n[quantize]\nprecisions = ["fp32"]\n')


def _train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yaml: str, epochs: int) -> tuple[Path, Path]:
    """(the checkpoint, data.yaml): ``yaml`` trained on 48 generated images, as the YOLOv8n parity test does."""
    data = _shapes_dataset(tmp_path / "shapes")
    return train_briefly(tmp_path, monkeypatch, yaml, data, epochs, SIZE), data


def _their_map(model: str, data: Path, tmp_path: Path) -> tuple[float, float]:
    """Ultralytics' val with its NMS-free head (``nms=False``: end2end, conf 0.001, max_det 300): its mAP50-95,
    and its own predictions (save_json) scored by the COCOeval edgebuild uses."""
    from ultralytics import YOLO

    theirs = YOLO(model, task="detect").val(data=str(data), imgsz=SIZE, batch=1, rect=False, device="cpu", nms=False,
                                            plots=False, workers=0, save_json=True, project=str(tmp_path / "val"),
                                            name="v", exist_ok=True).box.map
    return theirs, _cocoeval(data.parent / "val", tmp_path / "val" / "v" / "predictions.json")


def _validate(root: Path) -> tuple[float, str]:
    """``edgebuild validate``: the gate's FP32 mAP50-95 of the graph that ships, and the command's output."""
    import onnx

    result = CliRunner().invoke(main, ["validate", "-p", str(root), "--no-progress"])
    assert result.exit_code == 0, result.output
    gate = json.loads((root / "build" / ".records" / "gate.json").read_text())["body"]["result"]
    fp32 = next(c for c in gate["candidates"] if c["precision"] == "fp32")
    shipped = onnx.load(str(Path(gate["folder"]) / fp32["onnx"]), load_external_data=False)
    assert not any(n.op_type == "NonMaxSuppression" for n in shipped.graph.node)  # in_model appended nothing
    assert gate["nms_parity"]["nms_free"] is True
    return fp32["value"], result.output


def _exported(root: Path) -> object:
    import onnx

    record = json.loads(next((root / "build" / "export").rglob("export.json")).read_text())
    return onnx.load(record["onnx_path"], load_external_data=False)


def _assert_nms_free(root: Path, output: str) -> None:
    graph = _exported(root)
    ops = {n.op_type for n in graph.graph.node}
    assert "NonMaxSuppression" not in ops and "TopK" in ops, sorted(ops)
    assert [o.name for o in graph.graph.output] == list(NMS_OUTPUTS)
    assert "NMS-free (one-to-one) head: no NMS added" in output, output


@pytest.mark.slow
@pytest.mark.parametrize("yaml", ["yolo26n.yaml", "yolov10n.yaml"])
def test_an_nms_free_checkpoint_ships_its_top_k_and_matches_ultralytics_val(tmp_path: Path, monkeypatch,
                                                                             yaml: str) -> None:
    checkpoint, data = _train(tmp_path, monkeypatch, yaml, epochs=30)
    theirs, theirs_coco = _their_map(str(checkpoint), data, tmp_path)
    root = tmp_path / "project"
    _init(root, checkpoint, data, trust=True, int8=yaml == "yolo26n.yaml")
    ours, output = _validate(root)
    print(f"{yaml} mAP50-95: Ultralytics val (nms=False) {theirs:.4f} (its predictions by COCOeval "
          f"{theirs_coco:.4f}), edgebuild gate FP32 {ours:.4f}")
    _assert_nms_free(root, output)
    assert theirs > 0.15  # trained: a parity of near-zeros would say little
    assert abs(ours - theirs_coco) <= 0.002  # the same detections (cv2's uint8 resize: < 1/255 a pixel)
    assert abs(ours - theirs) <= 0.01
    if yaml != "yolo26n.yaml":
        return
    # INT8 of the one-to-one head runs to a decision (its fallback keeps layers in float where it must: a layer
    # kept in float once still read its neighbours' quantized input, and validate failed)
    gate = json.loads((root / "build" / ".records" / "gate.json").read_text())["body"]["result"]
    int8 = [c for c in gate["candidates"] if c["precision"].startswith("int8")]
    assert int8, gate["candidates"]
    best = max(int8, key=lambda c: c["retention"])
    print(f"{yaml} INT8: best {best['precision']} mAP50-95 {best['value']:.4f}, retention {best['retention']:.3f}")
    # the same checkpoint exported by Ultralytics with its NMS-free head: [N, 300, 6] read as detections
    from ultralytics import YOLO

    exported = Path(YOLO(str(checkpoint)).export(format="onnx", imgsz=SIZE, opset=17, simplify=False, nms=False))
    onnx_root = tmp_path / "onnx"
    _init(onnx_root, exported, data, trust=False)
    from_onnx, output = _validate(onnx_root)
    print(f"{yaml} ONNX export (nms=False): edgebuild gate FP32 {from_onnx:.4f}")
    _assert_nms_free(onnx_root, output)
    assert abs(from_onnx - theirs) <= 0.01

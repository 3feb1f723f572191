"""INT8 calibration: activation statistics collected once, every range method derived from them.

One pass of the FP32 model over the calibration images records, for every activation the INT8
graph quantizes, its absolute maximum and a histogram of ``|x|`` (``quantize.calibration_bins``
bins over ``[0, R)``; ``R`` doubles and neighbouring bins merge when a larger value arrives, so
no value is ever dropped and no second pass is needed), and for the inputs of weighted layers
the mean of each channel. From those statistics every method's clipping threshold is a
computation, not another calibration run:

- ``minmax``: the absolute maximum;
- ``percentile-P``: the smallest threshold below which P % of the values lie;
- ``entropy``: TensorRT's KL-divergence calibration (the threshold whose 128-level quantized
  distribution is closest to the clipped reference; the first bin, where a ReLU's exact zeros
  pile up, counted like the second, as TensorRT does), on up to 256 candidate thresholds;
- ``mse``: the threshold with the smallest expected squared error, rounding noise (step^2/12)
  inside the range plus clipping error outside it.

The thresholds are written as ONNX Runtime's own calibration cache (``save_tensors_data``),
which ``quantize_static`` reads instead of calibrating: ONNX Runtime still places and writes
the Q/DQ nodes. Its calibrators are not used for the ranges because each one is a separate pass
over the images and keeps only its own method's result (its entropy calibrator with the default
128 bins and 128 quantized bins has one candidate threshold, the maximum: the same ranges as
minmax).

Bias correction (the fast, per-channel variant NNCF applies by default): quantizing a layer's
weights and its input shifts the mean of each output channel; with the float input's channel
means ``mu`` and the mean error the input's quantization adds per channel ``delta`` (measured on
a few calibration images at the method's own scale), output channel ``o`` of a Conv or Gemm
moves by ``sum((W - Wq)[o] * mu) - sum(Wq[o] * delta)``, which is added to its (float) bias.
Layers see float inputs in this estimate, so corrections do not compound.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgebuild.jsontypes import JsonObject

__all__ = []

#: symmetric signed INT8 as TensorRT runs it: q in [-127, 127], scale = threshold / 127
LEVELS = 127
#: quantized bins of the entropy method (TensorRT's legacy entropy calibrator uses 128)
ENTROPY_LEVELS = 128
#: thresholds each search-based method (entropy, mse) evaluates per tensor
SEARCH_STEPS = 256

Advance = Callable[[int], None]  # images done so far (drives a progress bar)


def calibration_tensors(model: Any, node_names: Iterable[str], op_types: Iterable[str],
                        weighted_ops: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """(every float activation ONNX Runtime's quantizer looks up for these op types, the activation
    inputs of the named nodes: the tensors Q/DQ pairs read, the inputs of the weighted ones among
    those). Initializers and graph constants are not activations."""
    wanted, types, weighted = set(node_names), set(op_types), set(weighted_ops)
    constants = {i.name for i in model.graph.initializer}
    constants |= {out for node in model.graph.node if node.op_type == "Constant" for out in node.output}
    # integer tensors (shape and index arithmetic: a pose head's keypoint strides, an Add of int64 indices)
    # are no activations, where shape inference says their type
    constants |= {v.name for v in (*model.graph.value_info, *model.graph.input, *model.graph.output)
                  if v.type.tensor_type.elem_type not in (0, 1, 10, 11, 16)}  # unknown, float, float16, double, bf16
    tensors: dict[str, None] = {}
    quantized: dict[str, None] = {}
    inputs_of_weighted: dict[str, None] = {}
    for node in model.graph.node:
        if node.op_type not in types:
            continue
        for name in (*node.input, *node.output):
            if name and name not in constants:
                tensors[name] = None
        if node.name not in wanted:
            continue
        for name in node.input:
            if name and name not in constants:
                quantized[name] = None
        if node.op_type in weighted and node.input and node.input[0] not in constants:
            inputs_of_weighted[node.input[0]] = None
    return list(tensors), list(quantized), list(inputs_of_weighted)


@dataclass
class ActivationStatistics:
    """What one pass over the calibration images recorded, per activation tensor."""

    tensors: list[str]
    absmax: np.ndarray  # [T]
    histograms: np.ndarray  # [T, bins] counts of |x|
    upper: np.ndarray  # [T] the histograms' upper edge R (bins cover [0, R))
    channel_means: dict[str, np.ndarray]  # inputs of weighted layers: mean per channel
    images: int

    @property
    def bins(self) -> int:
        return int(self.histograms.shape[1])

    def save(self, path: Path) -> None:
        arrays = {"absmax": self.absmax, "histograms": self.histograms, "upper": self.upper,
                  **{f"mean:{k}": v for k, v in self.channel_means.items()}}
        meta = np.frombuffer(json.dumps({"tensors": self.tensors, "images": self.images}).encode(), dtype=np.uint8)
        staging = path.with_name(f".tmp-{path.name}")
        with staging.open("wb") as out:
            # numpy's stub matches **arrays against its allow_pickle: bool
            np.savez(out, **arrays, meta=meta)  # type: ignore[arg-type]
        staging.replace(path)

    @classmethod
    def load(cls, path: Path) -> ActivationStatistics:
        with np.load(path) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            means = {k[5:]: data[k] for k in data.files if k.startswith("mean:")}
            return cls(meta["tensors"], data["absmax"], data["histograms"], data["upper"], means, meta["images"])


def _channel_axes(ndim: int) -> tuple[int, ...]:
    """Axes a per-channel mean reduces over: all but NCHW's C, or the last (features) of 2-D/3-D."""
    channel = 1 if ndim == 4 else ndim - 1
    return tuple(i for i in range(ndim) if i != channel)


def _augmented_session(model_path: Path, tensors: list[str]) -> tuple[Any, list[str]]:
    """A session of the model that also returns ``tensors`` (those that are not graph inputs), and
    the names it fetches."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(model_path))
    graph_inputs = {i.name for i in model.graph.input}
    fetch = [t for t in tensors if t not in graph_inputs]
    present = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                              for t in fetch if t not in present)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]), fetch


def _run(session: Any, fetch: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fetched tensors and the fed ones, by name."""
    fed = {i.name for i in session.get_inputs()}
    values = dict(zip(fetch, session.run(fetch, {k: v for k, v in feed.items() if k in fed})))
    values.update(feed)
    return values


def collect_statistics(model_path: Path, tensors: list[str], weighted_inputs: list[str],
                       batches: Iterable[dict[str, np.ndarray]], *, bins: int, quantized: Iterable[str] | None = None,
                       progress: Advance = lambda _: None) -> ActivationStatistics:
    """One FP32 pass over ``batches``: the absolute maximum of every tensor, the ``|x|`` histogram
    of those in ``quantized`` (default: all; the rest are never quantized, their range is their
    maximum), channel means of ``weighted_inputs``."""
    binned = set(tensors if quantized is None else quantized)
    session, fetch = _augmented_session(model_path, tensors)
    count = len(tensors)
    absmax = np.zeros(count)
    histograms = np.zeros((count, bins), dtype=np.int64)
    upper = np.zeros(count)
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    images = 0
    for feed in batches:
        values = _run(session, fetch, feed)
        for t, name in enumerate(tensors):
            x = np.asarray(values[name], dtype=np.float32)
            if x.size == 0:
                continue
            magnitude = np.abs(x).ravel()
            top = float(magnitude.max())
            absmax[t] = max(absmax[t], top)
            if top > 0 and name in binned:
                upper[t], histograms[t] = _add_to_histogram(histograms[t], upper[t], magnitude, top)
            if name in weighted_inputs:
                axes = _channel_axes(x.ndim)
                sums[name] = sums.get(name, 0) + x.sum(axis=axes, dtype=np.float64)
                counts[name] = counts.get(name, 0) + int(x.size // x.shape[1 if x.ndim == 4 else -1])
        images += next(iter(feed.values())).shape[0]
        progress(images)
    means = {name: sums[name] / counts[name] for name in sums}
    return ActivationStatistics(list(tensors), absmax, histograms, upper, means, images)


def _add_to_histogram(hist: np.ndarray, upper: float, magnitude: np.ndarray, top: float) -> tuple[float, np.ndarray]:
    bins = hist.size
    if upper == 0:
        upper = top
    while top > upper:  # double the range: neighbouring bins merge, every count is kept
        merged = np.zeros_like(hist)
        merged[: bins // 2] = hist[: bins // 2 * 2].reshape(-1, 2).sum(axis=1)
        merged[bins // 2 - 1] += hist[bins // 2 * 2:].sum()  # an odd bin count's last bin
        hist, upper = merged, upper * 2
    index = np.minimum((magnitude * (bins / upper)).astype(np.int64), bins - 1)
    return upper, hist + np.bincount(index, minlength=bins)


def thresholds(stats: ActivationStatistics, method: str) -> np.ndarray:
    """Each tensor's clipping threshold (the symmetric range is [-T, T]) for one method."""
    found = np.zeros(len(stats.tensors))
    for t in range(len(stats.tensors)):
        hist, top, upper = stats.histograms[t], float(stats.absmax[t]), float(stats.upper[t])
        if top == 0 or hist.sum() == 0:  # never quantized (no histogram): its maximum
            found[t] = top
            continue
        width = upper / hist.size
        if method == "minmax":
            found[t] = top
        elif method.startswith("percentile-"):
            found[t] = _percentile(hist, width, top, float(method.split("-", 1)[1]))
        elif method == "entropy":
            found[t] = _entropy(hist, width, top)
        elif method == "mse":
            found[t] = _mse(hist, width, top)
        else:
            raise ValueError(f"unknown calibration method {method!r}")
    return found


def _percentile(hist: np.ndarray, width: float, top: float, level: float) -> float:
    cdf = np.cumsum(hist) / hist.sum()
    index = int(np.searchsorted(cdf, level / 100.0))
    return min((index + 1) * width, top)


def _candidates(last: int, first: int) -> np.ndarray:
    """Bin counts to try as thresholds: up to SEARCH_STEPS evenly spaced from ``first`` to ``last``."""
    first = min(first, last)
    return np.unique(np.linspace(first, last, num=min(SEARCH_STEPS, last - first + 1)).round().astype(int))


def _entropy(hist: np.ndarray, width: float, top: float) -> float:
    """TensorRT's KL calibration: the clipped reference P against its ENTROPY_LEVELS-level quantization Q."""
    last = int(np.nonzero(hist)[0][-1]) + 1
    if last <= ENTROPY_LEVELS:
        return min(last * width, top)
    counts = hist.astype(np.float64)
    counts[0] = counts[1]  # as TensorRT's calibrator: the spike of exact zeros (ReLU) would dominate the KL
    best, best_kl = last, np.inf
    for size in _candidates(last, ENTROPY_LEVELS):
        reference = counts[:size].copy()
        reference[-1] += counts[size:].sum()  # the clipped values land on the threshold
        sliced = counts[:size]
        edges = (np.arange(ENTROPY_LEVELS + 1) * size) // ENTROPY_LEVELS
        starts, lengths = edges[:-1], np.diff(edges)
        present = sliced > 0
        per_level = np.add.reduceat(sliced, starts) * (lengths > 0)
        occupied = np.add.reduceat(present.astype(np.float64), starts) * (lengths > 0)
        expanded = np.repeat(np.divide(per_level, occupied, out=np.zeros_like(per_level), where=occupied > 0),
                             lengths) * present
        p, q = reference / reference.sum(), expanded / max(expanded.sum(), 1e-300)
        live = p > 0
        kl = float(np.sum(p[live] * np.log(p[live] / np.maximum(q[live], 1e-12))))
        if kl < best_kl:
            best, best_kl = int(size), kl
    return min(best * width, top)


def _mse(hist: np.ndarray, width: float, top: float) -> float:
    """The threshold with the least expected squared error: rounding inside, clipping outside."""
    last = int(np.nonzero(hist)[0][-1]) + 1
    centres = (np.arange(last) + 0.5) * width
    counts = hist[:last].astype(np.float64)
    sizes = _candidates(last, max(1, last // 64))
    limits = np.minimum(sizes * width, top)[:, None]
    errors = np.where(centres[None, :] <= limits, (limits / LEVELS) ** 2 / 12.0,
                      (centres[None, :] - limits) ** 2) @ counts
    return float(limits[int(np.argmin(errors)), 0])


def write_ranges_cache(path: Path, stats: ActivationStatistics, found: np.ndarray) -> None:
    """The thresholds as ONNX Runtime's calibration cache (MinMax ranges ``[-T, T]``)."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData, save_tensors_data

    data = {name: TensorData(lowest=np.array(-t, dtype=np.float32), highest=np.array(t, dtype=np.float32))
            for name, t in zip(stats.tensors, found.tolist())}
    save_tensors_data(TensorsData(CalibrationMethod.MinMax, data), path)


def fake_quantize(x: np.ndarray, threshold: float) -> np.ndarray:
    """What a symmetric INT8 Q/DQ pair with this threshold gives back (ONNX Runtime: scale = T / 127)."""
    if threshold <= 0:
        return np.zeros_like(x)
    scale = np.float32(threshold / LEVELS)
    return np.clip(np.round(x / scale), -LEVELS, LEVELS) * scale


def activation_shifts(model_path: Path, stats: ActivationStatistics, methods: dict[str, np.ndarray],
                      batches: Iterator[dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """Per method, the mean error quantization adds to each channel of each weighted layer's input."""
    names = list(stats.channel_means)
    if not names:
        return {m: {} for m in methods}
    index = {name: stats.tensors.index(name) for name in names}
    session, fetch = _augmented_session(model_path, names)
    sums: dict[str, dict[str, np.ndarray]] = {m: {} for m in methods}
    counts: dict[str, int] = {}
    for feed in batches:
        values = _run(session, fetch, feed)
        for name in names:
            x = values[name].astype(np.float32)
            axes = _channel_axes(x.ndim)
            counts[name] = counts.get(name, 0) + int(x.size // x.shape[1 if x.ndim == 4 else -1])
            for method, found in methods.items():
                error = (fake_quantize(x, float(found[index[name]])) - x).sum(axis=axes, dtype=np.float64)
                sums[method][name] = sums[method].get(name, 0) + error
    return {m: {name: sums[m][name] / counts[name] for name in sums[m]} for m in methods}


def correct_biases(int8_path: Path, float_path: Path, stats: ActivationStatistics,
                   shifts: dict[str, np.ndarray], exclude: Iterable[str] = ()) -> int:
    """Add each quantized Conv's and Gemm's expected output shift to its bias, in ``int8_path``.

    Returns how many layers were corrected. Layers in ``exclude`` (kept in float) are left alone.
    """
    import onnx
    from onnx import numpy_helper

    quantized = onnx.load(str(int8_path))
    floats = onnx.load(str(float_path))
    float_weights = {i.name: i for i in floats.graph.initializer}
    float_nodes = {n.name: n for n in floats.graph.node}
    inits = {i.name: i for i in quantized.graph.initializer}
    produced = {out: node for node in quantized.graph.node for out in node.output}
    skip = set(exclude)
    corrected = 0
    for node in quantized.graph.node:
        if node.op_type not in ("Conv", "Gemm") or node.name in skip or node.name not in float_nodes:
            continue
        source = float_nodes[node.name]
        activation = source.input[0]  # the float tensor the quantized graph's Q/DQ pair reads
        weight_dq = produced.get(node.input[1])
        if (activation not in stats.channel_means or weight_dq is None or weight_dq.op_type != "DequantizeLinear"
                or source.input[1] not in float_weights):
            continue
        w = numpy_helper.to_array(float_weights[source.input[1]]).astype(np.float64)
        wq = _dequantized(weight_dq, inits)
        if wq is None or wq.shape != w.shape:
            continue
        mu = stats.channel_means[activation]
        delta = shifts.get(activation, np.zeros_like(mu))
        shift = _output_shift(node, w, wq, mu, delta)
        if shift is None:
            continue
        corrected += _add_to_bias(quantized, node, inits, shift)
    onnx.save_model(quantized, str(int8_path))
    return corrected


def _dequantized(node: Any, inits: JsonObject) -> np.ndarray | None:
    from onnx import helper, numpy_helper

    if any(name not in inits for name in node.input[:2]):
        return None
    q = numpy_helper.to_array(inits[node.input[0]]).astype(np.float64)
    scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
    zero = numpy_helper.to_array(inits[node.input[2]]).astype(np.float64) if len(node.input) > 2 and \
        node.input[2] in inits else np.zeros_like(scale)
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q - zero) * scale


def _output_shift(node: Any, w: np.ndarray, wq: np.ndarray, mu: np.ndarray, delta: np.ndarray) -> np.ndarray | None:
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gemm":
        if attrs.get("transA", 0):
            return None
        if not attrs.get("transB", 0):
            w, wq = w.T, wq.T  # [out, in]
        if w.shape[1] != mu.size:
            return None
        return ((w - wq) @ mu - wq @ delta) * float(attrs.get("alpha", 1.0))
    groups = int(attrs.get("group", 1))
    out_channels, per_group = w.shape[0], w.shape[1]
    if per_group * groups != mu.size:
        return None
    w_sum = (w - wq).reshape(out_channels, per_group, -1).sum(axis=2)
    wq_sum = wq.reshape(out_channels, per_group, -1).sum(axis=2)
    group_of = np.arange(out_channels) // (out_channels // groups)
    mu_g, delta_g = mu.reshape(groups, per_group)[group_of], delta.reshape(groups, per_group)[group_of]
    return (w_sum * mu_g).sum(axis=1) - (wq_sum * delta_g).sum(axis=1)


def _add_to_bias(model: Any, node: Any, inits: JsonObject, shift: np.ndarray) -> bool:
    """The node reads a new bias initializer: its old one plus ``shift`` (the old one is dropped when
    nothing else reads it). False when the old bias is not a per-channel vector."""
    from onnx import helper, numpy_helper

    if node.op_type == "Gemm":
        beta = float(next((helper.get_attribute_value(a) for a in node.attribute if a.name == "beta"), 1.0))
        if beta == 0:
            return False
        shift = shift / beta
    old = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if old is not None and old not in inits:
        return False
    bias = numpy_helper.to_array(inits[old]).astype(np.float64) if old else np.zeros_like(shift)
    if bias.shape != shift.shape:
        return False
    name = f"{node.name}_bias_corrected"
    model.graph.initializer.append(numpy_helper.from_array((bias + shift).astype(np.float32), name))
    if old:
        node.input[2] = name
        if not any(old in n.input for n in model.graph.node):
            model.graph.initializer.remove(inits[old])
    else:
        node.input.append(name)
    return True

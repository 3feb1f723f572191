"""The device-side command line: ``python3 -m edgebuild.runtime`` or ``python3 edgebuild-device.pyz``.

What the build host runs on a device (over SSH, or inside a runtime container), and what a device
runs for itself. Python 3.8 and the standard library (argparse, not click). Every command prints
one JSON object on stdout as its last line, ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``,
and exits with the same code as the build-side CLI; progress goes to stderr.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from edgebuild import __version__
from edgebuild.errors import EdgebuildError
from edgebuild.runtime import options
from edgebuild.runtime.base.files import sha256_file
from edgebuild.runtime.base.identity import ROOT_ENV
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.recipe import ENGINE_FILE, ENGINE_JSON
from edgebuild.runtime.engines import device

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

__all__ = []


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _probe(args: argparse.Namespace) -> JsonObject:
    return {"device": device.probe(args.root).as_dict()}


def _build_engine(args: argparse.Namespace) -> JsonObject:
    facts = device.probe(args.root)
    engine_json = device.build_from_recipe(
        Path(args.recipe), facts, timing_cache_dir=Path(args.timing_cache_dir) if args.timing_cache_dir else None,
        verify_device=not args.no_verify_device, progress=_progress)
    metadata = json.loads(engine_json.read_text())
    folder = engine_json.parent
    files = {name: sha256_file(folder / name) for name in (ENGINE_FILE, ENGINE_JSON)}
    cache = metadata.get("timing_cache") or {}
    return {"engine_json": str(engine_json), "files": files, "timing_cache": cache.get("path"),
            "timing_cache_sha256": sha256_file(cache["path"]) if cache.get("path") else None}


def _inspect(args: argparse.Namespace) -> JsonObject:
    from edgebuild.runtime.engines.engine_info import engines_json, inspect_path, render_engines

    engines = inspect_path(args.path)
    _progress(render_engines(engines))  # the text on stderr; the JSON, as every command's, on stdout
    return {"inspect": engines_json(engines)}


def _serve(args: argparse.Namespace) -> JsonObject:
    """The container's entry point: the server, and the streams the recipe names (``[[streams]]``) beside it
    once it is warm, or only those streams (``[runtime.tracking] mode = "instead"``)."""
    from edgebuild.runtime.serving.server import serve
    from edgebuild.runtime.streams.from_recipe import recipe_tracking
    from edgebuild.runtime.streams.pipeline import render_summary

    tracking = recipe_tracking(args.artifact, args.backend, args.engine_cache, progress=_progress)
    if tracking is not None and tracking.mode == "instead":
        _progress("serve: the recipe tracks its streams instead of serving ([runtime.tracking] mode = \"instead\")")
        summary = tracking.run()
        _progress(render_summary(summary))
        return {"track": summary}
    beside = {} if tracking is None else {"after_ready": tracking.start, "streams": tracking.status}
    serve(args.artifact, host=args.host, port=args.port, grpc_port=args.grpc_port, backend=args.backend,
          warmup_budget_s=args.warmup_budget_s,
          engine_cache=args.engine_cache, max_batch_size=args.max_batch_size,
          max_queue_delay_ms=args.max_queue_delay_ms, preferred_batch_size=args.preferred_batch_size,
          instance_count=args.instance_count, **beside)
    return {"stopped": True}


def _bench(args: argparse.Namespace) -> JsonObject:
    from edgebuild.runtime.bench.bench import run_bench

    shapes: Dict[str, List[int]] = {}
    for item in args.shape or []:
        name, _, dims = item.partition(":")
        try:
            shapes[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            from edgebuild.errors import ConfigError

            raise ConfigError("--shape {!r}: write NAME:CxHxW (the dims after the batch axis)".format(item)) from None
    from edgebuild.runtime.base.group import is_group_folder

    settings = dict(backend=args.backend, batches=_ints(args.batch), concurrency=_ints(args.concurrency) or [1],
                    shapes=shapes or None, iterations=args.iterations, duration_s=args.duration, warmup=args.warmup,
                    ci_pct=args.ci_pct, budget_s=args.budget_s, min_iterations=args.min_iterations,
                    engine_cache=args.engine_cache, window=args.window, drift_warn_pct=args.drift_warn,
                    progress=_progress)
    if is_group_folder(args.artifact):  # every model alone, then all of them at once
        from edgebuild.runtime.bench.bench_group import run_group_bench

        return {"bench": run_group_bench(args.artifact, **settings)}
    return {"bench": run_bench(args.artifact, **settings)}


def _track(args: argparse.Namespace) -> JsonObject:
    from edgebuild.runtime.streams.pipeline import render_summary, run_tracking

    summary = run_tracking(args.artifact, vars(args), args.jsonl, progress=_progress)
    _progress(render_summary(summary))
    return {"track": summary}


def _ints(text: Optional[str]) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()] if text else []


def _ota_key(args: argparse.Namespace) -> Tuple[Optional["PublicKeyTypes"], Optional[JsonObject]]:
    """The verifying key and what the output says about it (file, type, fingerprint), or (None, None)."""
    from edgebuild.runtime.ota.bundle import load_verify_key

    if not args.public_key:
        return None, None
    loaded = load_verify_key(args.public_key)
    _progress("ota: checking signatures with {} ({}, fingerprint {}{})".format(
        loaded.file, loaded.type, loaded.fingerprint, ", from a private key file" if loaded.from_private_key else ""))
    return loaded.key, loaded.as_dict()


def _ota_verify(args: argparse.Namespace) -> JsonObject:
    from edgebuild.runtime.ota.bundle import verify

    key, described = _ota_key(args)
    manifest = verify(args.bundle, key, require_signature=not args.allow_unsigned, root=args.root,
                      check_device=not args.any_device)
    return {"verified": args.bundle, "model": manifest["model"], "version": manifest["version"],
            "sequence": manifest.get("sequence"), "group": manifest.get("group"), "files": len(manifest["files"]),
            "key": described}


def _ota_install(args: argparse.Namespace) -> JsonObject:
    from edgebuild.runtime.ota.ota import install

    key, described = _ota_key(args)
    done = install(args.bundle, args.install_root, key, require_signature=not args.allow_unsigned, root=args.root,
                   keep=args.keep, allow_downgrade=args.allow_downgrade, state_file=args.state_file)
    done["key"] = described
    return done


def _evaluate(args: argparse.Namespace) -> JsonObject:
    from edgebuild.runtime.engines.evaluate import evaluate_folder

    detection = json.loads(args.detection) if args.detection else None
    result = evaluate_folder(args.artifact, Path(args.inputs), Path(args.out), backend=args.backend,
                             engine_cache=args.engine_cache, detection=detection, progress=_progress)
    return {"evaluate": result, "device": device.probe(args.root).as_dict()}


def _ota_rollback(args: argparse.Namespace) -> JsonObject:
    from edgebuild.errors import ConfigError
    from edgebuild.runtime.ota.ota import rollback, rollback_recorded

    if args.state_file is not None and args.to is not None:
        raise ConfigError("ota-rollback: give --to or --state-file, not both")
    if args.state_file is not None:
        return rollback_recorded(args.install_root, args.state_file)
    return rollback(args.install_root, to=args.to)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="edgebuild-device", description=__doc__.split("\n\n")[0])
    top.add_argument("--version", action="version", version="edgebuild-device " + __version__)
    top.add_argument("--root", type=Path, default=None,
                     help="read /etc/nv_tegra_release and /proc/device-tree under this root "
                          "(default: $" + ROOT_ENV + " or /)")
    commands = top.add_subparsers(dest="command", required=True)
    commands.add_parser("probe", help="print this device's L4T release, module, TensorRT and GPU")
    build = commands.add_parser("build-engine", help="build the TensorRT engine of a recipe.json here")
    build.add_argument("recipe", help="recipe.json written by `edgebuild compile` (model.onnx beside it)")
    build.add_argument("--timing-cache-dir", default=None, help="where the per-(module, TensorRT) timing cache is")
    build.add_argument("--no-verify-device", action="store_true",
                       help="build even if this device is not the recipe's module and L4T (a host check)")
    inspect = commands.add_parser(
        "inspect", help="show the provenance of the engines under PATH, what each engine's header says, and "
                        "whether each engine is the one its engine.json records")
    inspect.add_argument("path", type=Path, help="a group folder, a model folder, an engine.json or an engine file")
    evaluate = commands.add_parser("evaluate", help="run a model folder's backend over validation batches the host "
                                                     "sent; write decoded detections or outputs (.npz)")
    evaluate.add_argument("artifact", type=Path, help="the model folder (recipe.json, model.onnx, engine)")
    evaluate.add_argument("--inputs", required=True, help="the host's inputs.npz (batch_NNNN arrays, input_name)")
    evaluate.add_argument("--out", required=True, help="where to write the results (.npz)")
    evaluate.add_argument("--backend", choices=["auto", "tensorrt", "onnxruntime"], default="auto")
    evaluate.add_argument("--engine-cache", type=Path, default=None, help="where a deferred engine is built")
    evaluate.add_argument("--detection", default=None,
                          help="JSON: boxes_output, scores_output, score_threshold, nms_iou, max_detections "
                               "(decode on the device; without it the raw outputs come back)")
    for name, text, specs in (
            ("serve", "serve a model folder over HTTP and gRPC (KServe v2) after warm-up", options.SERVE),
            ("bench", "measure a model folder here: cold start, latency, throughput, memory, power (JSON on stdout)",
             options.BENCH),
            ("track", "track objects in video files and cameras with a model folder; one JSON line per stream "
             "and frame", options.TRACK),
            ("ota-verify", "check a bundle's signature, device and every file without installing", options.OTA_VERIFY),
            ("ota-install", "verify, refuse a bundle not newer than the newest installed, install into a new "
             "version slot, switch, health-check, roll back on failure", options.OTA_INSTALL_DEVICE),
            ("ota-rollback", "switch back to a given or the newest previous version, or undo what one "
             "ota-install --state-file did", options.OTA_ROLLBACK)):
        options.add_arguments(commands.add_parser(name, help=text, description=text), specs)
    return top


COMMANDS = {"probe": _probe, "build-engine": _build_engine, "inspect": _inspect,
            "serve": _serve, "bench": _bench, "track": _track, "evaluate": _evaluate,
            "ota-verify": _ota_verify, "ota-install": _ota_install, "ota-rollback": _ota_rollback}


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = {"ok": True}  # type: JsonObject
        result.update(COMMANDS[args.command](args))
        code = 0
    except EdgebuildError as exc:
        result = {"ok": False, "error": type(exc).__name__, "kind": exc.kind, "message": exc.message,
                  "hint": exc.hint, "exit_code": exc.exit_code}
        print("{}: {}".format(exc.kind, exc), file=sys.stderr)
        code = exc.exit_code
    except Exception as exc:  # a bug: still answer in JSON so the host can show it
        traceback.print_exc()
        result = {"ok": False, "error": type(exc).__name__, "kind": "internal error", "message": str(exc),
                  "hint": "this is a bug in edgebuild's device side; the traceback is above", "exit_code": 1}
        code = 1
    print(json.dumps(result, default=str))
    return code

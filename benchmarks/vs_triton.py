"""The runtime server against NVIDIA Triton, side by side: the same ONNX, the same clients, the same host.

Both servers run at once on free loopback ports, on the same model folder's ONNX with ONNX Runtime on
the CPU: ``edgebuild serve`` (its ONNX Runtime backend) and ``tritonserver`` with Triton's own
onnxruntime backend, from a model repository written for that ONNX (``config.pbtxt``: backend
"onnxruntime", ``instance_group`` KIND_CPU count ``--triton-instances`` (1), the profile's dims, warm-up
at the request's shape). ONNX Runtime's threads are the same on both: one intra-op thread per run and
one inter-op thread (edgebuild's device session, ``OnnxRuntimeRunner.for_device``, spinning off, which
one thread makes moot; Triton's ``intra_op_thread_count`` and ``inter_op_thread_count`` 1). With
``--batching`` both batch dynamically: max batch 8, the same ``--queue-delay-ms`` (2), preferred batch 8
on Triton (edgebuild runs when 8 rows wait or the delay is up); without it, neither batches (with ONNX
Runtime, edgebuild then runs requests on its HTTP workers, several at once; Triton runs one at a time
per instance: ``--triton-instances``).

Every request is one row at the profile's opt height and width. Per round, on each server in turn
(A/B in even rounds, B/A in odd ones, so a busy host and the order weigh on both alike):

1. Triton's C++ load generator ``perf_analyzer`` over HTTP, gRPC, HTTP + system shared memory and gRPC +
   system shared memory, at concurrency 1 (p50, p99, throughput) and at ``--concurrency`` (default 8
   and 16 with ``--batching``); one window of ``--window-ms`` repeated until stable (``--max-trials``);
2. NVIDIA's Python client (``tritonclient``: HTTP with binary tensors, gRPC, HTTP + system shared
   memory; the transports of ``benchmarks/server_cost.py``): ``--requests`` sequential requests, p50.

The table: per (client, protocol, concurrency), the medians over the rounds of edgebuild's and Triton's
p50, of the per-round difference and ratio edgebuild / Triton (p50, throughput, p99: below 1 is
edgebuild faster for latency, above 1 for throughput), and the rounds edgebuild won (lower p50 at
concurrency 1, more throughput above it). A transport that fails on a server is reported as failed with
its error line; the other rows go on. ``--json FILE`` writes every round's raw numbers.

    python benchmarks/vs_triton.py [--model-folder build/engines/<group>] [--rounds 6] [--batching]
        [--window-ms 2000] [--requests 300] [--json out.json]
        [--tritonserver $TRITONSERVER --backend-directory $TRITON_BACKENDS --perf-analyzer $PERF_ANALYZER]

Without ``--model-folder`` it compiles ``examples/shapes-detector`` for its Orin groups once, into
``--cache`` (build/bench-vs-triton; a rerun reuses it), and serves yard-cams. ``shared/tools/triton/setup.sh``
installs a Triton, its onnxruntime backend and ``perf_analyzer`` on a CPU host (``source DIR/env.sh``).
Noisy numbers on a busy host: check ``uptime`` before and after, and run it under ``chrt -r 1`` there.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import http.client
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _server import running_server
from server_cost import TRANSPORTS, Target

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE, GROUP = ROOT / "examples" / "shapes-detector", "yard-cams"
from edgebuild.runtime.base.group import model_folders  # noqa: E402
from edgebuild.runtime.base.recipe import Recipe  # noqa: E402
from edgebuild.shipping.triton import config_pbtxt  # noqa: E402

SERVERS = ("edgebuild", "triton")
#: perf_analyzer's protocols: (name, -i, shared memory)
PERF_PROTOCOLS = {"http": ("http", False), "grpc": ("grpc", False), "http+shm": ("http", True),
                  "grpc+shm": ("grpc", True)}
#: the Python client's: (name, server_cost transport)
PYTHON_PROTOCOLS = {"http": "http", "grpc": "grpc", "http+shm": "shm"}
MAX_BATCH = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the model ------------------------------------------------------------------------------------

def _model_folder(args: argparse.Namespace) -> Path:
    """The folder to serve: ``--model-folder`` (the first model of a group folder), or the example compiled
    into the cache."""
    if args.model_folder is None:
        project = args.cache / EXAMPLE.name
        if not (project / "edgebuild.toml").exists():
            shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "__pycache__"))
        started = time.perf_counter()
        print(f"compiling {EXAMPLE.name} --target orin into {project} (reused when current)", flush=True)
        done = subprocess.run([sys.executable, "-m", "edgebuild", "compile", "-p", str(project), "--target", "orin",
                               "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            sys.exit(f"edgebuild compile: exit {done.returncode}\n{done.stdout[-3000:]}")
        print(f"compiled in {time.perf_counter() - started:.0f} s", flush=True)
        args.model_folder = project / "build" / "engines" / GROUP
    folders = model_folders(args.model_folder)
    if len(folders) > 1:
        print(f"{args.model_folder} holds {len(folders)} models: comparing the first, {next(iter(folders))}")
    return next(iter(folders.values()))


def _triton_config(recipe: Recipe, args: argparse.Namespace) -> str:
    """edgebuild's Triton ``config.pbtxt`` for the folder's ONNX, made a CPU one: backend onnxruntime
    instead of the TensorRT accelerator, KIND_CPU, ONNX Runtime's threads, this run's batching."""
    text = config_pbtxt(recipe, engine=False)
    text = text.replace('platform: "onnxruntime_onnx"', 'backend: "onnxruntime"')
    text = re.sub(r"(?ms)^optimization \{.*?^\}\n", "", text)
    text = re.sub(r"(?ms)^dynamic_batching \{.*?^\}\n", "", text)
    text, kinds = re.subn(r"count: 1\n    kind: KIND_GPU", f"count: {args.triton_instances}\n    kind: KIND_CPU", text)
    if kinds != 1 or "backend:" not in text or "optimization" in text:
        sys.exit("edgebuild.shipping.triton.config_pbtxt changed: this script cannot make its CPU config")
    batched = re.search(r"^max_batch_size: (\d+)$", text, re.MULTILINE)
    if batched is None or int(batched.group(1)) < 1:
        sys.exit(f"{recipe.group}: the profile's batch axis is not dynamic: Triton cannot take one-row requests")
    if args.batching:
        size = min(MAX_BATCH, int(batched.group(1)))
        text += ("dynamic_batching {\n"
                 f"  preferred_batch_size: {size}\n"
                 f"  max_queue_delay_microseconds: {int(round(args.queue_delay_ms * 1000))}\n}}\n")
        text = re.sub(r"^max_batch_size: \d+$", f"max_batch_size: {size}", text, flags=re.MULTILINE)
    # the warm-up at the request's shape (one row at the opt height and width), as edgebuild warms up
    text = re.sub(r"batch_size: \d+\n    count: 3", "batch_size: 1\n    count: 10", text)
    threads = "".join(f'parameters {{ key: "{key}" value: {{ string_value: "1" }} }}\n'
                      for key in ("intra_op_thread_count", "inter_op_thread_count"))
    return text + threads


def _write_repository(folder: Path, recipe: Recipe, args: argparse.Namespace, out: Path) -> Path:
    model = out / recipe.model_name / "1"
    model.mkdir(parents=True)
    try:
        (model / "model.onnx").hardlink_to(folder / recipe.onnx)
    except OSError:
        shutil.copyfile(folder / recipe.onnx, model / "model.onnx")
    (out / recipe.model_name / "config.pbtxt").write_text(_triton_config(recipe, args))
    return out


# -- the servers ----------------------------------------------------------------------------------

def _get(port: int, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read()
        return answer.status, json.loads(body) if body.startswith(b"{") else body.decode(errors="replace")
    finally:
        conn.close()


@contextlib.contextmanager
def running_triton(args: argparse.Namespace, repository: Path, model: str, log: Path) -> Iterator[dict]:
    """A ready ``tritonserver`` on free ports (its HTTP and gRPC port, its metadata); shut down (SIGTERM,
    then SIGKILL after 30 s) however the block ends."""
    http_port, grpc_port = _free_port(), _free_port()
    command = [str(args.tritonserver), f"--model-repository={repository}",
               f"--backend-directory={args.backend_directory}", f"--http-port={http_port}",
               f"--grpc-port={grpc_port}", "--allow-metrics=false", "--strict-readiness=true",
               "--exit-timeout-secs=10", "--log-verbose=0"]
    with open(log, "w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + args.start_timeout
        while True:
            if child.poll() is not None:
                sys.exit(f"tritonserver exited ({child.returncode}):\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                sys.exit(f"tritonserver not ready in {args.start_timeout:.0f} s:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if _get(http_port, f"/v2/models/{model}/ready")[0] == 200:
                    break
            time.sleep(0.2)
        yield {"port": http_port, "grpc_port": grpc_port, "pid": child.pid, "metadata": _get(http_port, "/v2")[1]}
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


# -- the measurements -----------------------------------------------------------------------------

#: perf_analyzer's lines that say what went wrong, the most telling first
ERROR_LINES = (r"had error:", r"error", r"fail|unable|abort|exception")


def _error_line(output: str, returncode: int) -> str:
    """perf_analyzer's error: its most telling line (a worker thread's error before the clean-up's), and
    the signal it died of, if it did."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    said = next((line for pattern in ERROR_LINES for line in lines if re.search(pattern, line, re.IGNORECASE)), None)
    died = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if died:
        with contextlib.suppress(ValueError):
            name = signal.Signals(died).name
            return f"perf_analyzer died of {name} (exit {returncode})" + (
                f": {said}" if said else f" after {lines[-1]!r}" if lines else "")
    return (said or (lines[-1] if lines else f"no output, exit {returncode}"))[:400]


def _unlink_regions(names: list[str], since: float) -> None:
    """The system shared-memory regions a perf_analyzer that died of a signal left behind: it names them
    after the tensors (``/dev/shm/boxes``), so only those written since it started, and only after a crash
    (two perf_analyzer runs with shared memory on one host share these names: run one at a time)."""
    for name in names:
        path = Path("/dev/shm") / name
        with contextlib.suppress(OSError):
            if path.stat().st_uid == os.getuid() and path.stat().st_mtime >= since - 1:
                path.unlink()


def perf_analyzer(args: argparse.Namespace, server: dict, model: str, shape: str, protocol: str, concurrency: int,
                  regions: tuple[int, list[str]], work: Path) -> dict:
    """One perf_analyzer run: p50, p99 (ms) and throughput (inferences/s), or the error. A run that does not
    settle within ``--max-trials`` windows is run again taking its first three windows as they come, and
    marked unstable."""
    kind, shm = PERF_PROTOCOLS[protocol]
    port = server["grpc_port"] if kind == "grpc" else server["port"]
    report = work / "perf.csv"
    command = [str(args.perf_analyzer), "-m", model, "-u", f"127.0.0.1:{port}", "-i", kind, "-b", "1",
               "--concurrency-range", f"{concurrency}:{concurrency}", "--shape", shape,
               "-p", str(args.window_ms), "-r", str(args.max_trials), "-f", str(report)]
    if shm:
        command += ["--shared-memory", "system", "--output-shared-memory-size", str(regions[0])]
    for stability, unstable in ((args.stability, False), (10000.0, True)):
        report.unlink(missing_ok=True)
        started = time.time()
        try:
            done = subprocess.run([*command, "-s", str(stability)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=args.window_ms / 1000 * (args.max_trials + 2) + 60)
        except subprocess.TimeoutExpired as exc:
            return {"error": f"perf_analyzer timed out after {exc.timeout:.0f} s"}
        if done.returncode < 0 and shm:
            _unlink_regions(regions[1], started)
        if done.returncode != 0 and "Failed to obtain stable measurement" in done.stdout and not unstable:
            continue
        rows = list(csv.DictReader(report.open())) if done.returncode == 0 and report.exists() else []
        if not rows:
            return {"error": _error_line(done.stdout, done.returncode)}
        row = rows[0]
        return {"p50_ms": float(row["p50 latency"]) / 1000, "p99_ms": float(row["p99 latency"]) / 1000,
                "throughput": float(row["Inferences/Second"]), **({"unstable": True} if unstable else {})}
    raise AssertionError("unreachable")


def python_client(args: argparse.Namespace, target: Target, protocol: str) -> dict:
    """``--requests`` sequential requests with tritonclient after 10 unclocked ones: p50, p99, throughput."""
    transport = None
    try:
        transport = TRANSPORTS[PYTHON_PROTOCOLS[protocol]](target)
        for _ in range(10):
            transport.infer()
        seconds = []
        clock = time.perf_counter
        for _ in range(args.requests):
            started = clock()
            transport.infer()
            seconds.append(clock() - started)
    except Exception as exc:  # noqa: BLE001 - a failed transport is a row of the table, not the end of the run
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:400]}
    finally:
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()
    seconds.sort()
    return {"p50_ms": statistics.median(seconds) * 1000, "p99_ms": seconds[int(0.99 * (len(seconds) - 1))] * 1000,
            "throughput": len(seconds) / sum(seconds)}


# -- the report -----------------------------------------------------------------------------------

def _versions(args: argparse.Namespace, triton: dict) -> dict[str, str]:
    import onnxruntime

    import edgebuild

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip()
    # the ONNX Runtime that Triton's backend loads: OrtGetApiBase()->GetVersionString(), in a child process
    probe = ("import ctypes, sys\n"
             "class Base(ctypes.Structure):\n"
             "    _fields_ = [('api', ctypes.c_void_p), ('version', ctypes.CFUNCTYPE(ctypes.c_char_p))]\n"
             "lib = ctypes.CDLL(sys.argv[1])\n"
             "lib.OrtGetApiBase.restype = ctypes.POINTER(Base)\n"
             "print(lib.OrtGetApiBase().contents.version().decode())\n")
    lib = args.backend_directory / "onnxruntime" / "libonnxruntime.so.1"
    ort_triton = subprocess.run([sys.executable, "-c", probe, str(lib)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    perf = subprocess.run([str(args.perf_analyzer), "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout.strip().splitlines()
    return {"edgebuild": f"{getattr(edgebuild, '__version__', '?')} ({commit or 'no git'})",
            "onnxruntime (edgebuild)": onnxruntime.__version__,
            "triton": f"{triton['metadata'].get('version', '?')}",
            "onnxruntime (triton backend)": ort_triton,
            "perf_analyzer": perf[0] if perf else "?", "tritonclient": version("tritonclient"),
            "python": platform.python_version()}


def _host() -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError):
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        cpu = found.group(1) if found else platform.processor() or "?"
    return {"host": platform.node(), "os": f"{platform.system()} {platform.release()}", "cpu": cpu,
            "cpus": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()]}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(rounds: list[dict]) -> list[dict]:
    """One row per (client, protocol, concurrency): medians over the rounds where both servers answered."""
    keys = list(dict.fromkeys((r["client"], r["protocol"], r["concurrency"]) for r in rounds))
    rows = []
    for key in keys:
        mine = [r for r in rounds if (r["client"], r["protocol"], r["concurrency"]) == key]
        by_round: dict[int, dict[str, dict]] = {}
        for r in mine:
            by_round.setdefault(r["round"], {})[r["server"]] = r
        pairs = [(s["edgebuild"], s["triton"]) for s in by_round.values()
                 if "error" not in s.get("edgebuild", {"error": 1}) and "error" not in s.get("triton", {"error": 1})]
        errors = {server: next((r["error"] for r in mine if r["server"] == server and "error" in r), None)
                  for server in SERVERS}
        failed = {server: sum(1 for r in mine if r["server"] == server and "error" in r) for server in SERVERS}
        concurrency = key[2]
        won = sum(1 for e, t in pairs if (e["p50_ms"] < t["p50_ms"] if concurrency == 1 else
                                          e["throughput"] > t["throughput"]))
        rows.append({"client": key[0], "protocol": key[1], "concurrency": concurrency, "rounds": len(by_round),
                     "paired": len(pairs), "failed": failed, "errors": errors,
                     "edgebuild_p50_ms": _median([e["p50_ms"] for e, _ in pairs]),
                     "triton_p50_ms": _median([t["p50_ms"] for _, t in pairs]),
                     "diff_ms": _median([e["p50_ms"] - t["p50_ms"] for e, t in pairs]),
                     "p50_ratio": _median([e["p50_ms"] / t["p50_ms"] for e, t in pairs]),
                     "throughput_ratio": _median([e["throughput"] / t["throughput"] for e, t in pairs]),
                     "p99_ratio": _median([e["p99_ms"] / t["p99_ms"] for e, t in pairs]),
                     "edgebuild_per_s": _median([e["throughput"] for e, _ in pairs]),
                     "triton_per_s": _median([t["throughput"] for _, t in pairs]),
                     "edgebuild_won": won,
                     "unstable": {server: sum(1 for r in mine if r["server"] == server and r.get("unstable"))
                                  for server in SERVERS}})
    return rows


def _cell(value: float | None, digits: int = 2, width: int = 8) -> str:
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def print_table(rows: list[dict]) -> None:
    print(f"\n{'client':<15} {'protocol':<9} {'conc':>4} {'eb p50':>8} {'tr p50':>8} {'diff ms':>8} {'p50 x':>6} "
          f"{'req/s x':>7} {'p99 x':>6} {'eb req/s':>8} {'tr req/s':>8} {'eb won':>7}")
    notes = []
    for row in rows:
        head = f"{row['client']:<15} {row['protocol']:<9} {row['concurrency']:>4}"
        if not row["paired"]:
            who = [s for s in SERVERS if row["failed"][s]]
            print(f"{head} FAILED on {' and '.join(who)}")
        else:
            print(f"{head} {_cell(row['edgebuild_p50_ms'])} {_cell(row['triton_p50_ms'])} {_cell(row['diff_ms'])} "
                  f"{_cell(row['p50_ratio'], 2, 6)} {_cell(row['throughput_ratio'], 2, 7)} "
                  f"{_cell(row['p99_ratio'], 2, 6)} {_cell(row['edgebuild_per_s'], 0)} {_cell(row['triton_per_s'], 0)} "
                  f"{row['edgebuild_won']:>3}/{row['paired']:<3}")
        for server in SERVERS:
            if row["unstable"][server]:
                notes.append(f"{row['client']} {row['protocol']} c{row['concurrency']}: {server} unstable in "
                             f"{row['unstable'][server]}/{row['rounds']} rounds (perf_analyzer's first 3 windows)")
            if row["errors"][server]:
                notes.append(f"{row['client']} {row['protocol']} c{row['concurrency']}: {server} failed "
                             f"{row['failed'][server]}/{row['rounds']} rounds: {row['errors'][server]}")
    print("eb: edgebuild, tr: Triton; medians over the rounds; x: edgebuild / Triton per round (p50, p99: below 1 "
          "is edgebuild faster; req/s: above 1); eb won: rounds with the lower p50 (concurrency 1) or more req/s")
    for note in notes:
        print(f"  {note}")


# -- the run --------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-folder", type=Path, default=None,
                        help="a folder `edgebuild compile` wrote (build/engines/<group>); default: the example, "
                             "compiled into --cache")
    parser.add_argument("--cache", type=Path, default=ROOT / "build" / "bench-vs-triton",
                        help="where the example is compiled (default build/bench-vs-triton)")
    parser.add_argument("--tritonserver", type=Path, default=os.environ.get("TRITONSERVER"),
                        help="the tritonserver binary (default $TRITONSERVER)")
    parser.add_argument("--backend-directory", type=Path, default=os.environ.get("TRITON_BACKENDS"),
                        help="Triton's --backend-directory, with onnxruntime/ (default $TRITON_BACKENDS)")
    parser.add_argument("--perf-analyzer", type=Path, default=os.environ.get("PERF_ANALYZER"),
                        help="Triton's perf_analyzer (default $PERF_ANALYZER)")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument("--batching", action="store_true",
                        help=f"dynamic batching on both: max batch {MAX_BATCH}, --queue-delay-ms, "
                             f"preferred {MAX_BATCH}")
    parser.add_argument("--queue-delay-ms", type=float, default=2.0, help="the batching delay (default 2)")
    parser.add_argument("--concurrency", default=None,
                        help="perf_analyzer's concurrencies, comma-separated (default 1, and 1,8,16 with --batching)")
    parser.add_argument("--protocols", default=",".join(PERF_PROTOCOLS),
                        help=f"perf_analyzer's protocols (default {','.join(PERF_PROTOCOLS)})")
    parser.add_argument("--python-protocols", default=",".join(PYTHON_PROTOCOLS),
                        help=f"the Python client's (default {','.join(PYTHON_PROTOCOLS)}; '' for none)")
    parser.add_argument("--window-ms", type=int, default=2000, help="perf_analyzer's measurement window (default 2000)")
    parser.add_argument("--max-trials", type=int, default=8,
                        help="perf_analyzer's windows at most until 3 in a row agree (default 8)")
    parser.add_argument("--stability", type=float, default=15.0,
                        help="perf_analyzer's stability percentage (default 15)")
    parser.add_argument("--requests", type=int, default=300, help="the Python client's requests a round (default 300)")
    parser.add_argument("--triton-instances", type=int, default=1, help="Triton's KIND_CPU instances (default 1)")
    parser.add_argument("--start-timeout", type=float, default=180.0, help="seconds for each server to be ready")
    parser.add_argument("--json", type=Path, default=None, help="write the raw rounds and the table here")
    args = parser.parse_args()
    for flag, value in (("--tritonserver", args.tritonserver), ("--backend-directory", args.backend_directory),
                        ("--perf-analyzer", args.perf_analyzer)):
        if value is None or not value.exists():
            sys.exit(f"{flag}: {value or 'not given'} (source shared/tools/triton/env.sh, or name it)")
    concurrencies = [int(c) for c in (args.concurrency or ("1,8,16" if args.batching else "1")).split(",")]
    protocols = [p for p in args.protocols.split(",") if p]
    python_protocols = [p for p in args.python_protocols.split(",") if p]
    unknown = [p for p in protocols if p not in PERF_PROTOCOLS] + [p for p in python_protocols
                                                                    if p not in PYTHON_PROTOCOLS]
    if unknown:
        sys.exit(f"unknown protocols: {', '.join(unknown)}")
    # SIGTERM (a killed run) unwinds like Ctrl-C, so both servers are shut down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    folder = _model_folder(args)
    recipe = Recipe.load(folder)
    model = recipe.model_name or recipe.group
    name, (_, opt, _) = next(iter(recipe.profiles.items()))
    if len(recipe.profiles) > 1:
        sys.exit(f"{folder}: {len(recipe.profiles)} inputs; this script sends one")
    inputs = {name: np.random.default_rng(0).random([1, *opt[1:]], dtype=np.float32)}
    # the outputs' largest size, for perf_analyzer's output regions (the raw outputs: neither server decodes)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(folder / recipe.onnx), providers=["CPUExecutionProvider"])
    outputs = session.run(None, inputs)
    # perf_analyzer's regions: one per output, at least the largest's size; named after the tensors
    regions = (max(a.nbytes for a in outputs), [o.name for o in session.get_outputs()] + [f"{name}_0_0"])
    del session
    parameters = {"detections": False} if recipe.runtime.detections else None
    if parameters:
        sys.exit(f"{folder}: its server decodes detections ([runtime] detections); perf_analyzer cannot ask for "
                 "the raw outputs that Triton answers: compile it with detections = false")
    shape = f"{name}:{','.join(str(d) for d in opt[1:])}"
    batch = {"max_batch_size": MAX_BATCH, "max_queue_delay_ms": args.queue_delay_ms} if args.batching else \
        {"max_batch_size": 1}

    with tempfile.TemporaryDirectory(prefix="vs-triton-") as scratch:
        work = Path(scratch)
        repository = _write_repository(folder, recipe, args, work / "repository")
        print(f"serving {folder} ({model}: {folder / recipe.onnx}); requests [1, {', '.join(map(str, opt[1:]))}]; "
              f"batching {'max ' + str(MAX_BATCH) + f', {args.queue_delay_ms:g} ms' if args.batching else 'off'}",
              flush=True)
        with contextlib.ExitStack() as stack:
            eb_port, ready = stack.enter_context(running_server(folder, backend="onnxruntime", grpc_port=0, **batch))
            if ready.get("grpc_port") is None:
                sys.exit("edgebuild serves no gRPC here (grpcio missing?)")
            servers = {"edgebuild": {"port": eb_port, "grpc_port": ready["grpc_port"], "pid": ready["pid"]},
                       "triton": stack.enter_context(running_triton(args, repository, model, work / "triton.log"))}
            host, versions = _host(), _versions(args, servers["triton"])
            started = datetime.datetime.now().astimezone()
            print(f"host {host['host']}: {host['cpu']}, {host['cpus']} CPUs, {host['os']}, load average "
                  f"{' '.join(map(str, host['load']))} at the start")
            print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
            print(f"ONNX Runtime threads: intra-op 1, inter-op 1 on both; Triton instances {args.triton_instances} "
                  f"(KIND_CPU); edgebuild {ready.get('backend', 'onnxruntime')}", flush=True)
            plan = [("perf_analyzer", p, c) for p in protocols for c in concurrencies]
            plan += [("python", p, 1) for p in python_protocols]
            rounds: list[dict] = []
            for index in range(args.rounds):
                order = SERVERS if index % 2 == 0 else SERVERS[::-1]
                for client, protocol, concurrency in plan:
                    for server in order:
                        at = servers[server]
                        if client == "perf_analyzer":
                            result = perf_analyzer(args, at, model, shape, protocol, concurrency, regions, work)
                        else:
                            target = Target(at["port"], model, inputs, None, at["grpc_port"])
                            result = python_client(args, target, protocol)
                        rounds.append({"round": index + 1, "client": client, "protocol": protocol,
                                       "concurrency": concurrency, "server": server, **result})
                        said = (f"FAILED: {result['error']}" if "error" in result else
                                f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, "
                                f"{result['throughput']:.0f}/s" + (" (unstable)" if result.get("unstable") else ""))
                        print(f"round {index + 1}/{args.rounds} {client} {protocol} c{concurrency} {server}: {said}",
                              flush=True)
        load = [round(x, 2) for x in os.getloadavg()]
    rows = summarize(rounds)
    print(f"\nedgebuild {versions['edgebuild']} vs Triton {versions['triton']}, {started:%Y-%m-%d %H:%M %Z}, "
          f"host {host['host']} ({host['cpus']} CPUs), load {host['load'][0]} at the start and {load[0]} at the end; "
          f"{args.rounds} rounds; batching {'on' if args.batching else 'off'}")
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"folder": str(folder), "model": model, "request_shape": [1, *opt[1:]],
                                         "batching": args.batching, "queue_delay_ms": args.queue_delay_ms,
                                         "triton_instances": args.triton_instances, "host": host,
                                         "load_at_end": load, "versions": versions, "started": started.isoformat(),
                                         "settings": {k: str(v) for k, v in vars(args).items()},
                                         "rounds": rounds, "table": rows}, indent=2))


if __name__ == "__main__":
    main()

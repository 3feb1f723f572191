"""Protocol conformance with Triton's own load generator: perf_analyzer (C++, tritonclient 2.41) against
`edgebuild serve`, over HTTP and gRPC, with the tensors in the requests or in system shared memory, through
a concurrency sweep.

perf_analyzer speaks the protocol as Triton's C++ clients do: it reads the model's metadata and config,
sends binary tensors, registers, uses and unregisters shared-memory regions (system and, on its way out,
CUDA), and parses every answer strictly, so an answer Triton would not give fails here (it found that
an output written to shared memory must carry no parameters, and that gRPC must keep one
raw_output_contents entry per output). Its stability check is set out of reach
(``--stability-percentage 100000``): on a loaded CI machine short windows never settle, and these tests
check that the load runs without an error, not how fast; each concurrency then takes three 200 ms
windows (a window in which no request completed counts as unstable: ``--max-trials 10`` leaves room).
"""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.resources import perf_analyzer_path
from tests.support.runtime_artifacts import Client, free_port, write_artifact

pytestmark = pytest.mark.perf_analyzer

CONCURRENCY = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """`edgebuild serve` of the tiny model folder on free HTTP and gRPC ports: {"http": port, "grpc": port}."""
    root = tmp_path_factory.mktemp("perf_analyzer")
    folder = write_artifact(root / "yard")
    ports = {"http": free_port(), "grpc": free_port()}
    with (root / "serve.log").open("w") as log:
        child = subprocess.Popen([sys.executable, "-m", "edgebuild", "serve", str(folder), "--host", "127.0.0.1",
                                  "--port", str(ports["http"]), "--grpc-port", str(ports["grpc"]),
                                  "--warmup-budget-s", "1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            Client(ports["http"]).wait_ready()
            yield ports
        finally:
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=60)


def _perf_analyzer(port: int, transport: str, memory: str, csv_path: Path) -> subprocess.CompletedProcess:
    tool = perf_analyzer_path()
    assert tool is not None  # the marker skipped otherwise
    return subprocess.run(
        [tool, "-m", "tiny", "-u", f"127.0.0.1:{port}", "-i", transport, "--shared-memory", memory,
         "--shape", "images:3,8,8", "--concurrency-range", f"{CONCURRENCY[0]}:{CONCURRENCY[-1]}",
         "--measurement-interval", "200", "--stability-percentage", "100000", "--max-trials", "10",
         "-f", str(csv_path)],
        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("memory", ["none", "system"])
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_perf_analyzer_sweeps_concurrency_without_an_error(served, tmp_path: Path, transport: str,
                                                          memory: str) -> None:
    csv_path = tmp_path / "sweep.csv"
    done = _perf_analyzer(served[transport], transport, memory, csv_path)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    for sign in ("error", "unable", "failed"):  # a worker's error, a region it could not unregister, ...
        assert sign not in said.lower(), said
    with csv_path.open() as table:
        rows = list(csv.DictReader(table))
    assert sorted(int(r["Concurrency"]) for r in rows) == CONCURRENCY, said  # in order of throughput
    assert all(float(r["Inferences/Second"]) > 0 for r in rows), said
    for level in CONCURRENCY:
        assert f"Concurrency: {level}, throughput: " in said
    # it unregistered its regions on the way out, and the server unmapped them
    status, regions = Client(served["http"]).json("GET", "/v2/systemsharedmemory/status")
    assert (status, regions) == (200, [])

#!/usr/bin/env bash
# Dynamic batching, edgebuild serve against Triton on one model, with the same batching settings.
#
#   benchmarks/vs_triton_batching.sh MODEL_FOLDER OUT_DIR [INSTANCES] [ROUNDS]
#
# MODEL_FOLDER: a folder `edgebuild compile` wrote (served by ONNX Runtime on the CPU: --backend
# onnxruntime; Triton gets its model.onnx with its onnxruntime backend). Both servers run at once,
# each: max batch 8, 2 ms queue delay, preferred batch sizes 4 and 8, INSTANCES instances (default 1).
# perf_analyzer (batch-1 requests, 3 s windows, stable within 50 % over 3 windows: a shared host) runs at concurrency 8 and 16 over HTTP and gRPC,
# the two servers interleaved in each round; each run appends a line to OUT_DIR/runs.csv with the
# average batch size the server reached over that run (from its metrics) and the load average.
# Needs `source DIR/env.sh` after `shared/tools/triton/setup.sh DIR` (tritonserver, its backends, perf_analyzer)
# and PYTHONPATH at the tree.
set -euo pipefail
model=$(cd "$1" && pwd); out=$2; instances=${3:-1}; rounds=${4:-3}
python=${PYTHON:-.venv/bin/python}
name=$("$python" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r.get('model_name') or r['group'])" "$model/recipe.json")
shape=$("$python" -c "import json,sys; r=json.load(open(sys.argv[1])); n,(lo,opt,hi)=next(iter(r['profiles'].items())); print(n+':'+','.join(map(str,opt[1:])))" "$model/recipe.json")
mkdir -p "$out/repo/$name/1"
cp "$model/model.onnx" "$out/repo/$name/1/model.onnx"
cat >"$out/repo/$name/config.pbtxt" <<CFG
name: "$name"
backend: "onnxruntime"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 2000 preferred_batch_size: [4, 8] }
instance_group [{ kind: KIND_CPU, count: $instances }]
CFG
"$TRITONSERVER" --model-repository "$out/repo" --backend-directory "$TRITON_BACKENDS" --http-port 18200 \
  --grpc-port 18201 --metrics-port 18202 >"$out/triton.log" 2>&1 &
triton=$!
"$python" -m edgebuild serve "$model" --backend onnxruntime --port 18100 --grpc-port 18101 --max-batch-size 8 \
  --max-queue-delay-ms 2 --preferred-batch-size 4 --preferred-batch-size 8 --instance-count "$instances" \
  --warmup-budget-s 5 >"$out/edgebuild.log" 2>&1 &
edge=$!
trap 'kill $triton $edge 2>/dev/null || true' EXIT
for url in 127.0.0.1:18200 127.0.0.1:18100; do
  for _ in $(seq 120); do curl -sf "$url/v2/health/ready" >/dev/null && break; sleep 1; done
done
batches() {  # rows and runs so far: edgebuild's counters, Triton's inference and execution counts
  if [ "$1" = edgebuild ]; then
    curl -s 127.0.0.1:18100/metrics | awk '/^edgebuild_batch_rows_total/{r=$2} /^edgebuild_backend_runs_total/{n=$2} END{print r, n}'
  else
    curl -s 127.0.0.1:18202/metrics | awk '/^nv_inference_count\{/{r=$2} /^nv_inference_exec_count\{/{n=$2} END{print r, n}'
  fi
}
[ -f "$out/runs.csv" ] || echo "round,server,protocol,concurrency,instances,infer_per_s,p50_us,p99_us,avg_batch,load1" >"$out/runs.csv"
for round in $(seq "$rounds"); do
  for protocol in http grpc; do
    for concurrency in 8 16; do
      for server in edgebuild triton; do
        if [ "$server" = edgebuild ]; then http=18100 grpc=18101; else http=18200 grpc=18201; fi
        port=$([ "$protocol" = http ] && echo $http || echo $grpc)
        read -r rows0 runs0 < <(batches $server)
        "$PERF_ANALYZER" -m "$name" -u "127.0.0.1:$port" -i "$protocol" -b 1 --shape "$shape" \
          --concurrency-range "$concurrency" --measurement-interval 3000 --stability-percentage 50 --max-trials 5 -f "$out/pa.csv" >"$out/pa.log" 2>&1 || {
          echo "perf_analyzer failed: $server $protocol $concurrency" >&2; tail -5 "$out/pa.log" >&2; continue; }
        read -r rows1 runs1 < <(batches $server)
        load=$(cut -d' ' -f1 /proc/loadavg)
        "$python" - "$out/pa.csv" "$round,$server,$protocol,$concurrency,$instances" "$rows0" "$runs0" "$rows1" "$runs1" "$load" >>"$out/runs.csv" <<'PY'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
rows0, runs0, rows1, runs1 = (float(v) for v in sys.argv[3:7])
batch = (rows1 - rows0) / (runs1 - runs0) if runs1 > runs0 else 0.0
print("{},{},{},{},{:.2f},{}".format(sys.argv[2], row["Inferences/Second"], row["p50 latency"], row["p99 latency"],
                                     batch, sys.argv[7]))
PY
        tail -1 "$out/runs.csv"
      done
    done
  done
done

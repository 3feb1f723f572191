#!/bin/sh
# Make sure the image has what `edgebuild-device.pyz serve` needs, installing only what is missing.
#   install-runtime-deps.sh jetson CUDA_MAJOR   NVIDIA l4t-tensorrt base: TensorRT's Python bindings
#                                              must be there; numpy, a CUDA binding and gRPC are added
#   install-runtime-deps.sh cpu                 any Debian/Ubuntu Python base: numpy and ONNX Runtime
#                                              (gRPC only where the base has it: the CPU image is built offline)
set -eu
flavor=${1:?usage: install-runtime-deps.sh jetson|cpu [CUDA_MAJOR]}
cuda_major=${2:-}

say() { echo "edgebuild runtime image: $*" >&2; }
has() { python3 -c "$1" >/dev/null 2>&1; }
apt_install() {
    command -v apt-get >/dev/null || { say "cannot install $* (no apt-get in the base image)"; exit 1; }
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
    rm -rf /var/lib/apt/lists/*
}
pip_install() {
    has "import pip" || apt_install python3-pip
    python3 -m pip install --no-cache-dir "$@"
}

command -v python3 >/dev/null || { say "the base image has no python3"; exit 1; }
has "import sys; assert sys.version_info >= (3, 8)" || { say "python3 is older than 3.8: $(python3 -V)"; exit 1; }
has "import numpy" || apt_install python3-numpy

case "$flavor" in
jetson)
    has "import tensorrt" || {
        say "the base image has no TensorRT Python bindings (import tensorrt); use an nvcr.io/nvidia/l4t-tensorrt image of this JetPack"
        exit 1
    }
    if ! has "import pycuda.driver" && ! has "from cuda import cudart" && ! has "from cuda.bindings import runtime"; then
        # TensorRTRunner takes pycuda, else cuda-python; cuda-python has aarch64 wheels, pinned to the CUDA major
        pip_install "cuda-python>=${cuda_major:?jetson needs the CUDA major version}.0,<$((cuda_major + 1))"
    fi
    # KServe v2 over gRPC (port 8001): grpcio has aarch64 wheels; tritonclient's generated stubs are the schema
    has "import grpc, hpack, tritonclient.grpc" || pip_install grpcio "tritonclient[grpc]" hpack
    ;;
cpu)
    has "import onnxruntime" || pip_install onnxruntime
    ;;
*)
    say "unknown flavor $flavor (jetson or cpu)"
    exit 2
    ;;
esac
python3 -c "import numpy; print('edgebuild runtime image: python', __import__('sys').version.split()[0], 'numpy', numpy.__version__)"

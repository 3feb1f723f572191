"""The gRPC server's own reading and writing of inference messages (``read_request``, ``write_reply``):
protobuf's own bytes, with the tensors' bytes left in place."""

from __future__ import annotations

import numpy as np
import pytest

pb = pytest.importorskip("tritonclient.grpc.service_pb2")

from edgebuild.runtime.serving import grpc_server  # noqa: E402


def _request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="yard", model_version="1", id="r7")
    request.parameters["detections"].bool_param = True
    request.inputs.add(name="images", datatype="FP32", shape=[1, 3, 40, 40])
    request.inputs.add(name="scale", datatype="FP32", shape=[1]).parameters["note"].string_param = "x"
    request.outputs.add(name="boxes")
    request.raw_input_contents.extend([np.arange(4800, dtype=np.float32).tobytes(), b"\x00\x00\x80?"])
    return request


def test_a_request_reads_as_protobuf_reads_it_with_the_tensors_as_views_of_the_bytes_received() -> None:
    request = _request()
    data = request.SerializeToString()
    received = grpc_server.read_infer_request(data)
    assert all(isinstance(view, memoryview) and view.obj is data for view in received.raw)  # no copy
    assert [bytes(view) for view in received.raw] == list(request.raw_input_contents)
    assert not received.message.raw_input_contents
    received.message.raw_input_contents.extend(bytes(view) for view in received.raw)
    assert received.message == request


def test_a_request_without_raw_contents_is_protobufs_message() -> None:
    request = _request()
    del request.raw_input_contents[:]
    request.inputs[0].contents.fp32_contents.extend([1.0, 2.0])
    received = grpc_server.read_infer_request(request.SerializeToString())
    assert received.raw == [] and received.message == request


@pytest.mark.parametrize("cut", [1, 5, -3])
def test_a_truncated_request_is_refused(cut: int) -> None:
    data = _request().SerializeToString()
    with pytest.raises(Exception):  # noqa: B017 - grpcio answers any deserializer error the same way
        grpc_server.read_infer_request(data[:cut])


def test_a_reply_writes_as_protobuf_writes_it_unary_and_streamed() -> None:
    response = pb.ModelInferResponse(model_name="yard", model_version="1", id="r7")
    response.parameters["batch_rows"].int64_param = 1
    response.outputs.add(name="boxes", datatype="FP32", shape=[1, 200, 4])
    response.outputs.add(name="placed", datatype="FP32", shape=[1])
    response.outputs.add(name="scores", datatype="FP32", shape=[1, 200])
    boxes, scores = np.random.default_rng(0).random((1, 200, 4), np.float32), np.zeros((1, 200), np.float32)
    reply = grpc_server.Reply(response, [boxes.data.cast("B"), b"", scores.data.cast("B")])
    expected = pb.ModelInferResponse()
    expected.CopyFrom(response)
    expected.raw_output_contents.extend([boxes.tobytes(), b"", scores.tobytes()])
    assert pb.ModelInferResponse.FromString(grpc_server.write_reply(reply)) == expected
    streamed = pb.ModelStreamInferResponse.FromString(grpc_server.write_stream_reply(reply))
    assert streamed == pb.ModelStreamInferResponse(infer_response=expected)
    error = pb.ModelStreamInferResponse(error_message="unknown model 'x'")
    assert grpc_server.write_stream_reply(grpc_server.Reply(error, [], whole=True)) == error.SerializeToString()

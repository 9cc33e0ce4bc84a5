"""Short fixed workloads (a tenth of a second or so) that tell whether this machine has changed.

A calibration stores the probe's time beside what it measured; at use the probe runs again, and a
difference of more than ``calibration_store.DRIFT`` means another machine (or the same one at another
clock) stands behind the cached figures. Each probe keeps the fastest of a few batches, so a passing
spell of other work does not read as a change.

- ``compute_probe_s``: one 3x3 convolution (32 channels, 32x32) in onnxruntime on one thread, the
  way a worker computes its layers (what ``local_calibration`` measures);
- ``message_probe_s``: a 64 KB message written into a socket pair and read back by the same thread:
  the system calls and copies a runtime message costs (what the runtime's calibration measures). Not
  between two threads: a ping-pong's time depends on where the scheduler puts them (18 to 45 us a
  round trip from one run to the next on a 2-core VM), too much for a 10% check; one thread's is
  steady within 1%.
"""

from __future__ import annotations

import socket
import statistics
import time

MESSAGE_BYTES = 65536


def compute_probe_s(repeats: int = 20, batches: int = 3) -> float:
    """Median time of one small convolution on one onnxruntime thread, the fastest of ``batches``."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
    shape = [1, 32, 32, 32]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
                               helper.make_node("Relu", ["y"], ["z"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    session.run(None, x)
    return min(statistics.median(_timed(lambda: session.run(None, x)) for _ in range(repeats))
               for _ in range(batches))


def message_probe_s(messages: int = 200, batches: int = 7) -> float:
    """Time to write one 64 KB message into a socket pair and read it back, the fastest batch's mean."""
    a, b = socket.socketpair()
    for end in (a, b):                       # room for a whole message (a small default would block), never hang
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MESSAGE_BYTES)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MESSAGE_BYTES)
        end.settimeout(5.0)
    payload = b"x" * MESSAGE_BYTES
    view = memoryview(bytearray(MESSAGE_BYTES))

    def batch() -> None:
        for _ in range(messages):
            a.sendall(payload)
            got = 0
            while got < MESSAGE_BYTES:
                got += b.recv_into(view[got:], MESSAGE_BYTES - got)

    try:
        return min(_timed(batch) for _ in range(batches)) / messages
    finally:
        a.close()
        b.close()


def _timed(work) -> float:
    t0 = time.perf_counter()
    work()
    return time.perf_counter() - t0

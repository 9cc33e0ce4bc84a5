"""Short fixed workloads (a tenth of a second or so) that tell whether this machine has changed.

A calibration stores the probe's time beside what it measured; at use the probe runs again, and a
difference of more than ``calibration_store.DRIFT`` means another machine (or the same one at another
clock) stands behind the cached figures. Each probe keeps the fastest of a few batches, so a passing
spell of other work does not read as a change.

- ``compute_probe_s``: one 3x3 convolution (32 channels, 32x32) in onnxruntime on one thread, the
  way a worker computes its layers (what ``local_calibration`` measures);
- ``message_probe_s``: a 64 KB message and a one-byte answer between two threads over a socket pair,
  the kernel and thread wake-ups a runtime message costs (what the runtime's calibration measures).
"""

from __future__ import annotations

import socket
import statistics
import threading
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


def message_probe_s(round_trips: int = 300, batches: int = 7) -> float:
    """Time of one 64 KB message and its one-byte answer between two threads, the fastest batch's mean."""
    a, b = socket.socketpair()
    payload = b"x" * MESSAGE_BYTES

    def answer() -> None:
        while True:
            got = 0
            while got < MESSAGE_BYTES:
                chunk = b.recv(MESSAGE_BYTES - got)
                if not chunk:
                    return
                got += len(chunk)
            b.sendall(b"k")

    peer = threading.Thread(target=answer, daemon=True)
    peer.start()

    def batch() -> None:
        for _ in range(round_trips):
            a.sendall(payload)
            a.recv(1)

    try:
        return min(_timed(batch) for _ in range(batches)) / round_trips
    finally:
        a.close()                      # the peer reads end of file and returns
        peer.join(timeout=1.0)
        b.close()


def _timed(work) -> float:
    t0 = time.perf_counter()
    work()
    return time.perf_counter() - t0

"""The wire: the start-up handshake refuses peers with another manifest; waits time out naming the peer."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.manifest import Edge, TensorSpec
from hetsplit.runtime.wire import LinkFailure, Wire, open_group, open_store

pytestmark = pytest.mark.timeout(60)


def two_wires(timeout_s: float = 2.0) -> tuple[Wire, Wire]:
    """Two gloo ranks in threads of this process, on 127.0.0.1."""
    store0 = open_store(0, 2, "127.0.0.1", 0, 20)
    groups = {}

    def join(rank, store):
        groups[rank] = open_group(store, rank, 2, "127.0.0.1", 20)

    t = threading.Thread(target=join, args=(1, open_store(1, 2, "127.0.0.1", store0.port, 20)))
    t.start()
    join(0, store0)
    t.join()
    return Wire(groups[0], "a", timeout_s), Wire(groups[1], "b", timeout_s)


def run_both(f0, f1):
    errors = {}

    def wrap(k, f):
        try:
            f()
        except Exception as exc:  # noqa: BLE001
            errors[k] = exc

    t = threading.Thread(target=wrap, args=(1, f1))
    t.start()
    wrap(0, f0)
    t.join()
    return errors


def test_handshake_accepts_matching_and_rejects_other_manifests():
    a, b = two_wires()
    x = TensorSpec("x", (2, 3), "float32")
    to_b, from_a = Edge("b", 1, (x,)), Edge("a", 0, (x,))
    assert run_both(lambda: a.handshake([], [to_b]), lambda: b.handshake([from_a], [])) == {}
    other = Edge("a", 0, (TensorSpec("x", (3, 2), "float32"),))
    errors = run_both(lambda: a.handshake([], [to_b]), lambda: b.handshake([other], []))
    assert isinstance(errors.get(1), RuntimeFailure) and "different manifests" in str(errors[1])


def test_tensors_arrive_intact_and_a_silent_peer_times_out():
    a, b = two_wires(timeout_s=1.0)
    x = TensorSpec("x", (4, 5), "float32")
    sent, got = np.arange(20, dtype=np.float32).reshape(4, 5), x.empty()
    errors = run_both(lambda: a.wait(a.post(Edge("b", 1, (x,)), [sent], sending=True), Edge("b", 1, (x,)), True),
                      lambda: b.wait(b.post(Edge("a", 0, (x,)), [got], sending=False), Edge("a", 0, (x,)), False))
    assert errors == {} and np.array_equal(sent, got)
    with pytest.raises(LinkFailure, match="device b: nothing arrived from a within 1 s") as info:
        b.wait(b.post(Edge("a", 0, (x,)), [got], sending=False), Edge("a", 0, (x,)), False)
    assert info.value.kind == "stall" and info.value.peer == "a"


def test_ready_returns_once_every_rank_is_there_and_names_a_wait_for_one_that_never_comes():
    a, b = two_wires(timeout_s=1.0)
    order: list[str] = []
    late = threading.Event()

    def b_late():                      # b sets up a while longer: a must not go on before b arrives
        late.wait(0.3)
        order.append("b ready")
        b.ready(["a", "b"])

    assert run_both(lambda: (a.ready(["a", "b"]), order.append("a past ready")), b_late) == {}
    assert order == ["b ready", "a past ready"]
    with pytest.raises(LinkFailure, match="device a: nothing arrived from b within 1 s") as info:
        a.ready(["a", "b"])            # b never comes
    assert info.value.peer == "b"


def test_pooled_buffers_keep_one_tensor_and_every_message_lands_in_them():
    a, b = two_wires()
    x = TensorSpec("x", (4, 5), "float32")
    to_b, from_a = Edge("b", 1, (x,)), Edge("a", 0, (x,))
    buf = b.views.add(x.empty())
    view = b.views.tensor(buf)
    assert b.views.tensor(buf) is view and view.data_ptr() == buf.ctypes.data
    for k in range(3):   # the same buffer, and its one tensor, take message after message
        sent = np.full((4, 5), k, dtype=np.float32)
        errors = run_both(lambda: a.wait(a.post(to_b, [sent], sending=True), to_b, True),
                          lambda: b.wait(b.post(from_a, [buf], sending=False), from_a, False))
        assert errors == {} and np.array_equal(buf, sent)
    other = x.empty()   # not registered: a view of its own each time, still sharing its memory
    assert b.views.tensor(other) is not b.views.tensor(other)
    assert b.views.tensor(other).data_ptr() == other.ctypes.data

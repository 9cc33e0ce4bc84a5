"""Which GPU pairs move their messages over NCCL (runtime.nccl.nccl_pairs): NCCL point-to-point has no
tags, so a pair's messages match in posting order, and a pair's two directions share one stream. Only a
one-way pair whose receiver posts in exactly the sender's order may use it; the rest go over gloo. Checked
on hand-built manifests (no GPU needed: it is a function of the manifest and the run's rounds)."""

from __future__ import annotations

from hetsplit.runtime.manifest import Manifest, Message, Segment, TensorSpec, WireTensor, Worker
from hetsplit.runtime.nccl import NcclLinks, nccl_pairs
from hetsplit.runtime.rounds import p2p_order, rounds, segment_lags


def manifest(segments: dict[int, list[tuple[list[int], list[int]]]], messages: list[tuple[int, int]]) -> Manifest:
    """Ranks 1.. with ``segments[rank]`` = [(recv ids, send ids), ...]; message k goes ``messages[k]``
    = (src rank, dst rank), one float32[4] tensor each."""
    names = {r: f"d{r}" for r in segments} | {0: "driver"}
    msgs = [Message(k, f"t{k}", names[a], a, names[b], b, (WireTensor(TensorSpec(f"t{k}", (4,), "float32"), f"t{k}"),),
                    tag=100 + k) for k, (a, b) in enumerate(messages)]
    workers = [Worker(0, "driver")] + [
        Worker(r, names[r], segments=[Segment(i, [], None, recv=list(rv), send=list(sd))
                                      for i, (rv, sd) in enumerate(segments[r])]) for r in sorted(segments)]
    return Manifest("m", {}, [], [], msgs, [], workers)


def orders(m: Manifest, a: int, b: int, inputs: int = 6) -> tuple[list, list]:
    lags = segment_lags(m)
    plan = {r: rounds([lags[r, s.index] for s in m.worker(r).segments], inputs, 1) for r in (a, b)}
    sent = [x for x in p2p_order(m, a, plan[a], True) if m.message(x[1]).dst_rank == b]
    got = [x for x in p2p_order(m, b, plan[b], False) if m.message(x[1]).src_rank == a]
    return sent, got


def test_a_one_way_pair_received_in_send_order_uses_nccl():
    # d1 -> d2: two messages per input from one segment, taken by one segment in the same order
    m = manifest({1: [([], [0, 1])], 2: [([0, 1], [])]}, [(1, 2), (1, 2)])
    assert nccl_pairs(m, [1, 2], 6, 1) == {(1, 2)}
    assert nccl_pairs(m, [2], 6, 1) == set()          # one GPU end only: gloo


def test_a_pair_with_messages_both_ways_stays_on_gloo():
    # d1 -> d2 -> d1 (a round trip per input): one shared NCCL stream, receives posted ahead would block it
    m = manifest({1: [([], [0]), ([1], [])], 2: [([0], [1])]}, [(1, 2), (2, 1)])
    assert nccl_pairs(m, [1, 2], 6, 1) == set()


def test_a_pair_whose_rounds_reorder_its_messages_stays_on_gloo():
    """d1 sends m1 then m2 each input; d2 takes m2 in its first segment (one crossing behind) and m1 in
    its second, which also waits for d3's relay of d1's output (two crossings behind). In rounds d2 posts
    m2 of input i before m1 of input i - 1 ... so by order alone NCCL would hand m1's bytes to m2."""
    #        0: d1->d3   1: d1->d2 (m1)   2: d1->d2 (m2)   3: d3->d2
    m = manifest({1: [([], [0, 1]), ([], [2])], 3: [([0], [3])], 2: [([2], []), ([1, 3], [])]},
                 [(1, 3), (1, 2), (1, 2), (3, 2)])
    sent, got = orders(m, 1, 2)
    assert sorted(sent) == sorted(got) and sent != got    # the same messages, posted in other orders
    assert nccl_pairs(m, [1, 2], 6, 1) == set()
    # the same pair when d2's second segment takes m1 straight from d1 (no detour): same order, NCCL
    direct = manifest({1: [([], [0]), ([], [1])], 2: [([0], []), ([1], [])]}, [(1, 2), (1, 2)])
    sent, got = orders(direct, 1, 2)
    assert sent == got and nccl_pairs(direct, [1, 2], 6, 1) == {(1, 2)}


def test_nccl_carries_only_its_pairs_peers():
    links = NcclLinks(None, {1: 0, 2: 1, 3: 2}, {2})
    assert links.carries(2) and not links.carries(3) and not links.carries(1)

"""Running a manifest's programs in one process (no transport): each rank's segments in an order its
messages allow, moving exactly the manifest's messages. What the worker processes compute, for checks
without processes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort


def run_inline(manifest, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model outputs the driver would receive for ``feed``."""
    local = {w.rank: {} for w in manifest.workers}
    sent = {m.id: m.arrays(feed) for m in manifest.messages if m.src_rank == 0}
    nxt = {w.rank: 0 for w in manifest.stages}
    while any(nxt[w.rank] < len(w.segments) for w in manifest.stages):
        ran = False
        for w in manifest.stages:
            while nxt[w.rank] < len(w.segments) and all(r in sent for r in w.segments[nxt[w.rank]].recv):
                seg, store = w.segments[nxt[w.rank]], local[w.rank]
                for r in seg.recv:
                    store.update((t.spec.name, a) for t, a in zip(manifest.messages[r].tensors, sent[r]))
                if seg.submodel:
                    sess = ort.InferenceSession(str(manifest.directory / seg.submodel),
                                                providers=["CPUExecutionProvider"])
                    names = [t.name for t in seg.outputs]
                    store.update(zip(names, sess.run(names, {t.name: store[t.name] for t in seg.inputs})))
                sent.update((s, manifest.messages[s].arrays(store)) for s in seg.send)
                nxt[w.rank] += 1
                ran = True
        assert ran, "the segments wait on each other"
    return {t.spec.name: a for m in manifest.messages if m.dst_rank == 0 for t, a in zip(m.tensors, sent[m.id])}

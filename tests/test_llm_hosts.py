"""``hetsplit generate --hosts``: a generation whose devices join from other hosts with ``hetsplit worker``.

Real runs: a pipeline into a tensor-parallel last stage whose two members join from "other hosts" on
loopback (workers started from the printed commands, the logits of both sent back and verified), and
the CLI across network-namespace hosts. A hostile driver's generation is refused by the worker field by
field (exit 2, a message naming what, nothing written outside its run folder, its claim freed), as
``test_hostile_driver`` does for a mapping.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hetsplit.errors import RuntimeFailure, UsageError
from hetsplit.estimate.llm import Stage
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.runtime import rendezvous
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.hosts import RUN_ID, HostMap
from hetsplit.runtime.llm_hosts import check_job_model, file_entries, hosted_generation, peer_job
from hetsplit.runtime.llm_pipeline import STEP_FIELDS, PipelineJob, check_stage_doc
from hetsplit.runtime.peer_config import PeerConfigError, published
from hetsplit.runtime.store_auth import StoreKey, put, set_sealed
from hetsplit.workflow.generate import GenerateOptions, generate
from llm_tiny import write_tiny_gguf
from nethosts import HETSPLIT, NetHosts, available, start_across
from test_hostile_driver import TOKEN, attacked
from test_llm_generate import local_cluster
from test_llm_tensor_parallel_run import uneven

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("hosts") / "three.gguf", seed=3, blocks=3)


def test_a_tensor_parallel_stage_whose_members_join_from_other_hosts_gives_the_unsplit_models_tokens(three, tmp_path):
    """cpu0 (here) computes block 0; cpu1 and cpu2, each a `hetsplit worker` started from the printed command
    with the token in its environment, compute blocks 1-2 and the head with uneven shares; cpu1 fetches the
    checkpoint from the driver, cpu2 reads its host's own copy (``--model``)."""
    workers: list[subprocess.Popen] = []

    own = tmp_path / "cpu2-copy" / three.name          # cpu2's host has its own copy; cpu1's fetches it
    own.parent.mkdir()
    shutil.copy(three, own)

    def announce(commands) -> None:
        for c in commands:
            assert TOKEN not in c.text() and c.token not in c.text()
            env = {**os.environ, "HETSPLIT_TOKEN": c.token}
            extra = ["--model", str(own)] if c.device == "cpu2" else []
            workers.append(subprocess.Popen([HETSPLIT, *c.argv[1:], "--run-dir", str(tmp_path / c.device), *extra],
                                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))

    last = Stage("cpu1", 1, 3, uneven(three, ["cpu1", "cpu2"], [20, 12], [9, 23]))
    try:
        r = generate(three, local_cluster(3), GenerateOptions(
            "the cat sat on", tokens=6, verify=True, timeout_s=30, plan=(Stage("cpu0", 0, 1), last),
            hosts="cpu1=127.0.0.1,cpu2=127.0.0.1"), announce=announce)
        codes = [w.wait(30) for w in workers]
    finally:
        for w in workers:
            w.kill()
    assert codes == [0, 0]
    assert (tmp_path / "cpu1" / "split" / "model" / three.name).read_bytes() == three.read_bytes()
    assert not (tmp_path / "cpu2" / "split" / "model").exists()
    assert r.verify["ok"] and r.verify["identical_tokens"] and r.verify["max_abs_logit_diff"] <= 1e-4
    assert r.measured.logits is not None and r.measured.logits.shape == (6, read_gguf(three).config.vocab)
    assert [s.device for s in r.measured.stages] == ["cpu0", "cpu1", "cpu2"]     # the remote reports came back
    assert all(s.compute_s > 0 for s in r.measured.stages)
    hops = r.measured.hops_s
    assert hops["cpu0->cpu1+cpu2"][1] > 0 and hops["cpu1->cpu0"][1] > 0 and hops["cpu1+cpu2 syncs"][1] > 0


def test_with_recover_a_run_across_hosts_goes_on_with_the_workers_that_stay(three, tmp_path):
    """cpu1 joins from another host with ``--stay``; cpu2, here, dies after its second step. The run re-plans
    over cpu0 and cpu1 (cpu0 cannot hold the model alone), cpu1's worker joins the run that goes on at the
    same address and token (nobody starts it again), and every token is the unsplit model's. Once the
    driver is gone the worker says so and ends (exit 0)."""
    from hetsplit.cluster.loader import cluster_from_dict

    size = read_gguf(three).stored_bytes()        # ~127 kB: cpu0 holds its first stage (~53 kB), not all (~135 kB)
    cluster = cluster_from_dict({"format": "hetsplit.cluster/1", "name": "hosts", "devices": [
        {"name": n, "kind": "cpu", "type": "local-cpu", "memory": f"{mem}B",
         "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}}
        for n, mem in (("cpu0", int(size * 0.7)), ("cpu1", 1 << 30), ("cpu2", 1 << 30))],
        "links": {"default": {"name": "loopback", "bandwidth": "1GB/s", "latency": "150us"}}})
    told: list[list[str]] = []
    workers: list[subprocess.Popen] = []
    log = tmp_path / "cpu1.log"

    def announce(commands) -> None:
        told.append([c.device for c in commands])
        if len(told) > 1:
            return                          # the worker of the first run stays for this one
        (c,) = commands
        assert c.device == "cpu1" and c.argv[-1] == "--stay"
        env = {**os.environ, "HETSPLIT_TOKEN": c.token}
        argv = [HETSPLIT, *c.argv[1:], "--run-dir", str(tmp_path / "cpu1"), "--timeout", "8"]
        workers.append(subprocess.Popen(argv, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT))

    try:
        r = generate(three, cluster, GenerateOptions(
            "the cat sat on", tokens=6, verify=True, timeout_s=30, recover=True, probe=False,
            plan=(Stage("cpu0", 0, 1), Stage("cpu1", 1, 2), Stage("cpu2", 2, 3)), hosts="cpu1=127.0.0.1",
            faults={"2": {"kind": "die", "after": 2}}), announce=announce)
        code = workers[0].wait(60)
    finally:
        for w in workers:
            w.kill()
    said = log.read_text()
    assert code == 0, said[-3000:]
    assert r.recovery is not None and r.recovery.device == "cpu2" and 1 <= r.recovery.tokens_before < 6
    assert "cpu1" in [d for s in r.plan.stages for d in s.devices] and "cpu2" not in r.plan.stages[0].devices
    assert told == [["cpu1"], ["cpu1"]]
    assert r.verify["ok"] and r.verify["identical_tokens"] and r.verify["max_abs_logit_diff"] <= 1e-4
    assert len(r.tokens) == 6
    assert said.count("finished; the driver reports") == 1 and "the run ended: device cpu1: lost the connection" in said
    assert "no new run from the driver" in said and "stopped, 1 run(s) finished here" in said


def test_with_recover_a_host_that_dies_mid_generation_is_named_and_the_run_goes_on_without_it(tmp_path):
    """cpu1's worker, on another host, is killed (its whole process group, as a host that dies) once the
    first tokens have streamed: the run ends naming cpu1, re-plans over the two devices here, rebuilds the KV
    cache and goes on, every token the unsplit model's."""
    import signal

    from hetsplit.cluster.loader import cluster_from_dict

    wide = write_tiny_gguf(tmp_path / "wide.gguf", seed=7, blocks=3, dim=256, ffn=1024)   # steps of a few ms
    size = read_gguf(wide).stored_bytes()
    cluster = cluster_from_dict({"format": "hetsplit.cluster/1", "name": "hosts", "devices": [
        {"name": n, "kind": "cpu", "type": "local-cpu", "memory": f"{mem}B",
         "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}}
        for n, mem in (("cpu0", int(size * 0.7)), ("cpu1", 1 << 30), ("cpu2", 1 << 30))],
        "links": {"default": {"name": "loopback", "bandwidth": "1GB/s", "latency": "150us"}}})
    workers: list[subprocess.Popen] = []
    streamed: list[str] = []

    def announce(commands) -> None:
        (c,) = commands
        env = {**os.environ, "HETSPLIT_TOKEN": c.token}
        argv = [HETSPLIT, *c.argv[1:], "--run-dir", str(tmp_path / "cpu1"), "--timeout", "8"]
        workers.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True))

    def on_text(text: str) -> None:
        streamed.append(text)
        if len(streamed) == 1:             # the first tokens are out: the host dies
            os.killpg(workers[0].pid, signal.SIGKILL)
            workers[0].wait(10)

    try:
        r = generate(wide, cluster, GenerateOptions(
            "the cat sat on", tokens=100, verify=True, timeout_s=30, recover=True, probe=False,
            plan=(Stage("cpu0", 0, 1), Stage("cpu1", 1, 2), Stage("cpu2", 2, 3)), hosts="cpu1=127.0.0.1"),
            on_text=on_text, announce=announce)
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
    assert r.recovery is not None and r.recovery.device == "cpu1", r.recovery
    assert 1 <= r.recovery.tokens_before < 100
    assert {d for s in r.plan.stages for d in s.devices} <= {"cpu0", "cpu2"}
    assert r.verify["ok"] and r.verify["identical_tokens"] and r.verify["max_abs_logit_diff"] <= 1e-4
    assert len(r.tokens) == 100


def test_with_devices_on_other_hosts_the_plan_is_led_from_this_one(three):
    """The first stage streams the tokens to the driver's host: with ``--hosts`` the planner keeps its leader
    here, even where a device elsewhere would be best alone."""
    from hetsplit.cluster.loader import cluster_from_dict
    from hetsplit.graph.llm.load import read_model
    from hetsplit.workflow.generate import PlanOptions, here_leaders, plan_generation

    cluster = cluster_from_dict({"format": "hetsplit.cluster/1", "name": "hosts", "devices": [
        {"name": n, "kind": "cpu", "type": n, "memory": "1GiB",
         "params": {"peak_macs": f"{s}e9/s", "mem_bandwidth": f"{s}GB/s", "power_active": "10W"}}
        for n, s in (("laptop", 1), ("desktop", 8))],
        "links": {"default": {"name": "lan", "bandwidth": "1GB/s", "latency": "150us"}}})
    hosts = HostMap.parse("desktop=10.0.0.2")
    assert here_leaders(cluster, hosts) == ("laptop",) and here_leaders(cluster, None) is None
    assert here_leaders(cluster, HostMap.parse("laptop=10.0.0.3,desktop=10.0.0.2")) is None
    model = read_model(three)
    free = plan_generation(model, cluster, PlanOptions(4, 4, probe=False))
    led = plan_generation(model, cluster, PlanOptions(4, 4, probe=False, leaders=here_leaders(cluster, hosts)))
    assert [s.device for s in free.stages] == ["desktop"]          # the fast device alone, elsewhere
    assert led.stages[0].device == "laptop"                        # led from here (alone, at these tiny sizes)


def test_the_token_is_printed_once_and_a_run_that_goes_on_says_who_joins_it(capsys):
    from hetsplit.cli.run_print import hooks
    from hetsplit.runtime.hosts import WorkerCommand, worker_argv

    announce = hooks(lambda _: None).announce
    cmd = WorkerCommand("cpu1", "10.0.0.2", worker_argv("10.0.0.1", 29500, "cpu1", 60, stay=True), "t0ken")
    announce([cmd])
    announce([cmd])
    err = capsys.readouterr().err
    assert err.count("t0ken") == 1 and err.count("--device cpu1 --timeout 60 --stay") == 2
    assert "the run goes on at the same address; the workers started with --stay join it" in err


WHY = available()


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=f"network namespaces unavailable: {WHY}")
def test_generate_across_namespace_hosts_streams_the_unsplit_models_tokens(three, tmp_path):
    """`hetsplit generate --hosts b=10.77.0.2` on host 0; b's worker runs the printed command on host 1."""
    cluster = tmp_path / "two.yaml"
    cluster.write_text(json.dumps({"format": "hetsplit.cluster/1", "name": "two-hosts", "devices": [
        {"name": n, "kind": "cpu", "type": "local-cpu", "memory": "1GiB",
         "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}} for n in ("a", "b")],
        "links": {"default": {"name": "lan", "bandwidth": "1GB/s", "latency": "150us"}}}))
    args = [str(three), "--cluster", str(cluster), "--prompt", "the cat sat on", "--tokens", "6", "--stages", "2",
            "--no-probe", "--verify", "--json", "--timeout", "30"]
    with NetHosts(2) as net:
        run = start_across(net, {"b": 1}, args, tmp_path, command="generate")
        code, out, err = run.wait(150)
    assert code == 0, err[-3000:]
    assert all(w.returncode == 0 for w in run.workers.values())
    doc = json.loads(out)
    assert doc["verify"]["ok"] and doc["verify"]["identical_tokens"]
    assert [s["device"] for s in doc["measured"]["stages"]] == ["a", "b"]
    assert doc["measured"]["hops_s"]["a->b"][1] > 0


def test_what_does_not_combine_with_hosts_is_refused_naming_the_flag(three):
    for opts, said in ((GenerateOptions("x", emulate_links=True, hosts="b=10.0.0.2"), "--emulate-links"),
                       (GenerateOptions("x", ssh=True), "--ssh"),
                       (GenerateOptions("x", hosts="b"), "DEVICE=HOST")):
        with pytest.raises(UsageError, match=said):
            opts.check_hosts()
    job = PipelineJob(str(three), ["a", "b"], [[0, 1], [1, 3]], 3, [[1, 2]], 2)
    with pytest.raises(UsageError, match="leads the first stage"):
        hosted_generation(job, HostMap.parse("a=10.0.0.2"), 100, None)
    with pytest.raises(UsageError, match="does not use"):
        hosted_generation(job, HostMap.parse("z=10.0.0.2"), 100, None)


# ---- a hostile driver's generation ---------------------------------------------------------------------

class FakeGenerationDriver:
    """Serves a generation's store as a driver would, each part replaceable by an attack: device b runs
    block 1 of a tiny 2-block model after a (never started) a, for two streams of their own prompts."""

    def __init__(self, gguf: Path):
        self.base = rendezvous.serve(0, TOKEN, 30)
        self.store = rendezvous.scoped(self.base, TOKEN)
        self.key = StoreKey.of(TOKEN)
        self.gguf = gguf
        self.job = PipelineJob("", ["a", "b"], [[0, 1], [1, 2]], 2, [[1, 2, 3], [4, 5]], 4)

    def honest_job(self) -> dict:
        return dataclasses.asdict(self.job)

    def publish(self, job: dict | None = None, names: list | None = None, program: bytes = b"generation",
                run_id: bytes = b"run-1") -> None:
        """``names``: the checkpoint's files as the driver lists them (a string: the tiny GGUF's size and digest
        under that name; anything else as it is)."""
        names = [self.gguf.name] if names is None else names
        put(self.store, self.key, "job", json.dumps(self.honest_job() if job is None else job).encode())
        [honest] = file_entries({self.gguf.name: self.gguf})
        entries = [{**honest, "name": n} if isinstance(n, str) else n for n in names]
        put(self.store, self.key, "model-files", json.dumps(entries).encode())
        for n in names:
            if isinstance(n, str):
                put(self.store, self.key, f"model/{n}", self.gguf.read_bytes())
        cfg = RunConfig("job.json", inputs=4, timeout_s=10, startup_timeout_s=10)
        put(self.store, self.key, "config", json.dumps(published(cfg, self.job, [1])).encode())
        set_sealed(self.store, self.key, "program", program)
        set_sealed(self.store, self.key, RUN_ID, run_id)
        set_sealed(self.store, self.key, "remote", json.dumps({"b": 1}).encode())

    def claims(self) -> int:
        return self.store.add("claim/b", 0)


@pytest.fixture
def driver(tmp_path_factory):
    d = FakeGenerationDriver(write_tiny_gguf(tmp_path_factory.mktemp("hostile-gen") / "tiny.gguf"))
    yield d
    d.store = d.base = None


@pytest.mark.parametrize("field, value, said", [
    ("model", "/etc/passwd", "names a model path"),
    ("run_as", "root", "does not take"),
    ("new_tokens", "4", "'new_tokens'"),
    ("new_tokens", True, "'new_tokens'"),
    ("prompts", [[1, 2], [1, -1]], "'prompts[1][1]'"),
    ("prompts", [1, 2], "'prompts[0]'"),                    # not a token list per stream
    ("prompts", [[1, 2], []], "'prompts[1]'"),
    ("prompts", [[1] * 65] * 65, "'prompts'"),              # over MAX_STREAMS
    ("prompts", [[1, 2], [1, 10_000]], "stream 1's prompt; the vocabulary has"),
    ("prompts", [[1], [1] * 125], "positions (the longest prompt"),    # 125 + 4 new tokens: over 128
    ("bounds", [[0, 1]], "'bounds'"),
    ("devices", ["a", 7], "'devices'"),
    ("shares", [None, {"kv_heads": "all"}], "share"),
    ("streams", 2, "does not take"),                         # the streams are the prompts
    ("executor", "tensorrt", "'executor'"),
    ("executor", ["torch"], "'executor'"),
    ("blocks", 3, "blocks"),
])
def test_a_job_field_out_of_bounds_or_of_the_wrong_type_is_refused_naming_it(driver, tmp_path, capsys, field, value,
                                                                             said):
    job = driver.honest_job()
    job[field] = value
    if field == "blocks":                  # a job consistent in itself, but not the checkpoint handed out
        job["bounds"] = [[0, 1], [1, 3]]
    driver.publish(job=job)
    err = attacked(driver, tmp_path, capsys)
    assert said in err and "refused" in err, err


@pytest.mark.parametrize("names", [["../tiny.gguf"], [".hidden.gguf"], ["model.sh"], ["a/b.safetensors"], []])
def test_a_checkpoint_file_name_that_is_not_plain_is_refused(driver, tmp_path, capsys, names):
    driver.publish(names=names)
    err = attacked(driver, tmp_path, capsys)
    assert "plain file name" in err or "1.." in err, err
    assert not (tmp_path / "tiny.gguf").exists()


def test_a_copy_of_the_checkpoint_that_is_not_the_drivers_is_refused_naming_the_file(driver, tmp_path, capsys):
    other = tmp_path / "mine" / driver.gguf.name
    other.parent.mkdir()
    write_tiny_gguf(other, seed=9)                  # same name and size, other weights
    driver.publish()
    err = attacked(driver, tmp_path, capsys, "--model", str(other))
    assert f"{driver.gguf.name} differ" in err


def test_a_list_of_checkpoint_files_without_sizes_and_digests_is_refused(driver, tmp_path, capsys):
    driver.publish(names=[{"name": "tiny.gguf"}])
    assert "a name, a size and a SHA-256" in attacked(driver, tmp_path, capsys)


def test_a_program_the_worker_does_not_know_is_refused(driver, tmp_path, capsys):
    driver.publish(program=b"shell")
    assert "does not know" in attacked(driver, tmp_path, capsys)


def test_a_run_id_over_its_bound_is_refused(driver, tmp_path, capsys):
    driver.publish(run_id=b"r" * 65)
    err = attacked(driver, tmp_path, capsys)
    assert "'run-id'" in err and "over the 64 accepted; refused" in err


def test_an_honest_job_round_trips_and_its_kv_caches_must_fit_the_hosts_memory(driver, tmp_path, monkeypatch):
    job = peer_job(driver.honest_job(), tmp_path / "mine.gguf", "w")
    assert job.model == str(tmp_path / "mine.gguf") and job.bounds == driver.job.bounds
    config = read_gguf(driver.gguf).config
    check_job_model(job, config, [1], "w")
    monkeypatch.setenv("HETSPLIT_MAX_MEMORY_GB", "1e-9")
    with pytest.raises(PeerConfigError, match="KV cache"):
        check_job_model(job, config, [1], "w")



def test_a_workers_report_that_is_not_step_records_of_numbers_is_refused_naming_its_device():
    """The driver's side: what a worker on another host reports is checked before the figures are read."""
    job = PipelineJob("m.gguf", ["a", "b"], [[0, 1], [1, 2]], 2, [[1, 2], [3]], 3)
    step = dict.fromkeys(STEP_FIELDS, 0.5)
    steps = [{**step, "stream": b, "tokens": n} for b, n in [(0, 2), (1, 1)] + [(0, 1), (1, 1)] * 2]
    check_stage_doc(job, 1, {"steps": steps})
    one_length = [{**s, "tokens": 1} for s in steps]           # stream 0's prompt fed as if 1 token long
    for bad in ({"steps": steps[:4]}, {"steps": [{**s, "compute_s": "fast"} for s in steps]}, {"steps": "x"},
                {"steps": steps, "peak_rss_bytes": -0.5}, {}, {"steps": one_length},
                {"steps": [{**s, "stream": 0} for s in steps]}, {"steps": [step] * 6}):
        with pytest.raises(RuntimeFailure, match="device b: its report") as e:
            check_stage_doc(job, 1, bad)
        assert e.value.device == "b"


def test_a_checkpoint_folder_with_a_file_name_a_worker_would_refuse_is_refused_on_the_driver(tmp_path):
    from hetsplit.runtime.llm_hosts import model_files

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"x")
    assert sorted(model_files(folder)) == ["config.json", "model.safetensors"]
    (folder / "config (1).json").write_text("{}")
    with pytest.raises(UsageError, match="rename it"):
        model_files(folder)

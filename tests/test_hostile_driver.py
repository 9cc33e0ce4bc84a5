"""A worker trusts only what it checked (issue 42): a hostile driver that speaks the store protocol itself
(a torch TCPStore on loopback, written to as a driver would) mounts each attack, and ``hetsplit worker``
refuses with exit 2 and a message naming the field, writes nothing outside its run folder, starts no
process and frees its device's claim."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hetsplit.cli.main import main
from hetsplit.errors import RuntimeFailure
from hetsplit.runtime import rendezvous
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.cpu_throttle import join_group
from hetsplit.runtime.hosts import RUN_ID
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.manifest import load_manifest
from hetsplit.runtime.peer_config import FORMAT, PeerConfigError, published, steps_per_input, worker_config
from hetsplit.runtime.split import split_model
from hetsplit.runtime.store_auth import CHUNK, StoreKey, put, set_sealed
from nethosts import HETSPLIT
from plan_kinds import make_case

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]
TOKEN = "ab" * 16
DEVICE = "b"


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """A pipeline over a, b, c split into sub-models (b is the device the attacked worker serves)."""
    d = tmp_path_factory.mktemp("hostile-driver")
    case = make_case("pipeline", d)
    split_model(case.plan, case.graph, case.model, d / "split")
    return d / "split"


class FakeDriver:
    """Serves a run's store and publishes what a driver publishes, each part replaceable by an attack."""

    def __init__(self, split_dir: Path, token: str = TOKEN):
        self.base = rendezvous.serve(0, token, 30)
        self.store = rendezvous.scoped(self.base, token)
        self.key = StoreKey.of(token)
        self.dir = split_dir
        self.manifest = load_manifest(split_dir)
        self.rank = next(w.rank for w in self.manifest.stages if w.device == DEVICE)

    def honest_config(self) -> dict:
        cfg = RunConfig(str(self.dir / "manifest.json"), inputs=4, timeout_s=10, startup_timeout_s=10,
                        threads={"a": 1, "b": 1, "c": 1}, kinds={"b": "cpu"})
        return published(cfg, self.manifest, [self.rank])

    def publish(self, manifest: dict | None = None, config: dict | None = None, remote=None,
                files: dict[str, bytes] | None = None, key: StoreKey | None = None, program: bytes = b"mapping",
                run_id: bytes = b"run-1") -> None:
        key = key or self.key
        doc = manifest or json.loads((self.dir / "manifest.json").read_text())
        put(self.store, key, "manifest", json.dumps(doc).encode())
        names = [s["submodel"] for w in doc["workers"] for s in w.get("segments", [])
                 if isinstance(s.get("submodel"), str)]
        for name in names:
            data = (files or {}).get(name)
            if data is None:
                path = self.dir / Path(name).name
                data = path.read_bytes() if path.is_file() else b"x"
            put(self.store, key, f"file/{name}", data)
        put(self.store, key, "config", json.dumps(self.honest_config() if config is None else config).encode())
        set_sealed(self.store, key, "program", program)
        set_sealed(self.store, key, RUN_ID, run_id)
        set_sealed(self.store, key, "remote", json.dumps({DEVICE: self.rank} if remote is None else remote).encode())

    def claims(self) -> int:
        return self.store.add(f"claim/{DEVICE}", 0)

    def segments(self, doc: dict) -> list[dict]:
        return doc["workers"][self.rank]["segments"]


def attacked(driver: FakeDriver, tmp_path: Path, capsys, *extra: str) -> str:
    """Run the worker against ``driver``; it must exit 2 with one message, no traceback, write only inside
    its run folder, start no process and leave its device unclaimed. Returns the message."""
    run_dir = tmp_path / "run"
    before = set(tmp_path.iterdir())
    argv = ["worker", "--join", f"127.0.0.1:{driver.base.port}", "--token", TOKEN, "--device", DEVICE,
            "--timeout", "10", "--run-dir", str(run_dir), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err, err
    assert set(tmp_path.iterdir()) - before <= {run_dir}, sorted(set(tmp_path.iterdir()) - before)
    assert not processes_of(run_dir)
    assert driver.claims() == 0, "a failed worker kept its device's claim"
    return err


@pytest.fixture
def driver(split):
    d = FakeDriver(split)
    yield d
    d.store = d.base = None


# ---- 1. only the fields a worker needs, each checked ----------------------------------------------------

def test_cgroups_naming_a_file_are_never_taken_and_the_file_is_untouched(driver, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    config = {**driver.honest_config(), "cgroups": {str(driver.rank): str(victim)}}
    driver.publish(config=config)
    err = attacked(driver, tmp_path, capsys)
    assert "cgroups" in err and "never takes" in err
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("field, value", [("faults", {"2": {"kind": "die", "after": 0}}), ("cpus", {"2": [0]}),
                                          ("manifest", "/etc/passwd"), ("addrs", {"2": "0.0.0.0"}),
                                          ("paces", {"2": [0.001, 0.001]})])
def test_what_names_the_worker_host_is_never_taken_from_a_peer(driver, tmp_path, capsys, field, value):
    driver.publish(config={**driver.honest_config(), field: value})
    assert f"sets {field}" in attacked(driver, tmp_path, capsys)


def test_an_unknown_field_is_refused_naming_it(driver, tmp_path, capsys):
    driver.publish(config={**driver.honest_config(), "run_as": "root"})
    assert "'run_as'" in attacked(driver, tmp_path, capsys)


@pytest.mark.parametrize("field, value", [
    ("inputs", 300_000_000), ("inputs", 3e8), ("inputs", True), ("inputs", 0), ("latency_inputs", 5),
    ("depth", 1_000_000), ("timeout_s", float("inf")), ("timeout_s", 1e300), ("timeout_s", 0),
    ("startup_timeout_s", float("nan")), ("startup_timeout_s", "60"), ("cpu_only", "yes"),
    ("threads", {"b": 100_000}), ("threads", {"b": 0}), ("threads", ["b"]), ("threads", {"zz": 1}),
    ("kinds", {"b": "tpu"}), ("delays_s", {"2": {"1": 1e9}}), ("delays_s", {"9": {}}),
])
def test_values_out_of_range_or_of_the_wrong_type_are_refused_naming_the_field(driver, tmp_path, capsys, field,
                                                                               value):
    driver.publish(config={**driver.honest_config(), field: value})
    err = attacked(driver, tmp_path, capsys)
    assert f"'{field}" in err or f"{field}." in err, err


def test_inputs_whose_bookkeeping_does_not_fit_in_memory_are_refused(driver, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HETSPLIT_MAX_MEMORY_GB", "0.01")
    driver.publish(config={**driver.honest_config(), "inputs": 10_000_000})
    assert "'inputs'" in attacked(driver, tmp_path, capsys)


@pytest.mark.parametrize("remote", [{"b": 99}, ["b"], {"b": "2"}, {"b": 1}, {}, "b", None])
def test_an_odd_remote_map_is_refused(driver, tmp_path, capsys, remote):
    driver.publish(remote=remote if remote is not None else {"b": None})
    assert "'remote' map" in attacked(driver, tmp_path, capsys)


def test_an_honest_drivers_configuration_round_trips_and_takes_nothing_of_the_host(split):
    d = FakeDriver(split)
    cfg = worker_config(d.honest_config(), d.manifest, [d.rank], steps=steps_per_input(d.manifest, [d.rank]), who="w", manifest_path="m.json", token=TOKEN,
                        master_addr="10.0.0.1", master_port=29500, addr="10.0.0.2", cores=4)
    assert (cfg.inputs, cfg.timeout_s, cfg.threads, cfg.kinds) == (4, 10.0, {"b": 1}, {"b": "cpu"})
    assert cfg.cgroups == {} and cfg.paces == {} and cfg.cpus == {} and cfg.faults == {} and cfg.manifest == "m.json"
    assert cfg.addrs == {str(d.rank): "10.0.0.2"} and cfg.launcher_serves
    many = worker_config({**d.honest_config(), "threads": {"b": 64}}, d.manifest, [d.rank], steps=steps_per_input(d.manifest, [d.rank]), who="w",
                         manifest_path="m", token=TOKEN, master_addr="h", master_port=1, addr="a", cores=4)
    assert many.threads == {"b": 4}                                   # at most this host's cores
    with pytest.raises(PeerConfigError, match="format"):
        worker_config({**d.honest_config(), "format": "x"}, d.manifest, [d.rank], steps=steps_per_input(d.manifest, [d.rank]), who="w", manifest_path="m",
                      token=TOKEN, master_addr="h", master_port=1, addr="a")
    assert d.honest_config()["format"] == FORMAT and "cgroups" not in d.honest_config()


# ---- 2. names are names ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["manifest.json", "/dev/zero", "/etc/passwd", "../escape.onnx", "sub/x.onnx",
                                  ".hidden.onnx", "config.json", "rank2.json", 5, ["a.onnx"]])
def test_a_sub_model_that_is_not_a_plain_onnx_file_name_is_refused(driver, tmp_path, capsys, name):
    doc = json.loads((driver.dir / "manifest.json").read_text())
    driver.segments(doc)[0]["submodel"] = name
    driver.publish(manifest=doc)
    err = attacked(driver, tmp_path, capsys)
    assert "sub-model" in err and "malformed manifest" in err, err
    assert not (tmp_path / "escape.onnx").exists()


def test_two_segments_naming_one_sub_model_are_refused(driver, tmp_path, capsys):
    doc = json.loads((driver.dir / "manifest.json").read_text())
    other = next(w for w in doc["workers"][1:] if w["rank"] != driver.rank)
    driver.segments(doc)[0]["submodel"] = other["segments"][0]["submodel"]
    driver.publish(manifest=doc)
    assert "more than one segment" in attacked(driver, tmp_path, capsys)


def test_a_sub_model_path_that_leaves_the_folder_is_refused_at_load(split, tmp_path):
    """Checked again where the ranks load it: a link planted in the folder does not lead out of it."""
    folder = tmp_path / "split"
    folder.mkdir()
    doc = json.loads((split / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps(doc))
    m = load_manifest(folder)
    w = next(w for w in m.stages if w.segments and w.segments[0].submodel)
    (folder / w.segments[0].submodel).symlink_to("/etc/hostname")
    with pytest.raises(RuntimeFailure, match="outside the manifest's folder"):
        m.submodel_path(w.rank, 0)


# ---- 3. sizes before bytes --------------------------------------------------------------------------------

def _header_only(driver: FakeDriver, name: str, nbytes: int) -> None:
    """A header declaring ``nbytes`` with no chunk behind it (a reader must refuse before asking for any)."""
    head = {"nbytes": nbytes, "chunks": -(-nbytes // CHUNK), "sha256": "00" * 32}
    driver.store.set(name, driver.key.seal(name, json.dumps(head).encode()))


def test_a_manifest_declared_over_100_mib_is_refused_before_its_bytes(driver, tmp_path, capsys):
    driver.publish()
    _header_only(driver, "manifest", 10**12)
    assert "'manifest' is declared as 1,000,000,000,000 bytes" in attacked(driver, tmp_path, capsys)


def test_a_config_declared_over_its_cap_is_refused(driver, tmp_path, capsys):
    driver.publish()
    _header_only(driver, "config", 200 << 20)
    assert "'config' is declared as" in attacked(driver, tmp_path, capsys)


def test_a_sub_model_over_the_cap_is_refused_and_the_claim_freed(driver, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HETSPLIT_MAX_INPUT_MB", "1")
    driver.publish()
    name = driver.manifest.worker(driver.rank).segments[0].submodel
    _header_only(driver, f"file/{name}", 3 << 30)
    err = attacked(driver, tmp_path, capsys)
    assert f"'file/{name}' is declared as" in err
    failed = driver.store.get(f"failed/{driver.rank}")              # the driver will name the worker's error
    assert "declared as" in driver.key.open(f"failed/{driver.rank}", failed, "t").decode()


def test_a_chunk_longer_than_declared_is_refused(driver, tmp_path, capsys):
    driver.publish()
    driver.store.set("config#0", b"x" * 100_000)
    assert "chunk 0 of 'config'" in attacked(driver, tmp_path, capsys)


# ---- 4. authenticated ----------------------------------------------------------------------------------

def test_values_not_sealed_with_the_run_token_are_refused(driver, tmp_path, capsys):
    driver.publish(key=StoreKey.of("not the token"))
    assert "not authenticated by this run's token" in attacked(driver, tmp_path, capsys)


def test_bytes_swapped_under_an_authentic_header_are_refused(driver, tmp_path, capsys):
    driver.publish()
    honest = json.dumps(driver.honest_config())
    swapped = json.dumps({**driver.honest_config(), "inputs": 7})       # as long as the honest one (4 -> 7)
    assert len(swapped) == len(honest)
    driver.store.set("config#0", swapped.encode())
    assert "do not match their authenticated digest" in attacked(driver, tmp_path, capsys)


def test_a_value_moved_under_another_name_is_refused(driver, tmp_path, capsys):
    driver.publish()
    driver.store.set("remote", driver.key.seal("other", json.dumps({DEVICE: driver.rank}).encode()))
    assert "'remote' is not authenticated" in attacked(driver, tmp_path, capsys)


# ---- 5, 6: failures free what they took; bounded waits ------------------------------------------------------

def test_a_device_named_twice_and_a_run_dir_that_is_a_file_are_refused(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    for extra, said in ((["--device", "b,b"], "names b twice"), (["--run-dir", str(f)], "is an existing file"),
                        (["--timeout", "inf"], "--timeout inf"), (["--timeout", "1e300"], "--timeout 1e+300")):
        argv = ["worker", "--join", "127.0.0.1:9", "--token", TOKEN, "--device", "b", *extra]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, err


def test_the_token_can_come_from_a_file_or_the_environment(driver, tmp_path, capsys, monkeypatch):
    driver.publish(config={**driver.honest_config(), "cgroups": {}})      # refused after the token is accepted
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    base = ["worker", "--join", f"127.0.0.1:{driver.base.port}", "--device", DEVICE, "--timeout", "10",
            "--run-dir", str(tmp_path / "run")]
    assert main(base + ["--token-file", str(token_file)]) == 2
    assert "sets cgroups" in capsys.readouterr().err
    monkeypatch.setenv("HETSPLIT_TOKEN", TOKEN)
    assert main(base) == 2
    assert "sets cgroups" in capsys.readouterr().err
    monkeypatch.delenv("HETSPLIT_TOKEN")
    assert main(base) == 2
    assert "--token-file" in capsys.readouterr().err


def test_the_cli_refuses_a_hostile_driver_with_exit_2_and_no_stack_dump(driver, tmp_path):
    """The real command, in a process of its own: exit 2, one line naming the field, no C++ or Python stack."""
    driver.publish(config={**driver.honest_config(), "cgroups": {str(driver.rank): str(tmp_path / "v")}})
    p = subprocess.run([HETSPLIT, "worker", "--join", f"127.0.0.1:{driver.base.port}", "--device", DEVICE,
                        "--timeout", "10", "--run-dir", str(tmp_path / "run")], capture_output=True, text=True,
                       timeout=100, env={**os.environ, "HETSPLIT_TOKEN": TOKEN})
    assert p.returncode == 2, p.stderr
    assert "cgroups" in p.stderr and "Traceback" not in p.stderr and "frame #" not in p.stderr, p.stderr
    assert not (tmp_path / "v").exists() and not processes_of(tmp_path / "run")


def test_join_group_writes_only_an_existing_hetsplit_cgroup_procs_file(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for path in (victim, tmp_path / "hetsplit-1-abc-r1" / "victim.txt", tmp_path / "other" / "cgroup.procs"):
        with pytest.raises(RuntimeFailure, match="not the cgroup.procs of a hetsplit cgroup"):
            join_group(str(path))
    with pytest.raises(RuntimeFailure, match="not by the run that started this process"):
        join_group(str(tmp_path / "hetsplit-1-abc-r1" / "cgroup.procs"))      # another run's group
    missing = tmp_path / f"hetsplit-{os.getppid()}-abc-r1" / "cgroup.procs"
    with pytest.raises(RuntimeFailure, match="cannot join"):
        join_group(str(missing))                                   # never created
    assert not missing.exists() and victim.read_text() == "precious\n"


@pytest.mark.parametrize("version, quota_file, lifted", [("v2", "cpu.max", "max\n"), ("v1", "cpu.cfs_quota_us", "-1\n")])
def test_release_group_lifts_only_its_own_groups_quota_and_creates_nothing(tmp_path, version, quota_file, lifted):
    """A rank done with its measured work lifts its own group's quota (fake cgroup trees of both versions);
    the same checks as joining: another run's group, or a file that is not a group's, is refused."""
    from hetsplit.runtime.cpu_throttle import release_group

    mine = tmp_path / f"hetsplit-{os.getppid()}-abc-r1"
    mine.mkdir()
    (mine / "cgroup.procs").write_text("")
    (mine / quota_file).write_text("1000 100000\n" if version == "v2" else "1000\n")
    release_group(str(mine / "cgroup.procs"))
    # written in place from its start, as a cgroup file takes it (a regular file keeps the old tail)
    assert (mine / quota_file).read_text().startswith(lifted) and sorted(p.name for p in mine.iterdir()) == sorted(
        ["cgroup.procs", quota_file])
    theirs = tmp_path / "hetsplit-1-abc-r1"
    theirs.mkdir()
    (theirs / quota_file).write_text("1000\n")
    with pytest.raises(RuntimeFailure, match="not by the run that started this process"):
        release_group(str(theirs / "cgroup.procs"))
    with pytest.raises(RuntimeFailure, match="not the cgroup.procs of a hetsplit cgroup"):
        release_group(str(tmp_path / "victim.txt"))
    assert (theirs / quota_file).read_text() == "1000\n"
    release_group(None)                                            # not throttled: nothing to do


# ---- 5. a worker that fails before it computes frees its claim; the driver names its error ----------------

def _run_across(tmp_path: Path, timeout: int):
    from nethosts import Loopback, start_across

    case = make_case("pipeline", tmp_path / "case")
    run = start_across(Loopback(), {"c": 1}, [str(case.plan_file), str(case.model), "-n", "3", "--timeout",
                                              str(timeout), "--json"], tmp_path, start_workers=False)
    return run, run.commands["c"]


def _blocked_run_dir(tmp_path: Path) -> Path:
    """A --run-dir where the worker cannot write c's sub-model (a folder stands at its name): it fails after
    claiming device c, before computing."""
    bad = tmp_path / "bad"
    (bad / "split" / "c-seg0.onnx").mkdir(parents=True)
    return bad


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_worker_that_fails_before_computing_frees_its_device_for_the_corrected_command(tmp_path):
    (tmp_path / "case").mkdir()
    run, argv = _run_across(tmp_path, 60)
    try:
        bad = subprocess.run([HETSPLIT, *argv[1:], "--run-dir", str(_blocked_run_dir(tmp_path))], capture_output=True,
                             text=True, timeout=120)
        assert bad.returncode == 2 and "cannot write" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert run.cli.poll() is None                           # the run waits on for a worker of c
        good = subprocess.run([HETSPLIT, *argv[1:]], capture_output=True, text=True, timeout=180)
        assert good.returncode == 0, good.stderr[-2000:]
        code, out, err = run.wait(120)
    finally:
        run.stop()
    assert code == 0, err[-2000:]
    assert json.loads(out)["verify"]["ok"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_driver_names_the_device_and_the_error_of_the_worker_that_failed(tmp_path):
    (tmp_path / "case").mkdir()
    # The driver reports at its start-up timeout, so the test waits it out: 20 s, eight times what the failing
    # worker takes to start, claim c and fail on an idle 2-core machine (2.4 s)
    run, argv = _run_across(tmp_path, 20)
    try:
        bad = subprocess.run([HETSPLIT, *argv[1:], "--run-dir", str(_blocked_run_dir(tmp_path))], capture_output=True,
                             text=True, timeout=120)
        assert bad.returncode == 2, bad.stderr
        code, _, err = run.wait(120)
    finally:
        run.stop()
    last = err.strip().splitlines()[-1]
    assert code == 2 and "device c: no worker joined" in last and "a worker tried and failed" in last, last
    assert "cannot write" in last, last


# ---- 6. run's own bounds -----------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, said", [
    (["-n", "1000000000000"], "--inputs 1000000000000: give at most"), (["--threads", "100000"], "--threads 100000"),
    (["--timeout", "inf"], "--timeout inf"), (["--timeout", "1e300"], "--timeout 1e+300"),
    (["--timeout", "nan"], "--timeout nan")])
def test_run_refuses_absurd_inputs_threads_and_timeouts_naming_the_flag(split, capsys, extra, said):
    from cli_checks import fails

    case = split.parent
    assert said in fails(["run", str(case / "pipeline.json"), str(case / "toy.onnx"), *extra], capsys)


def test_run_refuses_inputs_whose_bookkeeping_does_not_fit_in_memory(split, capsys, monkeypatch, tmp_path):
    from cli_checks import fails

    monkeypatch.setenv("HETSPLIT_MAX_MEMORY_GB", "0.01")
    case = split.parent
    err = fails(["run", str(case / "pipeline.json"), str(case / "toy.onnx"), "-n", "10000000", "--split-dir",
                 str(tmp_path / "s")], capsys)
    assert "--inputs 10,000,000: streaming that many inputs would need about" in err


def _worker(port: int, timeout: str = "3", *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([HETSPLIT, "worker", "--join", f"127.0.0.1:{port}", "--token", TOKEN, "--device", DEVICE,
                           "--timeout", timeout, *extra], capture_output=True, text=True, timeout=100)


@pytest.mark.parametrize("peer", ["silent", "pings only", "another run"])
def test_a_peer_that_is_not_this_run_is_left_within_the_timeout_before_torch_is_loaded(peer, capsys):
    """Before, torch's client waited forever on a silent peer, and its import (seconds on a small board) came
    first; now a plain socket speaks the store's handshake under --timeout before anything of torch loads."""
    import socket
    import sys

    from hetsplit.cli import main as cli_main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        if peer != "silent":
            _fake_store(s, rendezvous.digest("cd" * 16) if peer == "another run" else None)
        code = subprocess.run(
            [sys.executable, "-c", "import sys; from hetsplit.cli.main import main; c = main(sys.argv[1:]); "
             "print('torch' in sys.modules); sys.exit(c)", "worker", "--join", f"127.0.0.1:{s.getsockname()[1]}",
             "--token", TOKEN, "--device", DEVICE, "--timeout", "2"], capture_output=True, text=True, timeout=100,
            env={**os.environ, "PYTHONPATH": str(Path(cli_main.__file__).parents[2])})
    said = {"silent": "did not answer within 2 s", "pings only": "did not answer within 2 s",
            "another run": "it serves another run"}[peer]
    assert code.returncode == 2 and said in code.stderr and "Traceback" not in code.stderr, code.stderr
    assert code.stdout.strip() == "False", "torch was loaded before the peer was checked"


def test_a_worker_timeout_that_is_not_finite_positive_seconds_is_refused_naming_the_flag(capsys):
    for value in ("inf", "1e300", "-1", "0", "nan"):
        assert main(["worker", "--join", "127.0.0.1:9", "--token", TOKEN, "--device", "b", "--timeout", value]) == 2
        err = capsys.readouterr().err
        assert "--timeout" in err and "a week" in err and "Traceback" not in err, err


def _fake_store(sock, digest: str | None) -> None:
    """A peer that speaks the store protocol's handshake (validate, ping) and, with ``digest``, answers a check
    and a get of the run token's key with it; it never answers anything else."""
    import struct
    import threading

    def serve(conn) -> None:
        buf = b""
        while data := conn.recv(4096):
            buf += data
            while buf:
                query = buf[0]
                if query in (0, 13) and len(buf) >= 5:                  # validate, ping: 1 byte + a 32-bit number
                    value = struct.unpack("<I", buf[1:5])[0]
                    buf = buf[5:]
                    if query == 13:
                        conn.sendall(struct.pack("<I", value))
                elif query in (3, 5) and digest is not None and len(buf) >= 9:     # get, check (one key)
                    head = 9 if query == 3 else 17
                    if len(buf) < head:
                        break
                    size = struct.unpack("<Q", buf[head - 8:head])[0]
                    if len(buf) < head + size:
                        break
                    buf = buf[head + size:]
                    conn.sendall(b"\x00" if query == 5 else struct.pack("<Q", len(digest)) + digest.encode())
                else:
                    break

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def test_a_driver_that_takes_requests_and_never_replies_ends_the_worker_with_a_message(tmp_path):
    """torch's client waits forever for such a reply, where no signal handler runs; the worker's watchdog ends
    it with exit 2 and a message once no store call completes for --timeout (plus 5%)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        _fake_store(s, rendezvous.digest(TOKEN))           # the token checks out, then torch's calls stall
        p = _worker(s.getsockname()[1])
    assert p.returncode == 2, p.stderr[-2000:]
    assert "stopped answering for 3 s" in p.stderr and "Traceback" not in p.stderr and "frame #" not in p.stderr


# ---- 4, the driver's side: what a worker sends back is authenticated too ----------------------------------

@pytest.mark.parametrize("forged", ["beat", "report"])
def test_the_driver_refuses_a_beat_or_report_forged_without_the_token(split, forged):
    from hetsplit.runtime.hosts import HostMap, Hosted, mapping_handout

    manifest = load_manifest(split)
    hosts = HostMap({DEVICE: "127.0.0.1"})
    hosted = Hosted(manifest, hosts, mapping_handout(manifest, split / "manifest.json", sorted(hosts.remote_ranks(manifest))))
    cfg = RunConfig(str(split / "manifest.json"), inputs=2, timeout_s=10, startup_timeout_s=10, token=TOKEN)
    hosted.open(cfg)
    try:
        rank = next(iter(hosted.remote))
        stranger = rendezvous.scoped(hosted.base, TOKEN)            # a host that learnt the port and the prefix
        if forged == "beat":
            stranger.set(f"beat/{rank}", b"9" * 40)
        else:
            put(stranger, StoreKey.of("a guess"), f"report/{rank}", json.dumps({"ok": True}).encode())
        hosted.t_tick = 0.0
        hosted.tick()
        doc = hosted.docs()[rank]
        assert doc["ok"] is False and f"device {DEVICE}" in doc["error"] and "not authenticated" in doc["error"]
    finally:
        hosted.close({}, None)


# ---- 4: the token is printed once, never on a worker's command line ----------------------------------------

def test_the_driver_prints_the_token_once_and_no_worker_command_carries_it(split, capsys):
    import contextlib

    from hetsplit.cli.common import progress
    from hetsplit.cli.run_print import hooks
    from hetsplit.workflow.run import worker_announcer
    from hetsplit.runtime.hosts import HostMap, Hosted, mapping_handout

    manifest = load_manifest(split)
    shown = []
    hosts = HostMap({DEVICE: "127.0.0.1", "c": "127.0.0.1"})
    hosted = Hosted(manifest, hosts, mapping_handout(manifest, split / "manifest.json", sorted(hosts.remote_ranks(manifest))),
                    shown.extend)
    hosted.open(RunConfig(str(split / "manifest.json"), inputs=2, timeout_s=10, startup_timeout_s=10, token=TOKEN))
    try:
        assert shown and all("--token" not in c.argv and TOKEN not in c.text() for c in shown)
        with contextlib.ExitStack() as stack:
            worker_announcer(hooks(progress).announce, False, stack)(shown)
        err = capsys.readouterr().err
        assert err.count(TOKEN) == 1 and len(shown) == 2, err
    finally:
        hosted.close({}, None)


def test_a_command_run_over_ssh_reads_the_token_from_its_input_not_its_command_line():
    from hetsplit.runtime.hosts import WorkerCommand

    cmd = WorkerCommand("b", "host", ["sh", "-c", 'printf %s "$HETSPLIT_TOKEN"'], TOKEN)
    assert TOKEN not in cmd.remote_shell() and TOKEN not in repr(cmd)
    p = subprocess.run(["sh", "-c", cmd.remote_shell()], input=TOKEN + "\n", capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout == TOKEN, p


def test_a_checkpoint_given_to_a_mapping_worker_is_refused(driver, tmp_path, capsys):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"x")
    driver.publish()
    assert "--model is a generation's checkpoint" in attacked(driver, tmp_path, capsys, "--model", str(model))

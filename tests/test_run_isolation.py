"""Runs are isolated at the rendezvous (issue 26): each has a random token that every process presents;
a stranger is refused and does not disturb the run; two runs on one --port never hang; bad ports are
refused up front; every wait is bounded by --timeout."""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest

from hetsplit.cli.main import main
from nethosts import HETSPLIT, Loopback, start_across, start_worker
from plan_kinds import make_case

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return make_case("pipeline", tmp_path_factory.mktemp("isolation"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_stranger_worker_is_refused_and_the_run_goes_on(case, tmp_path):
    net = Loopback()
    run = start_across(net, {"c": 1}, [str(case.plan_file), str(case.model), "-n", "4", "--timeout", "60", "--json"],
                       tmp_path, start_workers=False)
    try:
        argv = run.commands["c"]
        stranger = argv.copy()
        stranger[stranger.index("--token") + 1] = "0" * 32
        p = subprocess.run([HETSPLIT, *stranger[1:]], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "refused" in p.stderr and "another run" in p.stderr, p.stderr[-2000:]
        assert run.cli.poll() is None                    # the run waits on, undisturbed
        run.workers["c"] = start_worker(net, 1, argv, tmp_path / "worker-c")
        run.workers["c2"] = start_worker(net, 1, argv, tmp_path / "worker-c2")      # a second worker for c
        code, out, err = run.wait(180)
    finally:
        run.stop()
    assert code == 0, err[-3000:]
    report = json.loads(out)
    assert report["verify"]["ok"] and {d["device"] for d in report["devices"]} == {"a", "b", "c"}
    codes = sorted(w.returncode for w in run.workers.values())
    assert codes == [0, 2], codes                      # whichever came second was refused
    logs = (tmp_path / "worker-c").read_text() + (tmp_path / "worker-c2").read_text()
    assert "device c already has a worker" in logs


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_two_runs_on_one_port_end_clearly_within_their_timeout(case, tmp_path):
    """The first run holds the port while it waits for device c's worker (idle, not streaming: it cannot
    end before the second meets it); the second, run here on the same --port, is refused within its
    timeout, naming the port; the first then runs to the end once its worker joins."""
    port, timeout = free_port(), 20
    args = [str(case.plan_file), str(case.model), "-n", "4", "--port", str(port)]
    net = Loopback()      # the first waits for its worker up to 120 s: the second run and the worker's start
    #                       took over 20 s together on a loaded machine
    first = start_across(net, {"c": 1}, args + ["--timeout", "120", "--run-dir", str(tmp_path / "1")], tmp_path,
                         start_workers=False)
    try:
        assert listening(port) and first.cli.poll() is None
        t0 = time.time()
        second = subprocess.run([HETSPLIT, "run", *args, "--timeout", str(timeout), "--run-dir", str(tmp_path / "2")],
                                capture_output=True, text=True, timeout=timeout + 120)
        assert second.returncode == 2, second.stderr[-1500:]
        assert f"port {port} is in use" in second.stderr, second.stderr[-1500:]
        assert time.time() - t0 < timeout + 30
        assert first.cli.poll() is None                  # the first waits on, undisturbed
        first.workers["c"] = start_worker(net, 1, first.commands["c"], tmp_path / "worker-c")
        code, _, err = first.wait(120)
    finally:
        first.stop()
    assert code == 0, err[-3000:]


@pytest.mark.parametrize("port", ["-5", "70000"])
def test_a_port_out_of_range_is_refused_up_front(case, capsys, port):
    t0 = time.time()
    with pytest.raises(SystemExit) as exit_:       # argparse's range check, before any work
        main(["run", str(case.plan_file), str(case.model), "--port", port])
    assert exit_.value.code == 2
    assert f"--port: {port} is out of range" in capsys.readouterr().err
    assert main(["worker", "--join", f"127.0.0.1:{port}", "--token", "t", "--device", "a"]) == 2
    assert "--join" in capsys.readouterr().err
    assert time.time() - t0 < 5


def test_a_worker_gives_up_within_its_timeout_when_no_run_answers(capsys):
    t0 = time.time()
    assert main(["worker", "--join", f"127.0.0.1:{free_port()}", "--token", "t", "--device", "a",
                 "--timeout", "2"]) == 2
    assert "cannot reach the rendezvous" in capsys.readouterr().err
    assert time.time() - t0 < 15

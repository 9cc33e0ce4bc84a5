"""Suite-wide: this machine is not measured in tests (the ``local`` cluster's devices keep their
roofline fallback, the runtime's costs the loopback link's); tests of the calibrations turn measuring
on with a fake, instant measurement. Set for the whole session, so module-scoped fixtures see it too.
The probes that check a cached calibration and the CPU counters that tell a busy machine are faked
too (a steady machine, nobody else on it): the tests of those set their own fakes."""

from collections.abc import Iterator

import pytest

PROBE_S = 1e-3          # what the faked machine probes take, always


@pytest.fixture(autouse=True, scope="session")
def _no_measuring_this_machine() -> Iterator[None]:
    from hetsplit.costs import local_calibration

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(local_calibration.ENV, "off")
        yield


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_in_the_sessions_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Temporary files and folders (this process's and its children's) go under the session's own folder,
    which pytest removes with its older sessions': a failed run keeps its folder for its logs, and the
    tests that make runs fail on purpose would otherwise leave them in the machine's temporary folder."""
    import tempfile

    tmp = tmp_path_factory.mktemp("tmp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(tmp))
        mp.setattr(tempfile, "tempdir", str(tmp))
        yield


@pytest.fixture(autouse=True)
def _a_steady_quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from hetsplit.costs import machine_load, machine_probe

    monkeypatch.setattr(machine_probe, "compute_probe_s", lambda: PROBE_S)
    monkeypatch.setattr(machine_probe, "message_probe_s", lambda: PROBE_S)
    monkeypatch.setattr(machine_load, "read_clock", lambda: machine_load.CpuClock(0.0, None, 0.0, 1))


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory):
    """A tiny Llama GGUF (2 blocks, random weights, every supported tensor type), written once."""
    from llm_tiny import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(autouse=True)
def _fresh_calibration_memos() -> None:
    from hetsplit.costs import calibration_store

    calibration_store.clear_memo()


# ---- the two tiers ---------------------------------------------------------------------------------
# `processes`: the test starts real processes (the runtime's workers, `hetsplit` subprocesses, worker
# pools, torch.distributed, profilers' co-loads); `slow`: it takes more than a few seconds in-process.
# `make test-fast` runs neither; `make test` runs everything. Marks are given here, by module (all its
# tests), by test function name (all its cases) or by one case's name, so that edits to the test files merge cleanly; a test may also carry
# `@pytest.mark.processes` / `@pytest.mark.slow` itself. A run that leaves `processes` out fails any
# test that starts a process anyway, naming it; a full run lists such unmarked tests at its end.

ALL = "*"
PROCESSES: dict[str, object] = {
    # whole modules: the runtime end to end, its faults, hosts, emulation, pools and lifetimes
    **dict.fromkeys([
        "test_cpu_throttle.py", "test_docs_examples.py", "test_emulation_plan_kinds.py", "test_here_accuracy.py",
        "test_hybrid_run.py", "test_leftovers.py", "test_netns_cleanup.py", "test_run_isolation.py",
        "test_run_lifetime.py", "test_runtime_cli.py", "test_runtime_faults.py", "test_runtime_hosts.py",
        "test_runtime_lblp.py", "test_runtime_mapping.py", "test_runtime_netem.py", "test_runtime_pool.py",
        "test_runtime_run.py", "test_runtime_zygote.py", "test_tensor_parallel_run.py", "test_llm_generate.py",
        "test_llm_docs.py", "test_llm_tensor_parallel_run.py", "test_llm_streams_run.py"], ALL),
    # single tests in otherwise in-process modules
    "test_cluster_local_calibration.py": {"test_run_recalibrate_measures_again"},
    "test_llm_ort.py": {"test_generate_on_onnxruntime_over_processes_gives_the_unsplit_models_tokens"},
    "test_hostile_input.py": {"test_a_long_simulation_ends_within_2_s_of_sigterm",
                              "test_an_infinite_budget_and_a_budget_that_finds_nothing_exit_2"},
    "test_input_shapes.py": {"test_symbolic_model_plans_splits_and_runs_with_only_the_shape_added"},
    "test_models_as_shipped.py": {"test_external_data_beside_the_graph_plans_profiles_and_runs",
                                  "test_fp16_model_counts_two_bytes_per_element_and_runs"},
    "test_profiler.py": {"test_co_load_helper_ends_when_its_parent_is_killed",
                         "test_co_load_helpers_run_pinned_and_are_reaped_even_on_interrupt",
                         "test_co_load_refuses_more_helpers_than_cores_and_a_helper_that_cannot_start",
                         "test_profile_with_co_load_records_it_and_leaves_nothing_behind"},
    "test_refine.py": {"test_refine_reorders_plans_whose_modelled_segment_cost_is_wrong",
                       "test_plan_refine_marks_measured_figures_and_plain_plan_says_modelled"},
    "test_report_html.py": {"test_report_renders_in_headless_chromium"},
    "test_reproduce_hierdse.py": {"test_a_real_measured_run_of_a_pipeline_plan",
                                  "test_a_terminated_emulated_run_removes_its_namespaces",
                                  "test_an_interrupted_search_leaves_nothing_behind",
                                  "test_explore_hierarchical_on_the_command_line"},
    "test_reproduce_hybrid.py": {"test_reproduce_hybrid_writes_claims_with_numbers"},
    "test_runtime_calibration.py": {"test_real_toy_runs_measure_positive_costs"},
    "test_runtime_executor.py": {"test_cli_run_passes_each_devices_kind_and_cpu_only_to_the_workers"},
    "test_runtime_rounds.py": {"test_a_ping_pong_mapping_runs_its_devices_on_different_inputs_at_once"},
    "test_runtime_split.py": {"test_a_v1_manifest_reads_as_its_program_and_runs",
                              "test_a_worker_reports_its_own_peak_memory_not_its_launchers"},
    "test_tensor_parallel.py": {"test_an_exported_encoder_runs_tensor_parallel_in_processes",
                                "test_plan_and_run_commands_run_a_tensor_parallel_plan"},
}
SLOW: dict[str, object] = {      # in-process, measured at several seconds each
    "test_fuzz_inputs.py": ALL,
    "test_one_figure.py": {"test_plan_and_simulate_one_input_print_the_same_figures"},
    "test_cli_plan.py": {"test_plan_runs_on_every_zoo_model[mobilebert]", "test_demo_compares_with_one_gpu"},
    "test_profile_torch_onnx.py": {"test_every_node_is_timed_in_its_layer_and_the_layers_add_up_to_the_model"},
    "test_hybrid_encodings.py": {"test_the_ga_finds_the_brute_force_front_of_a_small_problem"},
    "test_golden.py": {"test_figures_match_the_golden_file[tensor-parallel-decode]"},
    "test_reproduce_mcu.py": {"test_reproduce_mcu_quick_writes_every_claim_labelled"},
    "test_llm_gguf.py": {"test_smollm2_knows_the_capital_of_france"},
    "test_reproduce_hierdse.py": {"test_reproduction_with_a_fake_measurer_writes_curves_claims_and_results"},
}


def _listed(table: dict[str, object], item: pytest.Item) -> bool:
    """``item``'s module is in ``table`` whole, or names its function (all its cases) or this one case."""
    names = table.get(item.path.name, ())
    return names == ALL or item.name in names or getattr(item, "originalname", item.name) in names


def _check_listed(table: dict[str, object], modules: dict[str, object], what: str) -> None:
    """A name listed for a collected module that the module does not define is a stale mark: say so."""
    for file, module in modules.items():
        names = table.get(file, ())
        missing = [] if names == ALL else sorted(n for n in names if not hasattr(module, n.split("[")[0]))
        if missing:
            raise pytest.UsageError(f"tests/conftest.py {what}[{file!r}] names tests {file} does not have: {missing}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    modules = {}
    for item in items:
        if isinstance(item, pytest.Function):
            modules[item.path.name] = item.module
        if _listed(PROCESSES, item):
            item.add_marker(pytest.mark.processes)
        if _listed(SLOW, item):
            item.add_marker(pytest.mark.slow)
    _check_listed(PROCESSES, modules, "PROCESSES")
    _check_listed(SLOW, modules, "SLOW")
    _files_that_start_processes_first(items)


def _files_that_start_processes_first(items: list[pytest.Item]) -> None:
    """Order whole files so that those with a ``processes`` test come first, each file's tests in their
    order: the xdist workers take whole files in this order (the Makefile's ``--no-loadscope-reorder``;
    xdist's own order, most tests first, left the long few-test runtime files to one worker at the end:
    a fresh clone's suite took 7:36 that way, 6:55 this way)."""
    heavy = {item.path for item in items if item.get_closest_marker("processes") is not None}
    items.sort(key=lambda item: item.path not in heavy)      # stable: files and tests keep their order


def _processes_left_out(config: pytest.Config) -> bool:
    """The run was asked for ``-m "not processes ..."`` (the fast tier's spelling)."""
    return "not processes" in " ".join(str(config.getoption("markexpr", "") or "").split())


_STARTED: list[str] = []            # what the running test started (command lines)
_UNMARKED: dict[str, str] = {}      # test id -> the first thing it started, unmarked


def _record(what: str) -> None:
    _STARTED.append(what[:200])


def _install_spawn_watch() -> None:
    """Note every process started (subprocess, multiprocessing, fork, a rank forked by the runtime's zygote)
    in ``_STARTED``."""
    import multiprocessing.process
    import os
    import subprocess

    if getattr(subprocess.Popen._execute_child, "_tier_watch", False):
        return
    execute_child, start, fork = subprocess.Popen._execute_child, multiprocessing.process.BaseProcess.start, os.fork

    def watched_execute_child(self, args, *rest, **kw):
        _record(args if isinstance(args, (str, bytes)) else " ".join(map(str, args)))
        return execute_child(self, args, *rest, **kw)

    def watched_start(self):
        _record(f"multiprocessing process {self.name}")
        return start(self)

    def watched_fork():
        pid = fork()
        if pid:
            _record("os.fork()")
        return pid

    from hetsplit.runtime import zygote

    spawn = zygote.Zygote.spawn

    def watched_spawn(self, module, args, *rest, **kw):
        _record(f"forked rank: python -m {module} {' '.join(args)}")
        return spawn(self, module, args, *rest, **kw)

    watched_execute_child._tier_watch = True
    subprocess.Popen._execute_child = watched_execute_child
    zygote.Zygote.spawn = watched_spawn
    multiprocessing.process.BaseProcess.start = watched_start
    os.fork = watched_fork


def pytest_configure(config: pytest.Config) -> None:
    _install_spawn_watch()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    _STARTED.clear()
    return (yield)


UNMARKED_KEY = "started_a_process_unmarked"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.when == "teardown" and _STARTED and item.get_closest_marker("processes") is None:
        # carried on the report so that it reaches the summary from a pytest-xdist worker too
        report.user_properties.append((UNMARKED_KEY, _STARTED[0]))
    if (call.when == "call" and report.passed and _STARTED and item.get_closest_marker("processes") is None
            and _processes_left_out(item.config)):
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started a process ({_STARTED[0]}) but is not marked `processes`: "
                           f"list it in PROCESSES in tests/conftest.py (or mark it) so the fast tier leaves it out")
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, what in report.user_properties:
        if key == UNMARKED_KEY:
            _UNMARKED.setdefault(report.nodeid, str(what))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _UNMARKED:
        terminalreporter.section("tests that start processes but are not marked `processes`")
        for nodeid, what in _UNMARKED.items():
            terminalreporter.write_line(f"{nodeid}: {what}")

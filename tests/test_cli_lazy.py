"""The CLI registers in full only the command a command line names; the others appear by name and help."""

import argparse
import subprocess
import sys

import pytest

from hetsplit.cli import main as cli_main


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_command_s_help_is_read_without_importing_it():
    commands = cli_main.command_modules()
    assert {"plan", "run", "worker", "clusters"} <= set(commands)
    assert all(cli_main._summary(module, name) for name, module in commands.items())


@pytest.mark.parametrize("argv", [["--help"], [], ["--debug", "bogus"]])
def test_the_lazy_parser_s_help_is_the_full_parser_s(argv):
    assert cli_main.build_parser(argv).format_help() == cli_main.build_parser().format_help()


@pytest.mark.parametrize("argv", [["run", "x.json", "m"], ["--debug", "plan", "resnet8", "-c", "local"]])
def test_the_command_named_is_registered_in_full_and_no_other(argv):
    named = next(a for a in argv if not a.startswith("-"))
    full = _subparsers(cli_main.build_parser()).choices
    lazy = _subparsers(cli_main.build_parser(argv)).choices
    assert lazy.keys() == full.keys()
    for name, parser in lazy.items():
        same = parser.format_help() == full[name].format_help()
        assert same == (name == named), name
    args = cli_main.build_parser(argv).parse_args(argv)
    assert args.command == named and callable(args.func)


@pytest.mark.processes
def test_the_library_api_starts_without_torch():
    """``hetsplit.workflow`` (what every planning command imports), a typed run report and the CPU
    profiler's segment probe load neither torch nor the runtime's transport: a default argument built at
    import, and a helper imported from the driver, once pulled in torch.distributed, 2 s of every
    command's start."""
    code = ("import sys, hetsplit.workflow, hetsplit.runtime.report, hetsplit.runtime.cpu_segment_probe, "
            "hetsplit.runtime as r; "
            "print(sorted(m for m in ('torch', 'hetsplit.runtime.rendezvous', 'hetsplit.runtime.run') "
            "if m in sys.modules)); "
            "assert sorted(r.__all__) == sorted(r._HOME); [getattr(r, n) for n in r.__all__]; print('names ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["[]", "names ok"], done.stdout

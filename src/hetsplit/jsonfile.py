"""The one reader of input files (plans, plan sets, cluster YAML, profiles, AutoDiCE files, run files,
ONNX models): regular files only, a size cap, and errors that name the file and the position.

A path is checked with ``os.stat`` before it is opened, so a folder, a named pipe (which would block)
or a device file (``/dev/zero``, endless) is refused without reading it. Text files over
``max_input_bytes()`` (``HETSPLIT_MAX_INPUT_MB``, default 100 MiB) are refused, ONNX files over
protobuf's 2 GiB limit too. Bytes that are not UTF-8, JSON or YAML syntax errors, nesting deeper than
Python can follow and a key twice in one JSON object become the caller's error type, naming the file
and the line and column; no message quotes the file's lines.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hetsplit.errors import HetsplitError

MAX_INPUT_ENV = "HETSPLIT_MAX_INPUT_MB"
DEFAULT_MAX_INPUT_MB = 100
ONNX_MAX_BYTES = 2**31 - 1      # protobuf cannot parse a larger message
MAX_DEPTH = 100                 # brackets nested deeper are refused (or reported) with their position
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
# YAML: quoted scalars (a quote opens one only where a scalar starts), comments (after a space), brackets
_YAML_TOKENS = re.compile(r'(?<![^\s\[{,:])(?:"(?:[^"\\]|\\.)*"|\'(?:[^\']|\'\')*\')|(?<!\S)#[^\n]*|[\[\]{}]')


def max_input_bytes() -> int:
    """The size cap of a text input file: ``HETSPLIT_MAX_INPUT_MB`` MiB (default 100)."""
    raw = os.environ.get(MAX_INPUT_ENV, "")
    try:
        mb = float(raw) if raw else DEFAULT_MAX_INPUT_MB
    except ValueError:
        mb = DEFAULT_MAX_INPUT_MB
    return int(mb * 2**20) if mb > 0 else int(DEFAULT_MAX_INPUT_MB * 2**20)


def check_input(path: str | Path, error: type[HetsplitError], missing: str, limit: int | None = None) -> int:
    """The size of the regular file ``path``; ``error`` naming it when it is missing (``missing``, e.g.
    "no such plan file"), not a regular file, unreadable or over ``limit`` bytes (default: the text cap)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise error(f"{p}: {missing}") from None
    except OSError as exc:
        raise error(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        inside = p / "plans.json"   # `plan --out DIR` writes DIR/plans.json: a folder named like a file is common
        hint = f" (did you mean {inside}?)" if inside.is_file() else ""
        raise error(f"{p}: is a folder, not a file; give the file's path{hint}")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{p}: is not a regular file (a pipe, socket or device); give a file")
    cap = max_input_bytes() if limit is None else limit
    if st.st_size > cap:
        hint = f"; set {MAX_INPUT_ENV} to raise it" if limit is None else ""
        raise error(f"{p}: is {st.st_size / 2**20:,.1f} MiB, over the {cap / 2**20:,.0f} MiB accepted{hint}")
    if not os.access(p, os.R_OK):
        raise error(f"{p}: cannot be read (permission denied)")
    return st.st_size


def read_text(path: str | Path, error: type[HetsplitError], missing: str) -> str:
    """The UTF-8 text of the regular file ``path`` (checked by ``check_input``)."""
    p = Path(path)
    check_input(p, error, missing)
    cap = max_input_bytes()
    try:
        with open(p, "rb") as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise error(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > cap:
        raise error(f"{p}: grew past the {cap / 2**20:,.0f} MiB accepted while being read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _line_col(data, exc.start)
        raise error(f"{p}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}, column {col}); "
                    "save it as UTF-8") from None


def read_json(path: str | Path, error: type[HetsplitError], missing: str) -> Any:
    """The parsed JSON document at ``path``; ``error`` with ``missing`` (e.g. "no such plan file") if
    absent. A key twice in one object is refused."""
    p = Path(path)
    text = read_text(p, error, missing)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise error(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except _DuplicateKey as exc:
        raise error(f"{p}: the key {exc.key!r} appears twice in one object; keep one") from None
    except ValueError:   # an integer of more than 4,300 digits
        raise error(f"{p}: a number too long to read (over 4,300 digits); give a plain number") from None
    except RecursionError:
        where = _deepest(text, _JSON_TOKENS) or "more than Python follows"
        raise error(f"{p}: nested too deeply ({where}); a valid file nests a few levels") from None


def read_yaml(path: str | Path, error: type[HetsplitError], missing: str) -> Any:
    """The parsed YAML document at ``path``. A syntax error names the line and column and what the
    parser found there, never the file's lines."""
    p = Path(path)
    text = read_text(p, error, missing)
    deep = _deepest(text, _YAML_TOKENS)   # the YAML parser slows down with each level: check first
    if deep:
        raise error(f"{p}: nested too deeply ({deep}); a valid file nests a few levels")
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"
        what = f": {exc.problem}" if exc.problem else ""
        raise error(f"{p}: not valid YAML at {where}{what}; fix the syntax") from None
    except yaml.YAMLError:
        raise error(f"{p}: not valid YAML; fix the syntax") from None
    except ValueError:   # a value the YAML types cannot hold: a 4,300-digit integer, a 13th month
        raise error(f"{p}: a value cannot be read (a number too long, or a date that does not exist); "
                    "fix it") from None
    except RecursionError:
        raise error(f"{p}: nested too deeply (more than Python follows); a valid file nests a few levels") from None


def json_safe(value: Any) -> Any:
    """A JSON-friendly copy: tuples become lists, numpy scalars plain numbers, keys strings."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---- helpers ---------------------------------------------------------------------------------------

class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _line_col(data: bytes | str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset``."""
    if isinstance(data, bytes):
        return data.count(b"\n", 0, offset) + 1, offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return data.count("\n", 0, offset) + 1, offset - (data.rfind("\n", 0, offset) + 1) + 1


def _deepest(text: str, tokens: re.Pattern) -> str:
    """"more than N levels from line L, column C": where the brackets of ``text`` (``tokens`` finds
    them and the strings and comments to skip) first nest deeper than ``MAX_DEPTH``; "" if they never do."""
    depth = 0
    for m in tokens.finditer(text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line, col = _line_col(text, m.start())
                return f"more than {MAX_DEPTH} levels from line {line}, column {col}"
        elif tok in "]}":
            depth -= 1
    return ""

"""A worker forked while another thread of the supervisor is importing a module can still
import that module (worker_process._forget_import_locks)."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from awa_fast.runtime.work.worker_process import _forget_import_locks

ENTERED = threading.Event()
RELEASE = threading.Event()

SLOW_MODULE = """
import threading
from tests.runtime import test_fork_imports as test
if threading.current_thread() is not threading.main_thread():
    test.ENTERED.set()   # holding this module's import lock, mid-import
    test.RELEASE.wait()
VALUE = 42
"""


def test_a_child_forked_mid_import_imports_the_module_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "awa_fast_slow_import.py").write_text(SLOW_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    importer = threading.Thread(target=importlib.import_module, args=("awa_fast_slow_import",))
    importer.start()
    try:
        assert ENTERED.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: without the fix this import waits forever (SIGALRM)
            code = 1
            try:
                signal.alarm(5)
                _forget_import_locks()
                module = importlib.import_module("awa_fast_slow_import")
                code = 0 if module.VALUE == 42 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        RELEASE.set()
        importer.join(10)
        sys.modules.pop("awa_fast_slow_import", None)
    assert os.waitstatus_to_exitcode(status) == 0

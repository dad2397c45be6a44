"""What a new worker process closes of the descriptors it inherits from the supervisor."""

from __future__ import annotations

import os

from awa_fast.runtime.worker_process import close_sibling_pipes, file_id


def test_a_sibling_pipe_still_open_is_closed() -> None:
    read_fd, write_fd = os.pipe()
    try:
        close_sibling_pipes([(write_fd, file_id(write_fd))])
        assert not _is_open(write_fd)
    finally:
        os.close(read_fd)


def test_a_descriptor_number_reused_since_is_left_alone() -> None:
    """A sibling's pipe the supervisor closed already: its number now belongs to another
    pipe (a new worker's own job pipe), which must stay open."""
    old_read, old_write = os.pipe()
    stale = (old_write, file_id(old_write))
    os.close(old_read)
    os.close(old_write)
    new_read, new_write = os.pipe()
    reused = new_read if new_read == old_write else new_write
    assert reused == old_write  # the lowest free number is handed out again
    try:
        close_sibling_pipes([stale])
        assert _is_open(new_read) and _is_open(new_write)
    finally:
        os.close(new_read)
        os.close(new_write)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True

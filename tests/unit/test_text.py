"""edgebuild/text.py: dropping what libraries print, from several threads at once."""

from __future__ import annotations

import sys
import threading
import time

from edgebuild.text import python_output_dropped


def test_threads_that_drop_prints_at_once_leave_the_process_stdout_as_it_was() -> None:
    """Unguarded contextlib.redirect_stdout in two threads can restore each other's buffer and leave sys.stdout
    pointing at a dead one (without the lock this test leaves sys.stdout a StringIO): the farm's groups score
    mAP in parallel, and a command's last answer then vanished."""
    before_out, before_err = sys.stdout, sys.stderr
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        for _ in range(100):
            with python_output_dropped(stderr=True):
                print("noise")
                time.sleep(0.0005)  # a library working while its prints are dropped: the other threads run
                with python_output_dropped():  # nested in one thread: the lock is re-entrant
                    print("more noise")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sys.stdout is before_out and sys.stderr is before_err

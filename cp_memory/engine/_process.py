"""Engine processes: stop a process group by PID (TERM, wait, KILL), and the two guards that keep
an engine from outliving its owner (the pipe watchdog and ``setpriv --pdeathsig KILL``)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from ._watchdog import DISARM, sweep_semaphores, wait_group_gone

logger = logging.getLogger(__name__)

__all__ = ["Watchdog", "die_with_parent_prefix", "gpu_visible", "shutdown", "signal_group", "terminate"]


def gpu_visible() -> bool:
    """Whether an engine started now would see a GPU (NVIDIA or AMD device nodes, not hidden by an empty
    ``CUDA_VISIBLE_DEVICES``)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    return any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd"))


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the process group our child leads (its own session, so only it and its children)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def terminate(
    proc: subprocess.Popen[bytes], timeout: float, stragglers: bool = False, since: float | None = None
) -> None:
    """Stop ``proc`` (and any children it spawned in its process group) by PID: SIGTERM, wait,
    then SIGKILL; with ``stragglers``, SIGKILL what is left of the group and then remove the
    semaphores it leaked, created after ``since`` (:func:`._watchdog.sweep_semaphores`). Safe to call twice."""
    if proc.poll() is None:
        logger.debug("stopping engine pid %d", proc.pid)
        signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("engine pid %d ignored SIGTERM for %.0fs; killing it", proc.pid, timeout)
            signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout)
    if stragglers:  # e.g. SGLang scheduler / detokenizer processes once the leader is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        # the SIGKILL may have hit multiprocessing's resource tracker before it unlinked a semaphore
        if since is not None:
            wait_group_gone(proc.pid, timeout)  # only what no live process maps is swept
            leaked = sweep_semaphores(since)
            if leaked:
                logger.info("removed %d semaphore(s) engine pid %d leaked: %s", len(leaked), proc.pid, leaked)


def die_with_parent_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --`` when available: the kernel then kills the server the moment
    this Python process dies without running its cleanup (SIGKILL, SIGTERM without a handler).
    KILL, not TERM: llama-server's SIGTERM handler is not async-signal-safe (it can deadlock on a
    mutex the main thread holds, or be lost at the start of the server loop); KILL cannot be
    caught. The watchdog still sends TERM (then KILL) to the rest of the process group.

    Only from the main thread: the parent-death signal fires when the *thread* that forked the
    child exits, and the main thread only exits with the process.
    """
    if not sys.platform.startswith("linux"):
        return []
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []
    try:
        out = subprocess.run([setpriv, "--help"], capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if b"--pdeathsig" not in out.stdout + out.stderr:
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


class Watchdog:
    """The owner's side of ``_watchdog.py``: the process and the write end of its pipe.

    While this process lives it holds the only write end; when it dies by any means the kernel
    closes it and the watchdog stops the engine's process group (TERM, grace, KILL).
    """

    def __init__(self, proc: subprocess.Popen[bytes], pipe: IO[bytes]) -> None:
        self.proc = proc
        self._pipe: IO[bytes] | None = pipe

    @classmethod
    def start(cls, pgid: int, grace_s: float, workdir: Path | None, log: IO[bytes]) -> Watchdog | None:
        script = Path(__file__).with_name("_watchdog.py")
        if not sys.executable or not script.is_file():
            logger.warning(
                "no engine watchdog (no interpreter path or %s missing): engine "
                "pid %d may outlive this process if it is killed",
                script,
                pgid,
            )
            return None
        read_fd, write_fd = os.pipe()  # both non-inheritable (PEP 446)
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(script),
                    str(pgid),
                    f"{grace_s:g}",
                    *([str(workdir)] if workdir is not None else []),
                ],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # out of reach of a signal aimed at the owner's group
            )
        except OSError as exc:
            os.close(write_fd)
            logger.warning(
                "cannot start the engine watchdog (%s): engine pid %d may outlive this process if it is killed",
                exc,
                pgid,
            )
            return None
        finally:
            os.close(read_fd)
        return cls(proc, os.fdopen(write_fd, "wb", buffering=0))

    def disarm(self, timeout: float = 5.0) -> None:
        """The owner stopped the engine itself: let the watchdog exit without signalling.
        Safe to call twice."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            with contextlib.suppress(OSError):  # the watchdog may be gone already
                pipe.write(DISARM)
            pipe.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def shutdown(
    proc: subprocess.Popen[bytes],
    watchdog: Watchdog | None,
    timeout: float,
    stragglers: bool,
    since: float | None = None,
) -> None:
    """Graceful stop (TERM, wait, KILL), then release the watchdog. Safe to call twice."""
    try:
        terminate(proc, timeout, stragglers, since)
    finally:
        if watchdog is not None:
            watchdog.disarm()

"""One rank of a Slurm job step: ``python -m midtrain.launch.rank STATUS_DIR MODULE ARG...``.

Runs MODULE as ``__main__`` in this very process, as ``python -m MODULE ARG...`` would, after recording this
process's pid in ``STATUS_DIR/pid.<node>.<rank>`` (the batch script forwards USR1 to it: this process is the
trainer, not a shell around it), and records how it ended in ``STATUS_DIR/exit.<rank>``. The batch script
decides on those records whether to requeue (75: this rank's checkpoint is complete), not on srun's exit
code, which is that of whichever rank srun killed last. A rank killed by a signal records nothing.

Until the trainer installs its own USR1/TERM handler (and again after it restores this one), a USR1 or TERM
is recorded in ``STATUS_DIR/early_signal.<rank>`` instead of killing the rank without a trace: USR1 ends
the rank with 75 (nothing trained in this start is lost, so the requeued job resumes where it would have),
TERM with 143 (128 + 15), as the signal would have.
"""

from __future__ import annotations

import os
import runpy
import signal
import socket
import sys
from pathlib import Path


def _code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    return 1  # sys.exit("message"): Python prints it and exits 1


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)  # the batch script never reads half a record


EXIT_REQUEUE = 75  # the trainer's: checkpoint complete, requeue me


def _record_early_signals(status: Path, rank: str) -> None:
    def handle(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        _write(status / f"early_signal.{rank}", name)
        print(
            f"[midtrain] rank {rank}: {name} before the trainer's handler was installed; exiting",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(EXIT_REQUEUE if signum == signal.SIGUSR1 else 128 + signum)

    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, handle)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m midtrain.launch.rank STATUS_DIR MODULE [ARG ...]", file=sys.stderr)
        return 2
    status, module, args = Path(argv[0]), argv[1], argv[2:]
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    rank = os.environ.get("SLURM_PROCID", "0")
    status.mkdir(parents=True, exist_ok=True)
    _record_early_signals(status, rank)  # before the pid is published, which the USR1 forwarder reads
    _write(status / f"pid.{node}.{rank}", str(os.getpid()))
    sys.argv = [module, *args]
    code = 1
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = _code(e)
        raise
    finally:
        _write(status / f"exit.{rank}", str(code))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""One way to claim, stamp and reuse an output: a lease, a stamp and a state, decided by one policy table.

Every stage that writes an output directory claims it here first::

    with claim(out, "sft", want) as c:        # refused (OutputRefused) while another live process holds it
        if c.action == REUSE: return ...      # complete, same stamp
        ...write to temporary names...
        c.publish(tmp, final)                 # fencing: only while this claim still holds the lease
        c.complete()                          # the state; an exception leaves it failed with the reason

- The **lease** (OUTPUT/.lease.json, created with O_EXCL) records its holder (host, pid, Slurm job, start) and a
  token; a thread refreshes its mtime (the heartbeat). A second claimant is refused naming the holder; a lease
  whose holder is gone (its pid is dead on this host, or no heartbeat for ``stale_after`` seconds) is taken
  over with a warning. A process that lost its lease (a pool worker of a killed pack, a requeued job's
  predecessor) cannot publish: :meth:`Fence.publish` checks the token it started under before the rename.
- The **stamp** (:func:`make_stamp`) is formats.stamp's output_stamp plus the code that made it (midtrain's
  version and, from a checkout, its git commit); a stage whose policy says so compares the code too.
- The **state** (OUTPUT/output.json): running, complete or failed with the reason, beside the stamp.

:data:`POLICIES` is each stage's answer to "an output is there": reuse on an equal complete stamp, resume an
equal unfinished one or redo it, and for a different stamp redo or refuse naming the differing fields. Every
refusal is an :class:`OutputRefused`: the CLI prints its one line and exits :data:`EXIT_REFUSED`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midtrain.formats.stamp import NOTES, code_version, output_stamp, read_stamp, stale_details

log = logging.getLogger(__name__)

EXIT_REFUSED = 3  # an output claim refused: another holder, or an output of other inputs or settings
LEASE = ".lease.json"
RECORD = "output.json"
RUNNING, COMPLETE, FAILED = "running", "complete", "failed"
REUSE, RESUME, REDO, START = "reuse", "resume", "redo", "start"
STALE_AFTER = 120.0  # seconds without a heartbeat after which a lease held on another host is taken over
HEARTBEAT = 15.0  # seconds between heartbeats


class OutputRefused(RuntimeError):
    """An output cannot be claimed (held by another process, or made from other inputs or settings), or a
    holder that lost its lease tried to publish; the message is the one line the user reads."""


# -- stamps ----------------------------------------------------------------------------------------------------
def make_stamp(
    made: str, inputs: Mapping[str, Any], config: Mapping[str, Any], notes: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What an output is (formats.stamp.output_stamp) and the code that made it (``code``)."""
    return {**output_stamp(made, inputs, config, notes), "code": code_version()}


# -- the policy table ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    unfinished: str  # an equal stamp not complete (running under a dead holder, failed): RESUME or REDO
    differs: str  # another stamp: REDO (cleared by the stage) or refuse
    code: bool = False  # whether another midtrain version or commit is another output


POLICIES: dict[str, Policy] = {
    "prep": Policy(RESUME, "refuse"),
    "pack": Policy(RESUME, "refuse"),
    "train": Policy(RESUME, "refuse"),  # hours of work: never redone unasked
    "sft": Policy(RESUME, "refuse"),  # --overwrite makes it REDO
    "proxy": Policy(REDO, REDO, code=True),  # minutes, and a fixed scorer must not be reused
    "lm_eval": Policy(REDO, REDO, code=True),
    "swebench": Policy(RESUME, REDO, code=True),
    "report": Policy(REDO, REDO, code=True),
}


@dataclass(frozen=True)
class Decision:
    action: str  # START, REUSE, RESUME, REDO
    changes: list[str] = field(default_factory=list)  # FIELD: recorded OLD, now NEW (REDO of another stamp)


def compared(stamp: Mapping[str, Any], policy: Policy) -> dict[str, Any]:
    """The part of STAMP a policy compares: all but the notes, and the code only where it says so."""
    return {k: v for k, v in stamp.items() if k != NOTES and (policy.code or k != "code")}


def decide(
    stage: str, record: Mapping[str, Any] | None, want: Mapping[str, Any], where: Path, redo: bool = False
) -> Decision:
    """What STAGE does with the output at WHERE whose ledger RECORD (None: nothing there) is compared with WANT;
    REDO asked (--overwrite) turns a refusal into a redo. Raises OutputRefused naming the differing fields."""
    policy = POLICIES[stage]
    if record is None:
        return Decision(START)
    old = record.get("stamp")
    changes = (
        stale_details(compared(old, policy), compared(want, policy))
        if isinstance(old, Mapping)
        else [f"{RECORD}: no stamp (unreadable or cut short)"]
    )
    if not changes:
        if record.get("state") == COMPLETE:
            return Decision(REUSE)
        return Decision(policy.unfinished)
    if policy.differs == REDO or redo:
        return Decision(REDO, changes)
    raise OutputRefused(
        f"{where} holds a {stage} output of other inputs or settings ({'; '.join(changes)}); "
        "use another output directory, or --overwrite to redo it"
    )


# -- the ledger record -----------------------------------------------------------------------------------------
def read_record(out: str | Path) -> dict[str, Any] | None:
    """OUT's ledger record ({stamp, state, reason, holder, updated}), None when there is none."""
    return read_stamp(Path(out) / RECORD)


def write_json(path: Path, value: Any) -> None:
    """Write VALUE to PATH through a temporary name: a reader never sees half a file."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    tmp.replace(path)


def write_record(out: Path, stamp: Mapping[str, Any], state: str, reason: str | None = None) -> None:
    write_json(
        out / RECORD,
        {"stamp": dict(stamp), "state": state, "reason": reason, "holder": holder(), "updated": time.time()},
    )


# -- the lease -------------------------------------------------------------------------------------------------
def holder() -> dict[str, Any]:
    """This process: host, pid, Slurm job id (None outside Slurm) and the job's restart count (a requeue)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job": os.environ.get("SLURM_JOB_ID"),
        "restart": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
    }


def describe(h: Mapping[str, Any]) -> str:
    job = f", Slurm job {h['job']}" if h.get("job") else ""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h["start"])) if h.get("start") else "?"
    return f"pid {h.get('pid')} on {h.get('host')}{job}, since {since}"


def _pid_alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True  # another user's process, or unknown: not provably gone
    return True


def _gone(h: Mapping[str, Any] | None, age: float, stale_after: float) -> bool:
    """Whether the holder of a lease AGE seconds since its last heartbeat has gone."""
    if h is None:  # cut short while written: only its age tells
        return age > stale_after
    if h.get("host") == socket.gethostname() and not _pid_alive(h.get("pid")):
        return True
    me = holder()
    if h.get("job") and h.get("job") == me["job"] and int(h.get("restart") or 0) < me["restart"]:
        return True  # this job's own run before its requeue: Slurm ended it
    return age > stale_after


@dataclass(frozen=True)
class Fence:
    """What a process working under a lease (the holder, or its pool workers) checks before it publishes:
    picklable, so workers take it along."""

    path: str  # the lease file
    token: str

    def holds(self) -> bool:
        lease = read_stamp(self.path)
        return lease is not None and lease.get("token") == self.token

    def check(self) -> None:
        if not self.holds():
            now = read_stamp(self.path)
            by = describe(now) if now else "nobody (released)"
            raise OutputRefused(
                f"{Path(self.path).parent}: this process lost its lease (now held by {by}); not published"
            )

    def publish(self, src: str | Path, dst: str | Path) -> None:
        """Rename SRC to DST only while the lease is still this one's (the window between the check and the
        rename is one syscall; a taker waits ``stale_after`` first)."""
        self.check()
        os.replace(src, dst)


class Lease:
    """The exclusive claim on one output directory (see the module's docstring)."""

    def __init__(self, out: str | Path, what: str, stale_after: float = STALE_AFTER, heartbeat: float = HEARTBEAT):
        self.out, self.what = Path(out), what
        self.path = self.out / LEASE
        self.stale_after, self.interval = stale_after, heartbeat
        self.token = uuid.uuid4().hex
        self.fence = Fence(str(self.path), self.token)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> Lease:
        self.out.mkdir(parents=True, exist_ok=True)
        mine = {**holder(), "start": time.time(), "token": self.token, "what": self.what}
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_or_refuse()
                continue
            with os.fdopen(fd, "w") as fh:
                json.dump(mine, fh)
            break
        self._beat = threading.Thread(target=self._heartbeat, name=f"lease {self.out}", daemon=True)
        self._beat.start()
        return self

    def _take_over_or_refuse(self) -> None:
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return  # released meanwhile: try again
        other = read_stamp(self.path)
        if not _gone(other, age, self.stale_after):
            raise OutputRefused(
                f"{self.out}: {(other or {}).get('what', 'an output')} is being written by "
                f"{describe(other or {})} (lease {self.path}); wait for it or stop it"
            )
        # one taker wins the rename; the others find the file gone and race for O_EXCL again
        try:
            os.replace(self.path, self.path.with_name(f"{LEASE}.stale-{self.token}"))
        except FileNotFoundError:
            return
        self.path.with_name(f"{LEASE}.stale-{self.token}").unlink(missing_ok=True)
        log.warning(
            "%s: took over the lease of %s (its holder is gone: %.0f s without a heartbeat)",
            self.out,
            describe(other or {}),
            age,
        )

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.fence.holds():
                log.error("%s: the lease was taken over by another process; this one can no longer publish", self.out)
                return
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if self.fence.holds():
            self.path.unlink(missing_ok=True)


# -- the claim -------------------------------------------------------------------------------------------------
@dataclass
class Claim:
    out: Path
    stage: str
    want: dict[str, Any]
    decision: Decision
    lease: Lease

    @property
    def action(self) -> str:
        return self.decision.action

    @property
    def fence(self) -> Fence:
        return self.lease.fence

    def publish(self, src: str | Path, dst: str | Path) -> None:
        self.fence.publish(src, dst)

    def complete(self) -> None:
        self.fence.check()
        write_record(self.out, self.want, COMPLETE)


@contextmanager
def claim(
    out: str | Path, stage: str, want: dict[str, Any], redo: bool = False, stale_after: float = STALE_AFTER
) -> Iterator[Claim]:
    """Hold OUT's lease for STAGE's output stamped WANT while the block runs (see the module's docstring): the
    decision is made under the lease, the record says running until :meth:`Claim.complete`, and an exception
    records failed with its reason before it propagates. A REUSE leaves the record as it was."""
    out = Path(out)
    lease = Lease(out, stage, stale_after=stale_after).acquire()
    try:
        decision = decide(stage, read_record(out), want, out, redo)
        if decision.changes:
            log.warning("%s: another %s output was there (%s); redone", out, stage, "; ".join(decision.changes))
        c = Claim(out, stage, want, decision, lease)
        if decision.action != REUSE:
            write_record(out, want, RUNNING)
        try:
            yield c
        except BaseException as e:
            if decision.action != REUSE and lease.fence.holds():
                write_record(out, want, FAILED, f"{type(e).__name__}: {e}".splitlines()[0][:500])
            raise
    finally:
        lease.release()

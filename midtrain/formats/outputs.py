"""One way to claim, stamp and reuse an output: a lease, a stamp and a state, decided by one policy table.

An output is claimed here (prep, pack, the SFT probe, the proxy and lm-eval scores, a SWE-bench run and the report
do so whole; train holds the lease and asks :func:`decide` about its checkpoints)::

    with claim(out, "sft", want) as c:        # refused (OutputRefused) while another live process holds it
        if c.action == REUSE: return ...      # complete, same stamp
        ...write to temporary names...
        c.publish(tmp, final)                 # fencing: only while this claim still holds the lease
        c.complete()                          # the state; an exception leaves it failed with the reason

- The **lease** (OUTPUT/.midtrain.lock, linked into place whole) records its holder (host, pid and its start
  time, Slurm job and restart count, start) and a token; a thread refreshes its mtime (the heartbeat). A second
  claimant is refused naming the holder; a lease whose holder is gone (its pid ended on this host, the same
  Slurm job before a requeue, or no heartbeat for ``stale_after`` seconds) is taken over with a warning.
  A process that lost its lease (a pool worker of a killed pack, a requeued job's predecessor) cannot publish:
  :meth:`Fence.publish` checks the token it started under before the rename.
- The **stamp** (:func:`make_stamp`) is formats.stamp's output_stamp plus the code that made it (midtrain's
  version and, from a checkout, its git commit); a stage whose policy says so compares the code too.
- The **state** (OUTPUT/output.json): running, complete or failed with the reason, beside the stamp. A directory
  that holds files but no record is an output of unknown inputs: another stamp (an older midtrain's own stamp
  file, converted by its stage, stands in for the record where one is given).
- Only one process holds the lease; the other ranks of a multi-rank stage claim with ``hold=False``: the same
  decision from the record, read-only (they write no record, clear nothing and publish nothing).

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
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midtrain.formats.stamp import NOTES, code_version, output_stamp, read_stamp, stale_details

log = logging.getLogger(__name__)

EXIT_REFUSED = 3  # an output claim refused: another holder, or an output of other inputs or settings
LEASE = ".midtrain.lock"  # the lease file: one per output directory
RECORD = "output.json"
RUNNING, COMPLETE, FAILED = "running", "complete", "failed"
REUSE, RESUME, REDO, START = "reuse", "resume", "redo", "start"
STALE_AFTER = 120.0  # seconds without a heartbeat after which a lease held on another host is taken over
HEARTBEAT = 15.0  # seconds between heartbeats


class OutputRefused(RuntimeError):
    """An output cannot be claimed (held by another process, or made from other inputs or settings), or a
    holder that lost its lease tried to publish; the message is the one line the user reads. ``changes``: the
    differing fields, as :class:`Decision` lists them (a stage that says more of them reads them here)."""

    def __init__(self, message: str, changes: list[str] | None = None):
        super().__init__(message)
        self.changes = changes or []


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
        else [f"no {RECORD} stamp (none, unreadable or cut short: what its files were made from is unknown)"]
    )
    if not changes:
        if record.get("state") == COMPLETE:
            return Decision(REUSE)
        return Decision(policy.unfinished)
    if policy.differs == REDO or redo:
        return Decision(REDO, changes)
    raise OutputRefused(
        f"{where} holds a {stage} output of other inputs or settings ({'; '.join(changes)}); "
        "use another output directory, or --overwrite to redo it",
        changes,
    )


# -- the ledger record -----------------------------------------------------------------------------------------
def read_record(
    out: str | Path, before: Mapping[str, Any] | None = None, own: Collection[str] = ()
) -> dict[str, Any] | None:
    """OUT's ledger record ({stamp, state, reason, holder, updated}); without one, BEFORE (the record an older
    midtrain's stamp file implies), else {} (no stamp: compared as another output) when OUT holds any file but
    its lease and OWN (the top-level names a stage writes there before it claims: a run's scripts), else None
    (nothing there). OUT: a path, or an object-store one (midtrain.locations: kept as is)."""
    out = Path(out) if isinstance(out, str) else out
    record = read_stamp(out / RECORD)
    if record is not None:
        return record
    if before is not None:
        return dict(before)
    if out.is_dir() and any(not p.name.startswith((LEASE, RECORD)) and p.name not in own for p in out.iterdir()):
        return {}
    return None


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
def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid from its holder."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def holder() -> dict[str, Any]:
    """This process: host, pid (and its start time), Slurm job id (None outside Slurm) and restart count."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": _start_time(os.getpid()),
        "job": os.environ.get("SLURM_JOB_ID"),
        "restart": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
    }


def describe(h: Mapping[str, Any]) -> str:
    job = f", Slurm job {h['job']}" if h.get("job") else ""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h["start"])) if h.get("start") else "?"
    return f"pid {h.get('pid')} on {h.get('host')}{job}, since {since}"


def _pid_gone(h: Mapping[str, Any]) -> bool:
    """Whether the holder, a process of this host, has ended (its pid gone, or reused by another process)."""
    try:
        pid = int(h.get("pid", -1))
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, TypeError, ValueError, OverflowError):
        return False  # another user's live process, or unknown: not provably gone
    return h.get("pid_start") is not None and h.get("pid_start") != _start_time(pid)


def _gone(h: Mapping[str, Any] | None, age: float, stale_after: float) -> bool:
    """Whether the holder of a lease AGE seconds after its last heartbeat has gone: a process of this host that
    ended, this Slurm job's attempt before a requeue, or any holder silent for STALE_AFTER seconds."""
    if h is None:  # unreadable (written whole by a link, so not half-written): only its age tells
        return age > stale_after
    if h.get("host") == socket.gethostname() and _pid_gone(h):
        return True
    me = holder()
    if h.get("job") and h.get("job") == me["job"] and int(h.get("restart") or 0) < me["restart"]:
        return True  # this job's own run before its requeue: Slurm ended it
    return age > stale_after


def _take_over(path: Path, seen: dict[str, Any] | None) -> bool:
    """Remove the lease at PATH of a holder seen gone, unless it changed since (another claimant took it over
    first: under an flock of the directory, so two cannot both remove the stale lease and then each other's).
    False when there was nothing to remove (released meanwhile)."""
    import fcntl  # POSIX only; the lease is only taken on local file systems

    guard = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not path.exists() or read_stamp(path) != seen:
            return False
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(guard)  # releases the flock


def die_with_parent(_: object = None) -> None:
    """In a child process working for a holder (forked by multiprocess, or a Manager's server): SIGKILL when
    the parent dies (Linux prctl PR_SET_PDEATHSIG), so none goes on after its holder was killed."""
    import ctypes  # only here: the prctl call
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: nothing to set
        return
    if os.getppid() == 1:  # the parent died before the prctl took effect
        os._exit(1)


class OutputInUse(OutputRefused):
    """Another live process holds the output's lease."""


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
        rename is one syscall: a taker finds the holder gone only once it stopped heartbeating or ended)."""
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
        """Take the lease, or raise OutputInUse naming its live holder (a gone one's is taken over, warned)."""
        self.out.mkdir(parents=True, exist_ok=True)
        mine = {**holder(), "start": time.time(), "token": self.token, "what": self.what}
        # written aside, then hard-linked into place (fails when one exists): a reader never sees it half-written
        aside = self.path.with_name(f"{self.path.name}.{self.token}")
        aside.write_text(json.dumps(mine))
        try:
            while True:
                try:
                    os.link(aside, self.path)
                    break
                except FileExistsError:
                    self._take_over_or_refuse()
        finally:
            aside.unlink(missing_ok=True)
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
            raise OutputInUse(
                f"{self.out} is in use by `{(other or {}).get('what', '?')}` ({describe(other or {})}); wait for "
                f"it to finish or use another output (if that process is gone, delete {self.path})"
            )
        if _take_over(self.path, other):
            log.warning(
                "%s: taking over the lock of %s (`%s`), which is no longer running",
                self.out,
                describe(other or {}),
                (other or {}).get("what", "?"),
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
    lease: Lease | None  # None: a rank that follows the holder's decision (hold=False)

    @property
    def action(self) -> str:
        return self.decision.action

    @property
    def holds(self) -> bool:
        """Whether this process holds the lease: only it clears, writes the record and publishes."""
        return self.lease is not None

    def publish(self, src: str | Path, dst: str | Path) -> None:
        if self.lease is not None:
            self.lease.fence.publish(src, dst)

    def complete(self) -> None:
        if self.lease is not None:
            self.lease.fence.check()
            write_record(self.out, self.want, COMPLETE)


# a stage's own wording of a refusal of another stamp (OutputRefused, and the record compared): the error raised
Reword = Callable[[OutputRefused, Mapping[str, Any]], Exception]


def _decide(
    stage: str,
    out: Path,
    want: dict[str, Any],
    redo: bool,
    before: Mapping[str, Any] | None,
    reword: Reword | None,
    own: Collection[str] = (),
) -> Decision:
    record = read_record(out, before, own)
    try:
        return decide(stage, record, want, out, redo)
    except OutputRefused as e:
        if reword is None:
            raise
        raise reword(e, record or {}) from None


@contextmanager
def claim(
    out: str | Path,
    stage: str,
    want: dict[str, Any],
    redo: bool = False,
    stale_after: float = STALE_AFTER,
    hold: bool = True,
    before: Mapping[str, Any] | None = None,
    reword: Reword | None = None,
    own: Collection[str] = (),
) -> Iterator[Claim]:
    """Hold OUT's lease for STAGE's output stamped WANT while the block runs (see the module's docstring): the
    decision is made under the lease, the record says running until :meth:`Claim.complete`, and an exception
    records failed with its reason before it propagates. A REUSE leaves the record as it was. HOLD False: the
    same decision without the lease (another rank of the holder's job, or an output in an object store, which has
    no exclusive create for a lease); BEFORE, OWN: see :func:`read_record`; REWORD: raises what it returns for a
    refusal of another stamp (a stage's own message and exception: prep's ConfigError, exit 2)."""
    out = Path(out) if isinstance(out, str) else out
    if not hold:
        yield Claim(out, stage, want, _decide(stage, out, want, redo, before, reword, own), None)
        return
    lease = Lease(out, stage, stale_after=stale_after).acquire()
    try:
        decision = _decide(stage, out, want, redo, before, reword, own)
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

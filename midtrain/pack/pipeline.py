"""The `midtrain pack` flow: tokenize each input (cached per input and tokenizer) -> pack tasks -> manifest.

The stages run through the stage runner (midtrain.runner): locally in order, or on Slurm as dependent
job arrays (tokenize per input, then packing, then a one-task manifest job), submitted at once. Reruns skip finished
work: a tokenize cache whose documents did not change, pack tasks whose completion markers exist, and the
whole run when the manifest already records the same configuration and inputs. An output written with other
settings or inputs (finished or not) is refused unless ``overwrite`` (`--overwrite`) deletes it first.

Inputs and the output may be fsspec URLs (``s3://bucket/prefix``; see midtrain.locations): documents are read
through datatrove's data folders, the tokenize cache is written beside them, and the completion markers,
task stats and manifest live in the bucket. Files that must be local (memory-mapped token and shard files)
are copied to, or written in, a task's scratch folder under $TMPDIR and uploaded when the task is done.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from midtrain.formats.outputs import (
    COMPLETE,
    RECORD,
    REUSE,
    RUNNING,
    START,
    Claim,
    Fence,
    OutputInUse,
    OutputRefused,
    claim,
)
from midtrain.formats.run_split import RunSplit
from midtrain.formats.run_split import decide as decide_split
from midtrain.formats.run_split import read as read_split_file
from midtrain.formats.shard_reader import MANIFEST
from midtrain.formats.stamp import NOTES, digest, output_stamp, read_stamp, stale_fields
from midtrain.formats.tokenizer import load_tokenizer, resolve_tokenizer_file, tokenizer_hash
from midtrain.locations import as_path, ensure_dir, is_url, remove_tree, signature, write_text_atomic
from midtrain.pack.manifest import build_manifest, write_manifest
from midtrain.pack.mixture import heldout_fraction, heldout_rules
from midtrain.pack.pack_step import (
    PACK_VERSION,
    SPLIT_FILE,
    PackConfig,
    PackStep,
    cache_key,
    recorded_split,
    tokenized_prefixes,
)
from midtrain.pack.tokenize import TokenizeStep
from midtrain.runner import StageChain, naming_output, output_lock, unfinished_tasks

log = logging.getLogger(__name__)

DOC_GLOB = "*.jsonl*"


@dataclass
class TokenizerInfo:
    file: Path
    hash: str
    eos_token: str
    eos_id: int
    pad_id: int
    vocab_size: int

    def to_dict(self) -> dict:
        return {
            "file": str(self.file),
            "hash": self.hash,
            "eos_token": self.eos_token,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "vocab_size": self.vocab_size,
        }


def resolve_tokenizer(cfg: PackConfig) -> TokenizerInfo:

    file = resolve_tokenizer_file(cfg.tokenizer)
    tok = load_tokenizer(cfg.tokenizer if cfg.tokenizer is not None else file, shared=True)  # only read here
    eos = cfg.eos_token or tok.eos_token or ("<|endoftext|>" if "<|endoftext|>" in tok.get_vocab() else None)
    if eos is None or tok.convert_tokens_to_ids(eos) is None:
        raise ValueError(f"tokenizer {file}: no EOS token known; set eos_token=... (e.g. eos_token='</s>')")
    eos_id = tok.convert_tokens_to_ids(eos)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos_id
    return TokenizerInfo(
        file=file, hash=tokenizer_hash(file), eos_token=eos, eos_id=eos_id, pad_id=pad_id, vocab_size=len(tok)
    )


def documents_dir(prep_dir: str | Path) -> Path:
    d = as_path(prep_dir) / "documents"
    if not d.is_dir() or not any(d.glob(DOC_GLOB)):
        raise FileNotFoundError(f"{prep_dir}: no documents/{DOC_GLOB} (give output directories of `midtrain prep`)")
    return d


def produced_nothing(prep_dir: str | Path) -> bool:
    """A finished `midtrain prep` run whose curation dropped every document (its stats.json says so)."""
    stats = as_path(prep_dir) / "stats.json"
    if not stats.is_file() or any((as_path(prep_dir) / "documents").glob(DOC_GLOB)):
        return False
    data = json.loads(stats.read_text())
    return bool(data.get("complete")) and data.get("documents_out") == 0


def check_finished(prep_dir: str | Path) -> None:
    """Refuse an input that `midtrain prep` started and did not finish (prep.json but no complete stats.json):
    its documents are a part of the data. A documents directory not written by `midtrain prep` is taken as is."""
    d = as_path(prep_dir)
    marker = d / "prep.json"
    if not marker.exists():
        return
    try:
        if json.loads((d / "stats.json").read_text()).get("complete") is True:
            return
    except (OSError, ValueError):  # missing, or cut short by a kill
        pass
    try:
        stamp = json.loads(marker.read_text())
        command = stamp.get(NOTES, {}).get("command")  # recorded by `midtrain prep`, every flag kept
        if not command:  # a prep.json from before the command was recorded
            tasks = int(stamp.get("tasks") or 1)
            command = (
                f"midtrain prep {stamp['source']} --input {' '.join(shlex.quote(i) for i in stamp['inputs'])}"
                f" --output {shlex.quote(str(prep_dir))}"
                + (f" --tasks {tasks}" if tasks != 1 else "")
                + " (and the same key=value overrides and flags)"
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        command = f"midtrain prep ... --output {prep_dir}"
    left = [t for stage in sorted(d.glob("logs/*/")) for t in unfinished_tasks(stage)]
    failed = f"; unfinished on Slurm: {'; '.join(t.describe() for t in left[:10])}" if left else ""
    raise FileNotFoundError(
        f"{prep_dir}: unfinished `midtrain prep` output (no complete stats.json){failed}. Packing it "
        f"would pack part of its data; finish it by rerunning its command (`{command}`), or leave it out of "
        "--input"
    )


def fingerprint(prep_dir: str | Path) -> str:
    """The content id of an input's documents for the pack stamps: names, sizes and mtimes (ETags in an object
    store) of its document files (reading them would cost what tokenizing costs); the caches hold while they do."""
    files = sorted(documents_dir(prep_dir).glob(DOC_GLOB))
    return digest([(f.name, *signature(f)) for f in files])


def _stream_end(fh, gzipped: bool) -> tuple[bool, bytes]:
    """(the gzip stream reached its end marker, the last byte of the content), streamed in bounded memory."""
    import zlib

    last, pending = b"", b""
    d = zlib.decompressobj(wbits=31) if gzipped else None  # wbits=31: gzip framing
    while chunk := pending or fh.read(1 << 20):
        pending = b""
        if d is None:
            last = chunk[-1:]
            continue
        if d.eof:  # the next member of a multi-member gzip file
            d = zlib.decompressobj(wbits=31)
        out = d.decompress(chunk, 1 << 24)
        last = out[-1:] or last
        pending = d.unconsumed_tail or (d.unused_data if d.eof else b"")
    return (d is None or d.eof), last


def check_document_files(prep_dir: str | Path) -> None:
    """Refuse, naming it, a document file that is empty or cut short (a gzip stream without its end, a last
    line without its newline): tokenizing it would fail deep in a task, or pack part of its documents. One
    streamed pass over the files, before an input is tokenized (a small fraction of tokenizing's cost)."""
    for f in sorted(documents_dir(prep_dir).glob(DOC_GLOB)):
        if f.stat().st_size == 0:
            raise ValueError(
                f"{f}: empty document file (0 bytes; `midtrain prep` writes gzip even for no documents); "
                "re-run the prep that wrote it, or restore the file"
            )
        with f.open("rb") as fh:
            complete, last = _stream_end(fh, f.name.endswith(".gz"))
        if not complete:
            raise ValueError(
                f"{f}: truncated (its gzip stream ends before the end marker); re-run the prep that "
                "wrote it, or restore the file"
            )
        if last and last != b"\n":
            raise ValueError(
                f"{f}: its last record is cut short (no newline at the end); re-run the prep that "
                "wrote it, or restore the file"
            )


CACHE_DONE = "complete.json"  # a finished tokenize cache: its stamp (the documents it holds, the cache key)
CACHE_RUN = "tokenize.json"  # an unfinished one: the stamp of the run (documents, task count) its task outputs are of


def cache_stamp(documents: str, key: str, tok: TokenizerInfo | None = None, boundaries: dict | None = None) -> dict:
    """What a finished tokenize cache is: the tokens of these documents (their :func:`fingerprint`) under this
    cache key (tokenizer, EOS, boundaries); the tokenizer file and patterns are notes."""
    notes = {"tokenizer": tok.to_dict(), "boundaries": boundaries} if tok is not None else None
    return output_stamp("tokenize cache", {"documents": documents}, {"cache_key": key}, notes)


def tokenize_run_stamp(documents: str, tasks: int) -> dict:
    """What an unfinished tokenize cache's task outputs are of: these documents split over TASKS tasks."""
    return output_stamp("tokenize run", {"documents": documents}, {"tasks": tasks})


def _read_cache_stamp(path: Path) -> dict | None:
    """A cache's stamp, also as midtrain before the stamps wrote it ({"fingerprint", ...; "tasks"}): still read."""
    old = read_stamp(path)
    if old is None or "made" in old or "fingerprint" not in old:
        return old
    if path.name == CACHE_RUN:
        return tokenize_run_stamp(old["fingerprint"], int(old.get("tasks") or 0))
    return cache_stamp(old["fingerprint"], path.parent.name)  # the cache folder is named for its key


def tokenize_cache(prep_dir: str | Path, key: str, root: str | Path | None = None) -> Path:
    """PREP/tokenized/KEY, or under ROOT (``--cache-dir``: a prep directory that is read-only, or shared) in a
    folder named for the input's path, so two inputs of one name do not share a cache."""
    if root is None:
        return as_path(prep_dir) / "tokenized" / key
    name = str(prep_dir) if is_url(str(prep_dir)) else str(Path(prep_dir).resolve())
    return as_path(root) / f"{Path(name).name}-{hashlib.sha256(name.encode()).hexdigest()[:8]}" / key


def _cached(cache: Path, want: dict) -> bool:
    done = _read_cache_stamp(cache / CACHE_DONE)
    return done is not None and not stale_fields(done, want)


def _start_cache(cache: Path, name: str, done: dict, run: dict) -> None:
    """Make CACHE ready for a tokenize RUN (:func:`tokenize_run_stamp`): a finished cache of other documents
    (not DONE), or an unfinished one of another run (its finished tasks split the files otherwise: reusing them
    loses or duplicates documents), is started over; one of the same run keeps its finished tasks. Records RUN."""
    if cache.exists() and (cache / CACHE_DONE).exists():  # stale: _cached said so
        before = _read_cache_stamp(cache / CACHE_DONE)
        why = ", ".join(stale_fields(before, done)) if before else f"unreadable {CACHE_DONE}"
        log.info("tokenize %s: %s is stale (%s changed); retokenizing", name, cache, why)
        remove_tree(cache)
    elif cache.exists() and tokenized_prefixes(cache):
        earlier = _read_cache_stamp(cache / CACHE_RUN)
        changed = stale_fields(earlier, run) if earlier is not None else ["made"]
        if changed:
            log.warning(
                "tokenize %s: %s holds an unfinished tokenize run of %s; starting it over",
                name,
                cache,
                f"{earlier['config'].get('tasks')} tasks"
                if earlier is not None and changed == ["config.tasks"]
                else "other documents (or an older midtrain)",
            )
            remove_tree(cache)
    ensure_dir(cache)
    write_text_atomic(cache / CACHE_RUN, json.dumps(run))


@contextmanager
def _cache_lock(cache: Path, name: str, local: bool) -> Iterator[None]:
    """Hold the lock of the cache's folder (PREP/tokenized/.midtrain.lock) while this run tokenizes into it: a
    second pack of the same input waits, then finds the cache finished. Slurm stages run elsewhere: no lock."""
    if not local or is_url(str(cache)):
        yield
        return
    waited = False
    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(output_lock(cache.parent, f"midtrain pack (tokenize {name})"))
                break
            except OutputInUse as e:
                if not waited:
                    log.info("tokenize %s: waiting: %s", name, e)
                    waited = True
                time.sleep(0.2)
        yield


class ManifestStep(PipelineStep):
    """The last stage: merge the task stats into manifest.json (one task)."""

    name = "midtrain manifest"
    type = "📦 - PACKER"

    def __init__(
        self,
        cfg: dict,
        out_dir: str,
        cache_dirs: list[str],
        inputs: list[str],
        tokenizer: dict,
        run_key: str,
        stamp: dict | None = None,
        split: dict | None = None,
    ) -> None:
        super().__init__()
        self.cfg, self.out_dir, self.cache_dirs, self.inputs = cfg, out_dir, cache_dirs, inputs
        self.tokenizer, self.run_key, self.stamp, self.split = tokenizer, run_key, stamp, split or {}

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:

        cfg = PackConfig.from_dict(self.cfg)
        split = RunSplit(self.split, self.split.get("_file"))
        manifest = build_manifest(
            cfg, self.out_dir, self.cache_dirs, self.inputs, self.tokenizer, self.tokenizer["pad_id"], split
        )
        manifest["run_key"] = self.run_key
        if self.stamp is not None:
            manifest["stamp"] = self.stamp
        write_manifest(manifest, self.out_dir)
        return
        yield


class CacheStampStep(PipelineStep):
    """Marks a tokenize cache complete: writes its :func:`cache_stamp` (runs after every tokenize task)."""

    name = "midtrain tokenize stamp"

    def __init__(self, cache_dir: str, stamp: dict) -> None:
        super().__init__()
        self.cache_dir, self.stamp = cache_dir, stamp

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        write_text_atomic(as_path(self.cache_dir) / CACHE_DONE, json.dumps(self.stamp, indent=1))
        return
        yield


@dataclass
class PackResult:
    """What `pack()` did: the manifest (a local run, or a finished one), a Slurm submission, or a dry run."""

    manifest: dict | None = None  # manifest.json's content when the shards are there
    submitted: bool = False  # the chain was submitted to Slurm; manifest.json appears when it finishes
    scripts: dict[str, str] = field(default_factory=dict)  # dry run: per stage, what it would run


def pack_stamp(cfg: PackConfig, key: str, names: list[str], prints: dict[str, str], held_key: list) -> dict:
    """What a pack output is: the shards of these inputs' documents (their fingerprints), tokenized under cache
    key KEY, with the trace sets' held-out splits and the run split's sha, packed with CFG."""
    inputs: dict[str, object] = {"tokenizer": key, **{i: prints[i] for i in names}}
    if held_key:
        inputs["heldout"] = held_key
    settings = {**cfg.to_dict(), "pack_version": PACK_VERSION}
    notes = {k: settings.pop(k) for k in PACK_NOTES}
    return output_stamp("pack", inputs, settings, notes)


# Throughput knobs: how the same bytes are made (tasks at once, where they run), recorded, never identity.
PACK_NOTES = ("workers", "executor")


def run_key(want: dict, names: list[str]) -> str:
    """The digest of a pack stamp that names the output's run (its logs/KEY task markers; manifest run_key),
    computed as midtrain computed it before manifests held the stamp, so their outputs are still recognised."""
    held = want["inputs"].get("heldout") or []
    raw = [want["config"], want["inputs"]["tokenizer"], [want["inputs"][i] for i in names]] + held
    return hashlib.sha256(json.dumps(raw).encode()).hexdigest()[:16]


def older_record(out: Path, want: dict, names: list[str]) -> dict | None:
    """The ledger record (formats.outputs.read_record's BEFORE) of a pack output without output.json (an older
    midtrain's, or one in an object store, where no record is written): its manifest's stamp, complete (one
    without a stamp, or whose stamp held the throughput knobs as settings, as an older midtrain wrote it); else
    this run's unfinished tasks (logs/RUN_KEY), running; else None (read_record: another output when files are
    there)."""
    key = run_key(want, names)
    manifest = read_stamp(out / MANIFEST)
    if manifest is not None:
        stamp = manifest.get("stamp")
        if manifest.get("run_key") == key:
            stamp = want
        elif isinstance(stamp, dict):
            stamp = {**stamp, "config": {k: v for k, v in stamp.get("config", {}).items() if k not in PACK_NOTES}}
        else:  # from before stamps: its settings and inputs as the manifest lists them
            stamp = output_stamp("pack", dict.fromkeys(manifest.get("inputs") or []), manifest.get("config") or {})
        return {"stamp": stamp, "state": COMPLETE}
    return {"stamp": want, "state": RUNNING} if (out / "logs" / key).is_dir() else None


def _claim(out: Path, want: dict, names: list[str], overwrite: bool) -> AbstractContextManager[Claim]:
    """OUT claimed for this pack (formats.outputs, policy ``pack``): an unfinished run of this stamp resumes (its
    finished tasks are skipped), a finished one is reused; another run's output (other settings or inputs,
    finished or not) is refused unless ``overwrite``: its shards may be read by a running job, and mixing two
    runs' tasks would mix their data. An output that is not a pack's is refused, ``overwrite`` or not."""
    if not any((out / n).exists() for n in (MANIFEST, "logs", RECORD)) and any(
        (out / n).exists() for n in ("train", "valid")
    ):
        raise OutputRefused(
            f"{out} holds train/ or valid/ but is not a `midtrain pack` output; choose another --output"
        )

    def reword(refused: OutputRefused, record: Mapping) -> OutputRefused:
        fields = ", ".join(c.split(":")[0] for c in refused.changes)
        what = (
            f"a finished pack output made with other settings or inputs ({fields} differ)"
            if (out / MANIFEST).exists()
            else "an unfinished pack run with other settings or inputs"
        )
        return OutputRefused(
            f"{out} holds {what}; use a new --output, or --overwrite to delete it (shards a running job reads "
            "included)",
            refused.changes,
        )

    before = older_record(out, want, names)
    return claim(out, "pack", want, overwrite, hold=not is_url(str(out)), before=before, reword=reword)


def _prepare_output(c: Claim, out: Path, overwrite: bool) -> dict | None:
    """The finished manifest when OUT is complete for this claim's stamp (reused); else make OUT ready for it:
    with ``overwrite`` only what `midtrain pack` writes is removed, a resumed run keeps its finished tasks."""
    manifest = read_stamp(out / MANIFEST)
    if c.action == REUSE and manifest is not None and not overwrite:
        log.info("%s is complete for this configuration and these inputs; nothing to do", out)
        return manifest
    if c.action != START:
        log.info("%s: %s", out, "--overwrite: removing the earlier pack output" if overwrite else "resuming")
    for name in ("train", "valid", "logs", MANIFEST, SPLIT_FILE) if overwrite and c.action != START else ():
        p = out / name
        if p.exists():
            remove_tree(p) if p.is_dir() else p.unlink()
    ensure_dir(out)
    return None


def _slurm_logs(logging_dir: Path) -> str:
    return str(logging_dir.parent / "slurm" / logging_dir.name)


def _input_name(prep_dir: str) -> str:
    """A local input as given; a URL kept a URL (a pathlib Path would make s3://b/p into s3:/b/p)."""
    return prep_dir if is_url(prep_dir) else str(Path(prep_dir))


def pack(
    cfg: PackConfig,
    inputs: Sequence[str | Path],
    out_dir: str | Path,
    site=None,
    dry_run: bool = False,
    overwrite: bool = False,
    cache_dir: str | Path | None = None,
) -> PackResult:
    """Tokenize (cached) and pack ``inputs`` into ``out_dir``.

    Locally the stages run here and the result carries the manifest. With ``executor=slurm`` the stages are
    submitted as dependent job arrays configured by ``site`` (a ``midtrain.launch.site.SiteConfig``; None =
    $MIDTRAIN_SITE or defaults) and the result says so; ``dry_run`` gives their scripts instead of running or
    submitting anything. An output made with other settings or inputs is refused unless ``overwrite``, and
    one another run is writing (its lock, midtrain.runner.output_lock) is refused. ``cache_dir``: where the
    tokenize caches go instead of each input's PREP/tokenized/ (a read-only prep directory).
    """
    with naming_output(out_dir):
        return _pack(cfg, inputs, out_dir, site, dry_run, overwrite, cache_dir)


def _pack(
    cfg: PackConfig,
    inputs: Sequence[str | Path],
    out_dir: str | Path,
    site,
    dry_run: bool,
    overwrite: bool,
    cache_root: str | Path | None = None,
) -> PackResult:

    cfg.validate()
    out = as_path(out_dir)
    names = [_input_name(str(i)) for i in inputs]
    for i in names:
        check_finished(i)
    empty = [i for i in names if produced_nothing(i)]
    for i in empty:
        log.warning("pack: skipping %s: its prep run kept no documents (see its stats.json drops)", i)
    names = [i for i in names if i not in empty]
    if not names:
        raise FileNotFoundError(f"no documents to pack: every input's prep run kept none ({', '.join(empty)})")
    prints = {i: fingerprint(i) for i in names}  # a missing input fails here, before the tokenizer is built
    tok = resolve_tokenizer(cfg)
    key = cache_key(tok.hash, tok.eos_token, cfg.boundaries)
    cache_dirs = [str(tokenize_cache(i, key, cache_root)) for i in names]
    # the run's split (its file, else decided from these inputs; a trace set's record only without the file):
    # held-out instances never trained, the run's validation repositories, fix commits left out
    heldout = heldout_rules(names, record=not cfg.split)
    split = run_split(cfg, names, heldout)
    presplit = [h is not None and h["by"] == "presplit" for h in heldout]
    held_key = [[h["by"], h["heldout_groups"]] if h else None for h in heldout] if any(heldout) else []
    want = pack_stamp(cfg, key, names, prints, [*held_key, split.sha])
    if dry_run:
        return _stages(cfg, site, names, cache_dirs, out, prints, tok, key, want, split, presplit, None, True)
    with _claim(out, want, names, overwrite) as c:
        done = _prepare_output(c, out, overwrite)
        if done is not None:
            return PackResult(manifest=done)
        # local pool workers publish only under this lease; Slurm tasks outlive this process (no fence)
        fence = c.lease.fence if c.lease is not None and cfg.executor == "local" else None
        result = _stages(cfg, site, names, cache_dirs, out, prints, tok, key, want, split, presplit, fence, False)
        if result.manifest is not None:
            c.complete()
        return result


def _stages(
    cfg: PackConfig,
    site,
    names: list[str],
    cache_dirs: list[str],
    out: Path,
    prints: dict[str, str],
    tok: TokenizerInfo,
    key: str,
    want: dict,
    split: RunSplit,
    presplit: list[bool],
    fence: Fence | None,
    dry_run: bool,
) -> PackResult:
    """Run (or, DRY_RUN, give the scripts of) the tokenize, pack and manifest stages of a claimed output."""
    chain = StageChain(cfg.executor, site, cfg.workers, label="pack")
    for i, cache_dir in zip(names, cache_dirs):
        _tokenize_stage(
            chain, cfg, i, as_path(cache_dir), cache_stamp(prints[i], key, tok, cfg.boundaries), tok, dry_run
        )
    # the caches are ready: refuse a resume on another split before any task (an object-store output has no
    # exclusive create for the record: its tasks split as assign() says, as PackStep does)
    if not chain.on_slurm and not dry_run and not is_url(str(out)):
        recorded_split(out, [tokenized_prefixes(d) for d in cache_dirs], cfg.tasks)
    run = run_key(want, names)
    pack_logs, manifest_logs = out / "logs" / run, out / "logs" / f"{run}-manifest"
    chain.add(
        "pack",
        [PackStep(cfg.to_dict(), cache_dirs, str(out), str(tok.file), tok.pad_id, split.record, presplit, fence)],
        cfg.tasks,
        str(pack_logs),
        "midtrain-pack",
        _slurm_logs(pack_logs),
    )
    chain.add(
        "manifest",
        [ManifestStep(cfg.to_dict(), str(out), cache_dirs, names, tok.to_dict(), run, want, split_record(split))],
        1,
        str(manifest_logs),
        "midtrain-pack-manifest",
        _slurm_logs(manifest_logs),
    )
    if dry_run:
        return PackResult(scripts=chain.scripts())
    chain.run()
    if chain.on_slurm:
        log.info("submitted tokenize -> pack -> manifest to Slurm; %s appears when done", out / MANIFEST)
        return PackResult(submitted=True)
    return PackResult(manifest=json.loads((out / MANIFEST).read_text()))


def run_split(cfg: PackConfig, names: list[str], rules: list[dict | None]) -> RunSplit:
    """The split this pack applies: the run's file (``split=``), whatever the pack's own fractions; else one
    decided from these inputs alone (the larger of the pack's held-out fraction and a trace set's recorded
    one), with a warning when it holds anything out."""
    if cfg.split:
        split = read_split_file(cfg.split)
        if (cfg.valid_fraction, cfg.heldout_fraction) != (split.valid_fraction, split.heldout_fraction):
            log.info(
                "pack: applying the run's split %s (held-out %g, valid %g) over this pack's own fractions",
                cfg.split,
                split.heldout_fraction,
                split.valid_fraction,
            )
        return split
    fraction = heldout_fraction(cfg.heldout_fraction, rules)
    if fraction > 0 or cfg.valid_fraction > 0:
        log.warning(
            "pack: no split file (split=FILE, the run's split.json): held-out instances and validation "
            "repositories are decided from this pack's inputs alone; another pack or the probe of the run may "
            "hold out others"
        )
    record = decide_split(names, fraction, cfg.valid_fraction, "midtrain pack (its inputs alone)")
    return RunSplit(record, None)


def split_record(split: RunSplit) -> dict:
    """The split's record with its file (ManifestStep's: a plain dict travels by pickle)."""
    return {**split.record, "_file": split.path}


def _tokenize_stage(
    chain: StageChain, cfg: PackConfig, i: str, cache: Path, done: dict, tok: TokenizerInfo, dry_run: bool
) -> None:
    """Add input I's tokenize stages (its tasks, then the cache stamp DONE) to CHAIN, unless CACHE is finished
    for DONE; run locally, they run here and now, under the cache's lock."""
    from datatrove.pipeline.readers import JsonlReader

    local = not chain.on_slurm and not dry_run
    if _cached(cache, done):
        log.info("tokenize %s: cached in %s", i, cache)
        return
    check_document_files(i)
    n_files = len(list(documents_dir(i).glob(DOC_GLOB)))
    tasks = min(cfg.tokenize_tasks, n_files)
    documents = done["inputs"]["documents"]
    with _cache_lock(cache, i, local), naming_output(cache):  # a full disk here names the cache's disk
        if local and _cached(cache, done):  # another pack finished it while this one waited
            log.info("tokenize %s: cached in %s (by another pack)", i, cache)
            return
        if not dry_run:
            _start_cache(cache, i, done, tokenize_run_stamp(documents, tasks))
        log.info("tokenize %s: %d files in %d tasks -> %s", i, n_files, tasks, cache)
        # the completion markers are per task of a run of `tasks` tasks: keyed on the count too
        logs = cache / "logs" / f"{documents}-{tasks}t"
        stamp_logs = cache / "logs" / f"stamp-{documents}"
        chain.add(
            f"tokenize {i}",
            [
                JsonlReader(str(documents_dir(i)), glob_pattern=DOC_GLOB),
                TokenizeStep(str(cache), str(tok.file), tok.eos_token, cfg.boundaries),
            ],
            tasks,
            str(logs),
            f"midtrain-tokenize-{Path(i).name}",
            _slurm_logs(logs),
        )
        chain.add(
            f"tokenize stamp {i}",
            [CacheStampStep(str(cache), done)],
            1,
            str(stamp_logs),
            f"midtrain-tokenize-stamp-{Path(i).name}",
            _slurm_logs(stamp_logs),
        )
        if local:
            chain.run()
            if not tokenized_prefixes(cache):
                raise RuntimeError(f"tokenize {i}: no task output in {cache}; see {cache / 'logs'}")

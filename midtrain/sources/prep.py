"""`midtrain prep` as stages: source reader -> curation stages -> stats, on the local or Slurm executor.

Layout of an output directory DIR::

    DIR/raw/             the reader's documents (JSONL.gz, one file per task)
    DIR/rows/            table inputs of repos/commits: rows partitioned by repository (<bucket>/<task>.jsonl.gz)
    DIR/documents/       the curated documents (midtrain.formats.documents) - what `midtrain pack` reads
    DIR/work/            curation scratch space
    DIR/excluded/<step>/ what each step dropped on purpose, with its reason (source: the readers' drops)
    DIR/logs/<stage>/    datatrove logging dir per stage (completions/ = resume markers, stats/, logs/)
    DIR/logs/slurm/      sbatch scripts and Slurm logs (--executor slurm)
    DIR/stats.json       documents and bytes in/out, every drop and skip by reason, errors, resolved configs;
                         written last, it marks a complete run (`midtrain pack` refuses a DIR without it)
    DIR/prep.json        the resolved run settings and what identifies the inputs' content (git HEAD, file
                         sizes and mtimes, object ETags), and the command line as a note; a relaunch with other
                         settings or changed inputs is refused (no mixing, nothing added left out) unless
                         --overwrite (decided by formats.outputs, policy ``prep``: DIR/output.json its record)

A relaunch of the same command resumes: datatrove skips the tasks whose completion markers exist.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from midtrain.config import ConfigError
from midtrain.curate.stages import CurationConfig, curation_stages
from midtrain.formats.documents import read_jsonl, write_jsonl_gz
from midtrain.formats.outputs import (
    COMPLETE,
    LEASE,
    RECORD,
    RUNNING,
    START,
    Claim,
    OutputRefused,
    claim,
    make_stamp,
)
from midtrain.formats.stamp import NOTES, digest, read_stamp
from midtrain.locations import ensure_dir, is_url, location, remove_tree, write_text_atomic
from midtrain.runner import StageChain, naming_output, stage_stats, stat_total, step_label
from midtrain.sources.common import ReaderConfig, expand_inputs
from midtrain.sources.git import GitError, head_commit, is_git_repo
from midtrain.sources.specs import SOURCE_SPECS
from midtrain.sources.table_stages import table_source_stages
from midtrain.steps import stat_kinds

log = logging.getLogger("midtrain.prep")

STATS_FILE = "stats.json"
PREP_STAMP = "prep.json"  # the output's stamp: its settings at the top level (as readers expect), and
IDENTITY_KEY = "input_identity"  # what the inputs held (a rerun on changed inputs is refused)


def split_overrides(source: str, overrides: list[str]) -> tuple[list[str], list[str]]:
    """``<source>.field=v`` overrides go to the source's config, every other one to CurationConfig."""
    mine: list[str] = []
    curation: list[str] = []
    for o in overrides:
        (mine if o.split("=", 1)[0].startswith(source + ".") else curation).append(o)
    return [o[len(source) + 1 :] for o in mine], curation


def resolve_source(name_or_path: str) -> str:
    """'repos' or a pipeline file 'data_prep/repos.py' / 'mypipes/repos.py' -> 'repos' (the file's stem names the
    source, hence its reader config)."""
    name = Path(name_or_path).name.removesuffix(".py")
    if name not in SOURCE_SPECS:
        raise ConfigError(f"source: unknown source '{name_or_path}' (choose from {', '.join(SOURCE_SPECS)})")
    return name


def pipeline_file(name_or_path: str) -> str | None:
    """The pipeline file SOURCE names (``mypipes/repos.py``), absolute; None for a plain source name. Its
    ``pipeline()`` replaces data_prep/<source>.py's, so a user's edited copy is what runs."""
    if not name_or_path.endswith(".py"):
        return None
    path = Path(name_or_path).expanduser()
    if not path.is_file() and path.parent.name == "data_prep":  # the built-in file, named from another directory
        return None
    if not path.is_file():
        raise ConfigError(f"source: pipeline file {name_or_path} does not exist")
    return str(path.absolute())


def _pipeline_module(source: str, path: str | None) -> Any:
    if path is None:
        return importlib.import_module(f"data_prep.{source}")
    spec = importlib.util.spec_from_file_location(f"midtrain_user_pipeline_{source}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"source: cannot import pipeline file {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "pipeline", None)):
        raise ConfigError(
            f"source: pipeline file {path} defines no pipeline(inputs, cfg, raw_dir, report_dir, "
            "exclusion_dir) function"
        )
    return module


class EnsureRawFile(PipelineStep):
    """After the writer: an empty ``<rank>.jsonl.gz`` for a task that produced no document, so the next stage
    (a datatrove reader, which refuses an empty folder) sees an empty shard instead of failing the job."""

    name = "📭 empty-shard guard"
    type = "💽 - WRITER"

    def __init__(self, raw_dir: str):
        super().__init__()
        self.raw_dir = raw_dir

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        path = location(self.raw_dir) / f"{rank:05d}.jsonl.gz"
        if not path.exists():
            ensure_dir(path.parent)
            write_jsonl_gz(path, [])


def source_pipeline(
    source: str,
    inputs: list[str],
    cfg: ReaderConfig,
    raw_dir: str,
    report_dir: str,
    exclusion_dir: str | None = None,
    path: str | None = None,
) -> list[PipelineStep]:
    """The source stage as defined in data_prep/<source>.py (or the pipeline file ``path``), plus the
    empty-shard guard."""
    module = _pipeline_module(source, path)
    steps = module.pipeline(inputs, cfg, raw_dir=raw_dir, report_dir=report_dir, exclusion_dir=exclusion_dir)
    return steps + [EnsureRawFile(raw_dir)]


# -- stats ----------------------------------------------------------------------------------------------
def _count_output(documents_dir: Path) -> tuple[int, int, int]:
    """(documents, text bytes, compressed bytes) actually in DIR/documents."""
    docs = text_bytes = disk = 0
    for f in sorted(documents_dir.rglob("*.jsonl*")):
        disk += f.stat().st_size
        for _, row in read_jsonl(f):
            docs += 1
            text = row.get("text")
            text_bytes += len(text.encode()) if isinstance(text, str) else 0
    return docs, text_bytes, disk


def summarize(output: Path, stage_names: list[str], settings: dict) -> dict:
    """Merge every stage's stats and the reader's error reports into one stats.json dict."""
    stages = {name: stage_stats(output / "logs" / name) for name in stage_names}
    # each step family's stat names (midtrain.steps), the redaction step's count per kind of secret
    # (redacted_<kind>, beside its changed_redacted_doc) and the decontamination step's identification methods
    kinds = stat_kinds()
    kinds["changes"] += ("redacted_",)
    kinds["identity"] = ("identity_", "unidentified_repo")
    found: dict[str, dict[str, int]] = {k: {} for k in kinds}
    for name, steps in stages.items():
        for step in steps:
            for key, value in step.get("stats", {}).items():
                label = f"{name}/{key}" if name == "source" else f"{name}/{step_label(step)}/{key}"
                for kind, prefixes in kinds.items():
                    if key.startswith(prefixes):
                        found[kind][label] = found[kind].get(label, 0) + stat_total(value)
    drops, skips = found["drops"], found["skips"]
    reader = stages["source"][0].get("stats", {}) if stages.get("source") else {}  # step 0: the reader
    errors: list[dict] = []
    per_input: dict[str, dict[str, int]] = {}
    for f in sorted((output / "logs" / "source" / "reports").glob("*.json")):
        rep = json.loads(f.read_text())
        errors.extend(rep.get("errors", []))
        for path, counts in rep.get("inputs", {}).items():
            agg = per_input.setdefault(path, {"documents": 0, "errors": 0})
            agg["documents"] += counts["documents"]
            agg["errors"] += counts["errors"]
    docs_out, bytes_out, disk = _count_output(output / "documents")
    unreadable = sorted(p for p, c in per_input.items() if c["documents"] == 0 and c["errors"] > 0)
    return {
        "source": settings["source"],
        "complete": True,
        "documents_in": stat_total(reader.get("records")),
        "documents_read": stat_total(reader.get("documents")),
        "documents_out": docs_out,
        "bytes_read": stat_total(reader.get("bytes")),
        "bytes_out": bytes_out,
        "bytes_on_disk": disk,
        "drops": dict(sorted(drops.items())),
        "drops_total": sum(drops.values()),
        "skips": dict(sorted(skips.items())),
        "changes": dict(sorted(found["changes"].items())),
        # how each repository-derived document's repository was identified (decontamination step)
        "identity": dict(sorted(found["identity"].items())),
        "unidentified_repo": sum(v for k, v in found["identity"].items() if k.endswith("/unidentified_repo")),
        "errors": errors,
        "inputs": per_input,
        "unreadable_inputs": unreadable,
        "settings": settings,
        "stages": stages,
    }


class WriteStats(PipelineStep):
    """Last stage (one task): merges the stages' stats into DIR/stats.json - also at the end of a Slurm chain."""

    name = "📊 prep stats"
    type = "📊 - STATS"

    def __init__(self, output: str, stage_names: list[str], settings: dict):
        super().__init__()
        self.output = output
        self.stage_names = stage_names
        self.settings = settings

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        out = location(self.output)
        stats = summarize(out, self.stage_names, self.settings)
        write_text_atomic(out / STATS_FILE, json.dumps(stats, indent=2))
        if stats["unreadable_inputs"]:
            log.error(
                "prep %s: nothing could be read from: %s",
                self.settings["source"],
                ", ".join(stats["unreadable_inputs"]),
            )


# -- what the inputs hold ---------------------------------------------------------------------------------
def _identity(item: str, skip: str) -> dict:
    """What identifies one input's content: a git repository's HEAD, a file's size and mtime, a folder's files
    with theirs, an object store prefix's objects with their ETags. ``skip``: the output (never an input)."""

    if is_url(item):
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(item)
            found = fs.find(root, detail=True)
        except Exception as e:  # noqa: BLE001 - listed (and named) again by the reader
            return {"unlisted": f"{type(e).__name__}: {e}"}
        objects = [
            (k, v.get("size"), str(v.get("ETag") or v.get("LastModified") or v.get("mtime")))
            for k, v in sorted(found.items())
        ]
        return {"objects": len(objects), "digest": digest(objects)}
    p = Path(item)
    if not p.exists():
        return {"missing": True}
    if is_git_repo(p):
        try:
            return {"git_head": head_commit(p)}
        except GitError as e:
            return {"git_error": str(e)[:200]}
    if p.is_file():
        st = p.stat()
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    entries: list[tuple[str, int, int]] = []
    for dirpath, dirnames, filenames in os.walk(p):
        dirnames[:] = sorted(d for d in dirnames if str(Path(dirpath) / d) != skip)
        for name in sorted(filenames):
            f = Path(dirpath) / name
            try:
                st = f.stat()
            except OSError:
                continue
            entries.append((str(f.relative_to(p)), st.st_size, st.st_mtime_ns))
    return {"files": len(entries), "digest": digest(entries)}


def input_identity(inputs: list[str], output: str) -> dict[str, dict]:
    """Per input (a .lst file's listed paths included), what identifies its content (see :func:`_identity`)."""
    items = [i for i in inputs if is_url(i)] + [str(p) for p in expand_inputs(i for i in inputs if not is_url(i))]
    skip = output if is_url(output) else str(Path(output).absolute())
    return {i: _identity(i, skip) for i in items}


def _changed_inputs(old: dict[str, dict], new: dict[str, dict]) -> list[str]:
    def say(d: dict | None) -> str:
        if d is None:
            return "not an input"
        if "files" in d or "objects" in d:
            n = d.get("files", d.get("objects"))
            return f"{n} {'files' if 'files' in d else 'objects'}"
        return "missing" if d.get("missing") else "HEAD " + d["git_head"][:12] if "git_head" in d else "changed"

    return [
        f"{k}: {say(new.get(k))}, was {say(old.get(k))}"
        if say(new.get(k)) != say(old.get(k))
        else f"{k}: contents changed"
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    ]


def older_record(output: Path, want: dict) -> dict | None:
    """The ledger record (formats.outputs.read_record's BEFORE) of a prep output without output.json (an older
    midtrain's, or one in an object store, where no record is written): its prep.json's stamp, complete when its
    stats.json says so; {} (an output of unknown settings) when prep.json is unreadable, None without one. A
    prep.json from before input identities were recorded: the settings alone decide (WANT's inputs stand in)."""
    flat = read_stamp(output / PREP_STAMP)
    if flat is None:
        return {} if (output / PREP_STAMP).exists() else None
    identity = flat.pop(IDENTITY_KEY, None)
    stamp = make_stamp("prep", want["inputs"] if identity is None else identity, flat, flat.pop(NOTES, None))
    done = (read_stamp(output / STATS_FILE) or {}).get("complete") is True
    return {"stamp": stamp, "state": COMPLETE if done else RUNNING}


def write_prep_stamp(path: Path, stamp: dict) -> None:
    """Write a prep stamp as prep.json holds it: the settings at the top level, beside the inputs' identity."""
    notes = {NOTES: stamp[NOTES]} if stamp.get(NOTES) else {}
    write_text_atomic(path, json.dumps({**stamp["config"], IDENTITY_KEY: stamp["inputs"], **notes}, indent=2))


def refusal(output: Path, refused: OutputRefused, old: dict, want: dict) -> ConfigError:
    """The ledger's refusal of OUTPUT (recorded stamp OLD) as prep says it, naming what differs: other settings
    (their shards would mix), or inputs changed since (finished tasks would be skipped: what was added or
    changed since would be silently left out)."""
    fields = [c.split(":")[0] for c in refused.changes]
    settings = [f.removeprefix("config.") for f in fields if f.startswith("config.")]
    if not old:
        return ConfigError(
            f"output: {output} holds files but no readable {PREP_STAMP} (what made them is unknown); use a new "
            "--output or --overwrite"
        )
    if settings:
        return ConfigError(
            f"output: {output} was prepared with other settings ({', '.join(settings)} differ); use a new "
            "--output or --overwrite"
        )
    return ConfigError(
        f"output: the inputs changed since {output} was prepared ("
        f"{'; '.join(_changed_inputs(old['inputs'], want['inputs'])[:5])}); use --overwrite to "
        "prepare it again from the inputs as they are now, or a new --output"
    )


# -- running --------------------------------------------------------------------------------------------
@dataclass
class PrepRun:
    source: str
    inputs: list[str]
    output: Path  # a pathlib.Path, or a universal_pathlib path for an fsspec URL (midtrain.locations)
    source_cfg: ReaderConfig
    curation_cfg: CurationConfig
    tasks: int = 1
    workers: int = 1
    executor: str = "local"
    site: Any = None  # midtrain.launch.site.SiteConfig for --executor slurm
    pipeline_file: str | None = None  # a user's data_prep-style file given as SOURCE (pipeline_file())
    command: str | None = None  # the command line that runs this again, every flag kept (a note of the stamp)

    def __post_init__(self) -> None:
        if self.tasks < 1:
            raise ConfigError(f"tasks: must be >= 1 (got {self.tasks})")
        if self.workers < 1 and self.workers != -1:
            raise ConfigError(f"workers: must be >= 1, or -1 to run every task at once (got {self.workers})")

    def settings(self) -> dict:
        steps = getattr(self.curation_cfg, "steps", None)  # which curation steps are on
        return {
            "source": self.source,
            "inputs": self.inputs,
            "tasks": self.tasks,
            "source_config": self.source_cfg.to_dict(),
            "curation": self.curation_cfg.to_dict(),
            "curation_steps": steps() if callable(steps) else {},
            **({"pipeline_file": self.pipeline_file} if self.pipeline_file else {}),
        }

    def stages(self) -> list[tuple[str, list, int]]:
        out = self.output
        raw, docs, work = out / "raw", out / "documents", out / "work"
        stages = table_source_stages(self.source, self.inputs, self.source_cfg, out, self.tasks)
        if stages is not None:  # tables: the last source stage writes raw/, so it gets the empty-shard guard
            stages[-1][1].append(EnsureRawFile(str(raw)))
        else:
            stages = [
                (
                    "source",
                    source_pipeline(
                        self.source,
                        self.inputs,
                        self.source_cfg,
                        str(raw),
                        str(out / "logs" / "source" / "reports"),
                        str(out / "excluded" / "source"),
                        self.pipeline_file,
                    ),
                    self.tasks,
                )
            ]
        for i, st in enumerate(
            curation_stages(self.curation_cfg, self.source, str(raw), str(docs), str(work), self.tasks), 1
        ):
            stages.append((f"curate_{i:02d}_{st.name}", st.pipeline, st.tasks or self.tasks))
        names = [n for n, _, _ in stages]
        stages.append(("stats", [WriteStats(str(out), names, self.settings())], 1))
        return stages

    def stamp(self) -> dict:
        """What this run makes: a prep output of these settings, from the inputs as they are now."""
        notes = {"command": self.command} if self.command else None
        return make_stamp("prep", input_identity(self.inputs, str(self.output)), self.settings(), notes)

    def claim(self, overwrite: bool, hold: bool = True) -> AbstractContextManager[Claim]:
        """OUTPUT claimed for this run (formats.outputs, policy ``prep``): one of this stamp resumes (datatrove
        skips its finished tasks); one prepared with other settings, or from inputs that changed since, is
        refused (ConfigError naming what differs) unless ``overwrite``. An output in an object store has no
        lease: decided from its prep.json alone."""
        want, out = self.stamp(), self.output

        def reword(refused: OutputRefused, record: Mapping[str, Any]) -> ConfigError:
            return refusal(out, refused, record.get("stamp") or {}, want)

        hold = hold and not is_url(out)
        return claim(out, "prep", want, overwrite, hold=hold, before=older_record(out, want), reword=reword)

    def start(self, c: Claim, overwrite: bool) -> None:
        """Make OUTPUT ready for this run as claimed: clear it (``overwrite`` of an output there), record prep.json
        and, while a stage has work left, take away the completion mark (stats.json)."""
        if overwrite and c.action != START:
            self._clear()
        ensure_dir(self.output)
        write_prep_stamp(self.output / PREP_STAMP, c.want)
        if not self._stages_complete():
            self._unmark_complete()

    def _clear(self) -> None:
        log.info("--overwrite: removing %s", self.output)
        if is_url(self.output):
            remove_tree(self.output)
        else:  # everything but the lease this run holds and its record
            for child in self.output.iterdir():
                if child.name not in (LEASE, RECORD):
                    remove_tree(child) if child.is_dir() else child.unlink()

    def _unmark_complete(self) -> None:
        """stats.json marks a complete output (`midtrain pack` reads no other): gone while this run has work to
        do, and its stage (cheap: it merges the others' stats) runs again at the end; a rerun of a finished
        output has nothing to do and rewrites nothing."""
        stats, stats_done = self.output / STATS_FILE, self.output / "logs" / "stats" / "completions"
        if stats.exists():
            stats.unlink()
        if stats_done.exists():
            remove_tree(stats_done)

    def _stages_complete(self) -> bool:
        """Every stage before the stats merge has each task's datatrove completion marker."""
        for name, _, tasks in self.stages()[:-1]:
            done = self.output / "logs" / name / "completions"
            if not all((done / f"{rank:05d}").exists() for rank in range(tasks)):
                return False
        return True

    def chain(self) -> StageChain:
        """Every stage in a stage chain (local, or Slurm job arrays chained afterok); nothing runs yet."""
        chain = StageChain(self.executor, self.site, self.workers, label=f"prep {self.source}")
        for name, pipeline, tasks in self.stages():
            chain.add(
                name,
                pipeline,
                tasks,
                str(self.output / "logs" / name),
                job_name=f"midtrain-prep-{self.source}-{name}",
                slurm_logs_dir=str(self.output / "logs" / "slurm" / name),
            )
        return chain

    def run(self) -> dict | None:
        """Run every stage (local: in order, returns the stats) or submit the chain (Slurm: returns None)."""
        chain = self.chain()
        chain.run()
        if chain.on_slurm:
            log.info(
                "submitted %d Slurm stages for %s; stats will be written to %s",
                len(chain.stages),
                self.source,
                self.output / STATS_FILE,
            )
            return None
        return json.loads((self.output / STATS_FILE).read_text())


def sbatch_scripts(run: PrepRun) -> dict[str, str]:
    """The sbatch script each Slurm stage would submit (for --dry-run)."""
    return run.chain().scripts()


def check_inputs(inputs: list[str]) -> None:
    """Fail early, naming it, when an input path does not exist or cannot be read."""
    for p in expand_inputs(i for i in inputs if not is_url(i)):  # URLs are listed (and named) by the readers
        if not p.exists():
            raise FileNotFoundError(f"input {p}: no such file or directory")
        if not os.access(p, os.R_OK):
            raise PermissionError(f"input {p}: not readable")


def resolve_configs(source: str, overrides: list[str] | None = None) -> tuple[str, ReaderConfig, CurationConfig]:
    """(source name, its reader config, the curation config) with ``overrides`` applied and validated."""
    source = resolve_source(source)
    src_over, cur_over = split_overrides(source, overrides or [])
    source_cfg = SOURCE_SPECS[source].config().apply_overrides(src_over).validate()
    curation_cfg = CurationConfig().apply_overrides(cur_over).validate()
    return source, source_cfg, curation_cfg


def config_yaml(source: str, overrides: list[str] | None = None) -> str:
    """The resolved prep settings as YAML, keyed the way overrides name them (``repos.x``, ``redact.y``)."""
    import yaml

    source, source_cfg, curation_cfg = resolve_configs(source, overrides)
    data = {"source": source, source: source_cfg.to_dict(), **curation_cfg.to_dict()}
    return yaml.safe_dump(data, sort_keys=False)


def build_run(
    source: str, inputs: list[str], output: str | Path, overrides: list[str] | None = None, **kw: Any
) -> PrepRun:
    name, source_cfg, curation_cfg = resolve_configs(source, overrides)
    return PrepRun(
        name,
        [p if is_url(p) else str(Path(p).expanduser().absolute()) for p in inputs],
        location(output),
        source_cfg,
        curation_cfg,
        pipeline_file=pipeline_file(source),
        **kw,
    )


def prep(
    source: str,
    inputs: list[str],
    output: str | Path,
    overrides: list[str] | None = None,
    overwrite: bool = False,
    **kw: Any,
) -> dict | None:
    """Library entry point of `midtrain prep` (see the module docstring for the output layout)."""
    check_inputs(inputs)
    run = build_run(source, inputs, output, overrides, **kw)
    with naming_output(run.output), run.claim(overwrite) as c:  # one run at a time; a full disk names OUTPUT
        run.start(c, overwrite)
        stats = run.run()
        if stats is not None:  # local, finished (a Slurm chain finishes later: its rerun resumes)
            c.complete()
        return stats

"""The `midtrain pack` flow: tokenize each input (cached per input and tokenizer) -> pack tasks -> manifest.

Local runs execute the stages in order with datatrove's local executor; Slurm runs submit them as dependent
job arrays (tokenize per input, then packing, then a one-task manifest job) and return. Reruns skip finished
work: a tokenize cache whose documents did not change, pack tasks whose completion markers exist, and the
whole run when the manifest already records the same configuration and inputs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from midtrain.pack.pack_step import PackConfig, PackStep, cache_key, tokenized_prefixes
from midtrain.formats.shard_reader import MANIFEST

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
        return {"file": str(self.file), "hash": self.hash, "eos_token": self.eos_token, "eos_id": self.eos_id,
                "pad_id": self.pad_id, "vocab_size": self.vocab_size}


def resolve_tokenizer(cfg: PackConfig) -> TokenizerInfo:
    from midtrain.pack.tokenizer import load_tokenizer, resolve_tokenizer_file, tokenizer_hash

    file = resolve_tokenizer_file(cfg.tokenizer)
    tok = load_tokenizer(cfg.tokenizer if cfg.tokenizer is not None else file)
    eos = cfg.eos_token or tok.eos_token or ("<|endoftext|>" if "<|endoftext|>" in tok.get_vocab() else None)
    if eos is None or tok.convert_tokens_to_ids(eos) is None:
        raise ValueError(f"tokenizer {file}: no EOS token known; set eos_token=... (e.g. eos_token='</s>')")
    eos_id = tok.convert_tokens_to_ids(eos)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos_id
    return TokenizerInfo(file=file, hash=tokenizer_hash(file), eos_token=eos, eos_id=eos_id, pad_id=pad_id,
                         vocab_size=len(tok))


def documents_dir(prep_dir: str | Path) -> Path:
    d = Path(prep_dir) / "documents"
    if not d.is_dir() or not any(d.glob(DOC_GLOB)):
        raise FileNotFoundError(f"{prep_dir}: no documents/{DOC_GLOB} (give output directories of `midtrain prep`)")
    return d


def fingerprint(prep_dir: str | Path) -> str:
    """Names, sizes and mtimes of an input's document files: the tokenize cache is valid while they hold."""
    files = sorted(documents_dir(prep_dir).glob(DOC_GLOB))
    raw = json.dumps([(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def tokenize_cache(prep_dir: str | Path, key: str) -> Path:
    return Path(prep_dir) / "tokenized" / key


def _executor(cfg: PackConfig, pipeline: list, tasks: int, logging_dir: Path, name: str, site=None, depends=None):
    if cfg.executor == "slurm":  # the launch team's factory: resources, venv/container, account from the site
        from midtrain.launch.prep import slurm_executor

        return slurm_executor(pipeline, site, job_name=f"midtrain-{name}", logging_dir=str(logging_dir), tasks=tasks,
                              depends=depends, slurm_logs_dir=str(Path(logging_dir).parent / "slurm" / Path(logging_dir).name))
    from datatrove.executor import LocalPipelineExecutor

    # Local stages are run in order by pack() itself (a local `depends` would rerun them).
    return LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=min(cfg.workers, tasks),
                                 logging_dir=str(logging_dir))


class ManifestStep(PipelineStep):
    """The last stage: merge the task stats into manifest.json (one task)."""

    name = "midtrain manifest"
    type = "📦 - PACKER"

    def __init__(self, cfg: dict, out_dir: str, cache_dirs: list[str], inputs: list[str], tokenizer: dict,
                 run_key: str) -> None:
        super().__init__()
        self.cfg, self.out_dir, self.cache_dirs, self.inputs = cfg, out_dir, cache_dirs, inputs
        self.tokenizer, self.run_key = tokenizer, run_key

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        from midtrain.pack.manifest import build_manifest, write_manifest

        cfg = PackConfig.from_dict(self.cfg)
        manifest = build_manifest(cfg, self.out_dir, self.cache_dirs, self.inputs, self.tokenizer,
                                  self.tokenizer["pad_id"])
        manifest["run_key"] = self.run_key
        write_manifest(manifest, self.out_dir)
        return
        yield


class CacheStampStep(PipelineStep):
    """Marks a tokenize cache complete for its input fingerprint (runs after every tokenize task)."""

    name = "midtrain tokenize stamp"

    def __init__(self, cache_dir: str, stamp: dict) -> None:
        super().__init__()
        self.cache_dir, self.stamp = cache_dir, stamp

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        (Path(self.cache_dir) / "complete.json").write_text(json.dumps(self.stamp, indent=1))
        return
        yield


def _script(ex) -> str:
    """What an executor would run: the sbatch script (Slurm) or a one-line description (local)."""
    if hasattr(ex, "get_sbatch_args"):
        n = ex.world_size if ex.max_array_size == -1 else min(ex.world_size, ex.max_array_size)
        return ex.get_launch_file_contents(
            ex.get_sbatch_args(n), f"srun -l launch_pickled_pipeline {ex.logging_dir.resolve_paths('executor.pik')}")
    return f"# local: {ex.world_size} tasks, logs in {ex.logging_dir.path}"


def pack(cfg: PackConfig, inputs: list[str | Path], out_dir: str | Path, site=None, dry_run: bool = False):
    """Tokenize (cached) and pack ``inputs`` into ``out_dir``; returns the manifest (None when submitted to Slurm).

    With ``executor=slurm`` the stages are submitted as dependent job arrays configured by ``site`` (a
    ``midtrain.launch.site.SiteConfig``; None = $MIDTRAIN_SITE or defaults); ``dry_run`` returns their sbatch
    scripts instead of submitting anything.
    """
    from datatrove.pipeline.readers import JsonlReader

    from midtrain.pack.tokenize import TokenizeStep

    cfg.validate()
    if cfg.executor == "slurm" and site is None:
        from midtrain.launch.site import load_site

        site = load_site()
    out = Path(out_dir)
    tok = resolve_tokenizer(cfg)
    key = cache_key(tok.hash, tok.eos_token, cfg.boundaries)
    inputs = [str(Path(i)) for i in inputs]
    prints = {i: fingerprint(i) for i in inputs}
    cache_dirs = [str(tokenize_cache(i, key)) for i in inputs]
    run_key = hashlib.sha256(json.dumps([cfg.to_dict(), key, [prints[i] for i in inputs]]).encode()).hexdigest()[:16]

    manifest_path = out / MANIFEST
    if manifest_path.exists() and not dry_run:
        old = json.loads(manifest_path.read_text())
        if old.get("run_key") == run_key:
            log.info("%s is complete for this configuration and these inputs; nothing to do", out)
            return old
    # A different run wrote here before: remove its outputs (only what `midtrain pack` writes). An unfinished
    # run of the same settings keeps them: its finished tasks are skipped.
    ours = (out / MANIFEST).exists() or (out / "logs").is_dir()
    if not ours and any((out / n).exists() for n in ("train", "valid")) and not dry_run:
        raise FileExistsError(f"{out} holds train/ or valid/ but is not a `midtrain pack` output; choose another --output")
    resuming = (out / "logs" / run_key).exists()
    if ours and not dry_run:
        log.info("%s: %s", out, "resuming an unfinished run with these settings" if resuming else
                 "replacing an earlier pack output made with other settings or inputs")
    for name in ("train", "valid", "logs", MANIFEST) if ours and not dry_run else ():
        p = out / name
        if p.exists() and (not resuming or name == MANIFEST):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    out.mkdir(parents=True, exist_ok=True)

    last, stages = None, []
    for i, cache in zip(inputs, cache_dirs):
        cache = Path(cache)
        stamp = {"fingerprint": prints[i], "tokenizer": tok.to_dict(), "boundaries": cfg.boundaries}
        done = cache / "complete.json"
        if done.exists() and json.loads(done.read_text()).get("fingerprint") == prints[i]:
            log.info("tokenize %s: cached in %s", i, cache)
            continue
        if cache.exists() and done.exists():  # stale: the documents changed
            log.info("tokenize %s: documents changed since %s was written; retokenizing", i, cache)
            shutil.rmtree(cache)
        n_files = len(list(documents_dir(i).glob(DOC_GLOB)))
        tasks = min(cfg.tokenize_tasks, n_files)
        log.info("tokenize %s: %d files in %d tasks -> %s", i, n_files, tasks, cache)
        run = _executor(cfg, [JsonlReader(str(documents_dir(i)), glob_pattern=DOC_GLOB),
                              TokenizeStep(str(cache), str(tok.file), tok.eos_token, cfg.boundaries)],
                        tasks, cache / "logs" / prints[i], f"tokenize-{Path(i).name}", site, depends=last)
        stamp_run = _executor(cfg, [CacheStampStep(str(cache), stamp)], 1, cache / "logs" / f"stamp-{prints[i]}",
                              f"tokenize-stamp-{Path(i).name}", site, depends=run)
        stages += [(f"tokenize {i}", run), (f"tokenize stamp {i}", stamp_run)]
        if cfg.executor == "local" and not dry_run:
            run.run()
            stamp_run.run()
            if not tokenized_prefixes(cache):
                raise RuntimeError(f"tokenize {i}: no task output in {cache}; see {cache / 'logs'}")
        last = stamp_run

    packer = _executor(cfg, [PackStep(cfg.to_dict(), cache_dirs, str(out), str(tok.file), tok.pad_id)], cfg.tasks,
                       out / "logs" / run_key, "pack", site, depends=last)
    merge = _executor(cfg, [ManifestStep(cfg.to_dict(), str(out), cache_dirs, inputs, tok.to_dict(), run_key)], 1,
                      out / "logs" / f"{run_key}-manifest", "pack-manifest", site, depends=packer)
    stages += [("pack", packer), ("manifest", merge)]
    if dry_run:
        return {name: _script(ex) for name, ex in stages}
    if cfg.executor == "slurm":
        merge.run()  # datatrove submits the dependency chain first
        log.info("submitted tokenize -> pack -> manifest to Slurm; %s appears when done", manifest_path)
        return None
    packer.run()
    merge.run()
    return json.loads(manifest_path.read_text())

"""Curation as datatrove stages run after a source's reader stage (`midtrain prep` runs them).

`midtrain prep` runs the source stage (reader -> documents into RAW_DIR as JSONL), then each stage returned
by :func:`curation_stages` in order with the chosen executor (local or Slurm), then merges the stats.

Steps, in order, each ON by default and switched off with ``<step>.enabled=false``:

==========  ==================================================================================
validate    always on: unusable records (text missing / not a string, bad loss spans) dropped
license     permissive allow-list per repository (``license.allow``, ``license.allow_no_license``)
decontam    SWE-bench repositories in any name form, forks, instance ids; then n-gram overlap
quality     trims generated/minified/data files out of repositories; drops near-empty/garbled docs
redact      secrets and PII replaced by typed placeholders (``<AWS_ACCESS_KEY>``, ``<EMAIL>`` ...)
dedup       exact + MinHash near-duplicates across all tasks, per document and per repository file
==========  ==================================================================================

Dropped documents are kept for audit under ``<prep dir>/excluded/<step>/`` (the prep dir is OUT_DIR's parent,
``DIR`` of ``midtrain prep --output DIR``), each with ``metadata["curation_reason"]``; files cut out of a
repository are kept there too, as documents with ``parent_id`` and ``path``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.dedup.minhash import MinhashDedupBuckets, MinhashDedupCluster

from midtrain.config import Config
from midtrain.curate.base import ValidateDocuments
from midtrain.curate.decontam import DecontamConfig, SweBenchNgramFilter, SweBenchRepoFilter
from midtrain.curate.dedup import (
    CodeMinhashSignature,
    DedupConfig,
    DedupFilter,
    ExactUnitFind,
    ExactUnitSignature,
    NearDupUnits,
    NearKeepSmallestKey,
)
from midtrain.curate.license import LicenseConfig, LicenseFilter
from midtrain.curate.quality import QualityConfig, QualityFilter
from midtrain.curate.secrets import RedactConfig, RedactSecrets
from midtrain.formats.documents import DocumentReader, DocumentWriter
from midtrain.locations import location

STEP_NAMES = ("license", "decontam", "quality", "redact", "dedup")


@dataclass
class CurationConfig(Config):
    """Which curation steps run (all on by default) and their thresholds."""

    license: LicenseConfig = field(default_factory=LicenseConfig)
    decontam: DecontamConfig = field(default_factory=DecontamConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    redact: RedactConfig = field(default_factory=RedactConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    keep_excluded: bool = True  # write what each step drops under <prep dir>/excluded/<step>/

    def steps(self) -> dict[str, bool]:
        """{step: on/off}, for stats.json and logs."""
        return {name: bool(getattr(self, name).enabled) for name in STEP_NAMES}


@dataclass
class CurationStage:
    name: str
    pipeline: list[PipelineStep]
    tasks: int | None = None  # None: as many tasks as the prep run; 1: a stage that must see everything
    extra: dict = field(default_factory=dict)


def excluded_dir(out_dir: str) -> Path:
    """Where dropped documents go: DIR/excluded when out_dir is DIR/documents."""
    return location(out_dir).parent / "excluded"


def curation_stages(
    cfg: CurationConfig, source: str, raw_dir: str, out_dir: str, work_dir: str, tasks: int = 1
) -> list[CurationStage]:
    """Stages reading RAW_DIR (JSONL documents) and writing the curated documents to OUT_DIR (JSONL.gz).

    work_dir is private scratch space (filtered documents, dedup hashes, signatures, buckets, removal lists).
    ``source`` is the source kind being prepared (a prep name of midtrain.formats.source_specs); every step
    applies to every source (per-source parts read the document's source traits there).
    ``tasks`` is the run's task count: the exact-dedup finder runs as many tasks unless ``dedup.finder_tasks``
    says otherwise (the output is the same for any of them).
    """
    cfg.validate()
    work = location(work_dir)
    exc_root = excluded_dir(out_dir)

    def exc(step: str) -> str | None:
        return str(exc_root / step) if cfg.keep_excluded else None

    dedup = cfg.dedup.enabled and (cfg.dedup.exact or cfg.dedup.near)
    filtered = str(work / "filtered") if dedup else out_dir

    steps: list[PipelineStep] = [DocumentReader(raw_dir, add_file_path=False), ValidateDocuments(exc("validate"))]
    if cfg.license.enabled:
        steps.append(LicenseFilter(cfg.license, exc("license")))
    if cfg.decontam.enabled:
        steps.append(SweBenchRepoFilter(cfg.decontam, exc("decontam")))
        if cfg.decontam.ngrams and (cfg.decontam.instances or cfg.decontam.heldout):
            steps.append(SweBenchNgramFilter(cfg.decontam, exc("decontam")))
    if cfg.quality.enabled:
        steps.append(QualityFilter(cfg.quality, exc("quality")))
    if cfg.redact.enabled:
        steps.append(RedactSecrets(cfg.redact, exc("redact")))
    steps.append(DocumentWriter(filtered))
    stages = [CurationStage("curate", steps, None, {"source": source, "steps": cfg.steps()})]
    if not dedup:
        return stages

    d = cfg.dedup
    exact_sigs = str(work / "dedup" / "exact_signatures")
    exact_dir = str(work / "dedup" / "exact") if d.exact else None  # removal lists (<finder>/<rank>.c4_dup)
    finders = d.finder_tasks or tasks
    mh = d.minhash()
    sig_dir, bucket_dir, cluster_dir, keys_dir, near_dir = (
        str(work / "dedup" / x) for x in ("signatures", "buckets", "clusters", "keys", "remove")
    )

    def reader() -> DocumentReader:
        return DocumentReader(filtered, add_file_path=False)

    if d.exact:
        stages.append(
            CurationStage("dedup_hash", [reader(), ExactUnitSignature(exact_sigs, d.min_file_chars, finders)])
        )
        assert exact_dir is not None  # set when d.exact
        stages.append(CurationStage("dedup_exact", [ExactUnitFind(exact_sigs, exact_dir)], finders))
    if d.near:
        stages.append(
            CurationStage(
                "dedup_sig",
                [reader(), NearDupUnits(exact_dir, keys_dir, d.min_file_chars), CodeMinhashSignature(sig_dir, mh)],
            )
        )
        stages.append(
            CurationStage("dedup_buckets", [MinhashDedupBuckets(sig_dir, bucket_dir, config=mh)], d.num_buckets)
        )
        stages.append(
            CurationStage(
                "dedup_cluster",
                [
                    MinhashDedupCluster(bucket_dir, cluster_dir, config=mh, save_cluster_id=True),
                    NearKeepSmallestKey(cluster_dir, keys_dir, near_dir),
                ],
                1,
            )
        )
    stages.append(
        CurationStage(
            "dedup_filter",
            [reader(), DedupFilter(d, exact_dir, near_dir if d.near else None, exc("dedup")), DocumentWriter(out_dir)],
        )
    )
    return stages

"""Tables as inputs of the readers: Parquet / JSONL files of a public dataset, local or behind an fsspec URL.

A table input is a file (``.parquet``, ``.jsonl``, ``.jsonl.gz``, ``.json``) or a folder of them, given as a
local path or an fsspec URL (``s3://bucket/prefix``, ``hf://datasets/org/name/data``, ...). Files are listed
and opened through datatrove's data folders, so every filesystem datatrove reads works here too. Rows are
streamed (a Parquet file one row group at a time), never loaded whole. A ``.json`` file holding JSON Lines
(the-stack-smol's ``data.json``) is read line by line.

A Hugging Face dataset as it is downloaded (a snapshot folder, or ``hf://datasets/ORG/NAME``) holds the
dataset card ``README.md`` and ``.gitattributes`` beside its data files. Its card's ``configs:`` section says
which files make which config and split (:func:`card_data_files`): the chosen config
(``SOURCE.dataset_config``; else the card's default one), every split of it or ``SOURCE.split``;
``SOURCE.revision`` pins a revision of an ``hf://`` URL. A card without ``configs:`` gives every table file.

Column names differ between datasets; :func:`pick` reads a row through a mapping from the reader's own field
names to the table's columns. A source config's ``columns`` field (``repos.columns.repo=my_repo_col``)
overrides the built-in aliases, which cover the published schemas named in each reader.
"""

from __future__ import annotations

import difflib
import gzip
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from datatrove.io import DataFolder, get_datafolder

from midtrain.locations import is_url
from midtrain.sources.common import (
    MAX_RECORD_BYTES,
    TOO_LONG,
    RecordTooLarge,
    SourceReader,
    capped_lines,
    expand_inputs,
    walk_files,
)
from midtrain.sources.licenses import spdx_id

TABLE_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz", ".json")


def is_table_input(path: str, suffixes: tuple[str, ...] = TABLE_SUFFIXES) -> bool:
    """A URL, a local file with a table suffix, or a local folder holding only table files (not a git repo)."""
    if is_url(path):
        return True
    p = Path(path)
    if not p.is_dir():
        return str(path).endswith(suffixes)
    if (p / ".git").exists() or (p / "HEAD").is_file():
        return False
    if is_dataset_folder(p):
        return True
    files = walk_files(p)
    return bool(files) and all(f.name.endswith(suffixes) for f in files)


# -- Hugging Face dataset folders ------------------------------------------------------------------------
CARD = "README.md"
# files a dataset repository holds beside its data: the card, git/LFS settings, loading scripts, notes
_HUB_EXTRAS = re.compile(r"(^|/)(README\.md|\.gitattributes|\.gitignore|[^/]*\.(py|txt|md|json\.lock))$")


_METADATA_FILES = {"paths.json", "dataset_infos.json", "dataset_info.json", "dataset_dict.json", "state.json"}


def card_metadata(text: str) -> dict | None:
    """The YAML front matter of a dataset card (None when the card has none or it is not a mapping)."""
    import yaml

    m = re.match(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|\Z)", text, re.DOTALL)
    if not m:
        return None
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return None
    return meta if isinstance(meta, dict) else None


def is_dataset_folder(p: Path) -> bool:
    """A local folder laid out as a Hugging Face dataset repository: a card with front matter, table files."""
    card = p / CARD
    if not card.is_file():
        return False
    meta = card_metadata(card.read_text(errors="replace"))
    return meta is not None and any(f.name.endswith(TABLE_SUFFIXES) for f in walk_files(p) if f != card)


def _glob_regex(pattern: str) -> re.Pattern:
    """A data_files pattern (fsspec glob: ``*`` within a folder, ``**`` across folders) as a regex."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out, i = out + "(?:/)?", i + 1
            continue
        out += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
        i += 1
    return re.compile(out + "$")


def _split_patterns(data_files: Any) -> dict[str, list[str]]:
    """A config's data_files (a pattern, a list of them, or a list of {split, path}) -> split -> patterns."""
    if isinstance(data_files, str):
        return {"train": [data_files]}
    out: dict[str, list[str]] = {}
    for entry in data_files or []:
        if isinstance(entry, str):
            out.setdefault("train", []).append(entry)
        elif isinstance(entry, dict) and entry.get("path"):
            paths = entry["path"] if isinstance(entry["path"], list) else [entry["path"]]
            out.setdefault(str(entry.get("split", "train")), []).extend(str(x) for x in paths)
    return out


def card_data_files(meta: dict | None, files: list[str], config: str = "", split: str = "") -> tuple[list[str], str]:
    """(the data files of the chosen config and split, a problem or ''), FILES being the table files of the
    folder relative to it. No ``configs:`` in the card: every file (HF's default). Config: ``config``, else
    the one marked ``default: true``, else one named ``default``, else the only one."""
    configs = [c for c in (meta or {}).get("configs") or [] if isinstance(c, dict)]
    if not configs:
        if config:
            return [], f"config {config!r} chosen but the dataset card has no 'configs:' section"
        if meta is not None:  # a dataset repository: its data/ folder when it has one (HF's default), and
            # never the loading scripts' metadata beside it (CommitPack's paths.json, dataset_infos.json)
            files = [f for f in files if f.rsplit("/", 1)[-1] not in _METADATA_FILES]
            files = [f for f in files if f.startswith("data/")] or files
        if split:
            return [], f"split {split!r} chosen but the dataset card has no 'configs:' section"
        return files, ""
    names = [str(c.get("config_name", "default")) for c in configs]
    if config:
        chosen = next((c for c, n in zip(configs, names) if n == config), None)
        if chosen is None:
            return [], f"no config {config!r} in the dataset card (configs: {', '.join(names)})"
    else:
        chosen = (
            next((c for c in configs if c.get("default") is True), None)
            or next((c for c, n in zip(configs, names) if n == "default"), None)
            or (configs[0] if len(configs) == 1 else None)
        )
        if chosen is None:
            return [], (
                f"the dataset card has several configs ({', '.join(names)}) and none is the default: "
                "choose one with SOURCE.dataset_config=NAME"
            )
    splits = _split_patterns(chosen.get("data_files"))
    if not splits and chosen.get("data_dir"):
        splits = {"train": [str(chosen["data_dir"]).rstrip("/") + "/**"]}
    if split:
        if split not in splits:
            return [], f"no split {split!r} in config {names[configs.index(chosen)]!r} (splits: {', '.join(splits)})"
        splits = {split: splits[split]}
    regexes = [_glob_regex(pat.lstrip("./")) for pats in splits.values() for pat in pats]
    return [f for f in files if any(r.match(f) for r in regexes)], ""


def with_revision(url: str, revision: str) -> str:
    """``hf://datasets/ORG/NAME[/sub]`` at REVISION (``hf://datasets/ORG/NAME@REVISION[/sub]``)."""
    m = re.match(r"^(hf://(?:datasets|models|spaces)/[^/@]+/[^/@]+)(?:@[^/]*)?(/.*)?$", url)
    if not revision or not m:
        return url
    return f"{m.group(1)}@{revision.replace('/', '%2F')}{m.group(2) or ''}"


def expand_table_inputs(inputs: Iterable[str]) -> list[str]:
    """Inputs as given, with ``.lst`` files expanded; URLs are kept verbatim."""
    out: list[str] = []
    for item in inputs:
        out.extend([str(item)] if is_url(str(item)) else [str(p) for p in expand_inputs([item])])
    return out


class TableUnit(NamedTuple):
    """One table file: its data folder, its path inside it (None: nothing to read, ``problem`` says why)."""

    folder: DataFolder
    rel: str | None
    problem: str = ""


def _card_of(folder: DataFolder) -> dict | None:
    try:
        if not folder.isfile(CARD):
            return None
        with folder.open(CARD, "rt", encoding="utf-8", errors="replace") as fh:
            return card_metadata(fh.read())
    except (OSError, ValueError):
        return None


def table_units(inputs: Iterable[str], cfg: Any = None) -> list[tuple[str, TableUnit]]:
    """One unit per table file, in a stable order: (input it came from, its TableUnit). An input without any
    table file (or whose card names none for the chosen config/split) gives one unit with rel None, so the
    reader reports it by name. ``cfg``: a source config with dataset_config / split / revision."""
    config, split = getattr(cfg, "dataset_config", "") or "", getattr(cfg, "split", "") or ""
    revision = getattr(cfg, "revision", "") or ""
    units: list[tuple[str, TableUnit]] = []
    for inp in sorted(expand_table_inputs(inputs)):
        folder = get_datafolder(with_revision(inp, revision))
        if folder.isfile(""):  # a single file: its parent is the folder
            parent, name = inp.rstrip("/").rsplit("/", 1) if "/" in inp.rstrip("/") else (".", inp)
            units.append((inp, TableUnit(get_datafolder(with_revision(parent, revision)), name)))
            continue
        files = (
            sorted(
                f for f in folder.list_files(recursive=True) if f.endswith(TABLE_SUFFIXES) and not _HUB_EXTRAS.search(f)
            )
            if folder.isdir("")
            else []
        )
        problem = ""
        meta = _card_of(folder) if files else None
        if meta is not None or config or split:
            files, problem = card_data_files(meta, files, config, split)
        if files:
            units.extend((inp, TableUnit(folder, f)) for f in files)
        else:
            units.append((inp, TableUnit(folder, None, problem)))
    return units


def unit_name(unit: TableUnit) -> str:
    return unit.folder.resolve_paths(unit.rel)


NO_TABLE_FILES = f"no table files ({', '.join(TABLE_SUFFIXES)}) at or under this path"


def iter_table_rows(
    folder: DataFolder, rel: str, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[tuple[str, Any]]:
    """(where, row dict or the exception that made a row unreadable) for every row of one table file.

    A JSONL record or JSON file over ``max_record_bytes`` comes as a :class:`RecordTooLarge` (never held
    whole in memory), and the rows after it are still read."""
    where = folder.resolve_paths(rel)
    if rel.endswith(".parquet"):
        import pyarrow.parquet as pq

        # Decoded on this thread (use_threads=False, no pre-buffering): Arrow's pool threads, once started, can
        # still be joinable when the interpreter exits and abort the process ("terminate called without an
        # active exception", exit 134) after the task's work is done, which fails a Slurm array task and
        # cancels every stage that depends on it. A row group at a time, so this costs little.
        with folder.open(rel, "rb") as fh, pq.ParquetFile(fh, pre_buffer=False) as pf:
            i = 0
            for rg in range(pf.num_row_groups):
                for row in pf.read_row_group(rg, use_threads=False).to_pylist():
                    yield f"{where}[{i}]", row
                    i += 1
        return
    with folder.open(rel, "rb") as raw:
        fh = gzip.open(raw, "rb") if rel.endswith(".gz") else raw
        head = b""
        if rel.endswith(".json"):
            head = fh.read(1 << 16)
            while b"\n" not in head.lstrip() and len(head) <= max_record_bytes:  # the whole first line
                more = fh.read(1 << 20)
                if not more:
                    break
                head += more
            if not (head.lstrip()[:1] == b"{" and (len(head) > max_record_bytes or _first_line_is_object(head))):
                # one JSON document, read whole up to the record cap
                head += fh.read(max_record_bytes + 1 - len(head)) if len(head) <= max_record_bytes else b""
                if len(head) > max_record_bytes:
                    yield where, RecordTooLarge(f"a JSON file over {max_record_bytes} bytes (max_record_bytes)")
                    return
                try:
                    obj = json.loads(head.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    yield where, e
                    return
                for i, row in enumerate(obj if isinstance(obj, list) else [obj]):
                    yield f"{where}[{i}]", row
                return
        # JSON Lines (also in a .json file, as the-stack-smol's data.json): one record a line, streamed and capped
        for lineno, line in enumerate(capped_lines(fh, max_record_bytes, head), 1):
            if line is TOO_LONG:
                yield (
                    f"{where}:{lineno}",
                    RecordTooLarge(f"a record over {max_record_bytes} bytes (max_record_bytes), skipped"),
                )
            elif isinstance(line, bytes) and line.strip():  # bytes: every item but the TOO_LONG sentinel
                try:
                    yield f"{where}:{lineno}", json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    yield f"{where}:{lineno}", e


def _first_line_is_object(head: bytes) -> bool:
    """True when the first line of HEAD (a file's start holding its whole first line) is a JSON object."""
    line = head.lstrip().split(b"\n", 1)[0]
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def readable_rows(reader: SourceReader, unit: TableUnit, origin: str, counter: str) -> Iterator[tuple[str, Any]]:
    """(where, row) for every row of one table unit that could be decoded, each counted as COUNTER on READER.

    A missing table and every row that could not be decoded are recorded as READER's errors, naming where.
    """
    folder, rel = unit.folder, unit.rel
    if rel is None:
        reader.stat_update("records")
        reader.error("missing_input", origin, unit.problem or NO_TABLE_FILES, origin)
        return
    for where, row in iter_table_rows(folder, rel, reader.cfg.max_record_bytes):
        reader.stat_update(counter)
        if isinstance(row, RecordTooLarge):
            reader.error("record_too_large", where, str(row), origin)
        elif isinstance(row, UnicodeDecodeError):
            reader.error("invalid_utf8", where, str(row), origin)
        elif isinstance(row, Exception):
            reader.error("malformed_json", where, str(row), origin)
        else:
            yield where, row


def pick(row: dict, field: str, columns: dict[str, str], aliases: tuple[str, ...]) -> Any:
    """The value of a reader field in a table row: the configured column if any, else the first alias present."""
    if field in columns:
        return row.get(columns[field])
    for name in aliases:
        if row.get(name) is not None:
            return row[name]
    return None


def json_field(value: Any) -> Any:
    """A nested column as a Python object: some datasets store lists of messages/tools as JSON strings."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def license_expression(value: Any) -> str | None:
    """A license column as one SPDX expression. A list (The Stack's ``max_stars_repo_licenses``: every license
    detected in the repository) means the code is under all of them: ``A AND B``, each entry as an SPDX id
    (GitHub's license keys, github-code's ``mit`` / ``bsd-3-clause``, become SPDX ids)."""

    values = value if isinstance(value, (list, tuple)) else [value]
    ids = sorted({i for i in (spdx_id(str(v)) for v in values if v is not None and str(v).strip()) if i is not None})
    if not ids:
        return None
    return ids[0] if len(ids) == 1 else " AND ".join(f"({i})" if " " in i else i for i in ids)


# -- schema checks ---------------------------------------------------------------------------------------
def missing_fields(
    row: dict, fields: Iterable[str], columns: dict[str, str], aliases: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """The reader fields of FIELDS that no column of ROW provides (the configured column, else an alias)."""
    return [f for f in fields if not (columns[f] in row if f in columns else any(a in row for a in aliases[f]))]


def _did_you_mean(field: str, names: tuple[str, ...], found: list[str]) -> str | None:
    best, score = None, 0.0
    for col in found:
        low = col.lower()
        s = max(difflib.SequenceMatcher(None, low, n.lower()).ratio() for n in (field, *names))
        if any(n in low or low in n for n in (field, *names) if len(n) >= 3 and len(low) >= 3):
            s = max(s, 0.8)
        if s > score:
            best, score = col, s
    return best if score >= 0.6 else None


def schema_problem(
    source: str,
    row: dict,
    alternatives: Sequence[tuple[str, ...]],
    columns: dict[str, str],
    aliases: Mapping[str, tuple[str, ...]],
) -> str | None:
    """None when ROW's columns provide every field of one of ALTERNATIVES (sets of reader fields), else what
    is missing: the columns expected, the columns found and the ``SOURCE.columns.FIELD=COLUMN`` override that
    would map them (a did-you-mean over the row's column names)."""
    misses = [missing_fields(row, alt, columns, aliases) for alt in alternatives]
    if any(not m for m in misses):
        return None
    # the alternative closest to the row: fewest fields missing, then most fields found
    missing = min(zip(misses, alternatives), key=lambda ma: (len(ma[0]), len(ma[0]) - len(ma[1])))[0]
    found = sorted(map(str, row))
    expected, guesses = [], []
    for f in missing:
        names = (columns[f],) if f in columns else aliases[f]
        expected.append(f"{f}: {' | '.join(names)}")
        guess = _did_you_mean(f, aliases[f], [c for c in found if c not in columns.values()])
        if guess:
            guesses.append(f"{source}.columns.{f}={guess}")
    return (
        f"no column for {', '.join(missing)} (expected {'; '.join(expected)}); found columns: "
        f"{', '.join(found)}; map a column with {source}.columns.FIELD=COLUMN"
        + (f" (did you mean {' '.join(guesses)}?)" if guesses else "")
    )

"""Read records back from the formats benchlib writes."""

import csv
import io


def from_csv(text):
    reader = csv.DictReader(io.StringIO(text))
    return [dict(row) for row in reader]


def from_markdown(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("|")]
    if len(lines) < 2:
        return []
    split = lambda ln: [c.strip() for c in ln.strip("|").split("|")]  # noqa: E731
    columns = split(lines[0])
    return [dict(zip(columns, split(ln))) for ln in lines[2:]]

"""Render a Table as plain text, Markdown or CSV."""

import csv
import io

from benchlib.util import pad


def plain(table, sep="  "):
    w = table.column_widths()
    lines = [sep.join(pad(c, w[i]) for i, c in enumerate(table.columns))]
    lines.append(sep.join("-" * n for n in w))
    for cells in table.cells():
        lines.append(sep.join(pad(c, w[i]) for i, c in enumerate(cells)))
    return "\n".join(line.rstrip() for line in lines)


def markdown(table):
    head = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join(cells) + " |" for cells in table.cells()]
    return "\n".join([head, rule, *body])


def to_csv(table):
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(table.columns)
    writer.writerows(table.cells())
    return buf.getvalue()

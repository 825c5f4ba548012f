"""Helpers shared by the table renderers."""


def as_text(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def widths(grid):
    out = []
    for row in grid:
        for i, cell in enumerate(row):
            if i == len(out):
                out.append(0)
            out[i] = max(out[i], len(cell))
    return out


def pad(cell, width, align="left"):
    return cell.rjust(width) if align == "right" else cell.ljust(width)

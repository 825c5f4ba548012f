from benchlib.core import Table
from benchlib.parse import from_csv, from_markdown
from benchlib.render import markdown, plain, to_csv

ROWS = [{"name": "ada", "score": 3.25}, {"name": "bob", "score": None}, {"name": "cyd", "score": 10}]


def test_markdown_round_trip():
    t = Table(ROWS)
    back = from_markdown(markdown(t))
    assert [r["name"] for r in back] == ["ada", "bob", "cyd"]


def test_csv_round_trip_keeps_empty_cells():
    back = from_csv(to_csv(Table(ROWS)))
    assert back[1]["score"] == ""


def test_plain_aligns_columns():
    lines = plain(Table(ROWS).sort_by("score")).splitlines()
    assert lines[0].startswith("name")
    assert len({len(line.split()[0]) for line in lines[2:]}) == 1

"""docs/reference.md is what tests/config_reference.py generates from the config dataclasses, and it lists
every field of every config a command resolves."""

from __future__ import annotations

import dataclasses

from config_reference import PAGE, ROOTS, _notes, _section, generate

from midtrain.config import Config


def test_the_committed_reference_is_current():
    assert PAGE.read_text() == generate(), (
        "docs/reference.md is stale: run `.venv/bin/python tests/config_reference.py`"
    )


def _fields(cls: type[Config], seen: set[type]) -> list[tuple[str, str]]:
    import typing

    from midtrain.config import _config_class

    seen.add(cls)
    out = []
    for f in dataclasses.fields(cls):
        out.append((cls.__name__, f.name))
        sub = _config_class(typing.get_type_hints(cls)[f.name])
        if sub and sub not in seen:
            out += _fields(sub, seen)
    return out


def test_every_field_has_a_row_in_its_class_section():
    text = generate()
    seen: set[type] = set()
    for _, root in ROOTS:
        for cls_name, name in _fields(root, seen):
            section = text.split(f"\n## {cls_name}\n", 1)[1].split("\n## ", 1)[0]
            assert f"\n| `{name}` |" in section, (cls_name, name)


@dataclasses.dataclass
class _Tiny(Config):
    """A config to read notes from."""

    plain: int = 1
    beside: int = 2  # the note beside
    # the note above,
    # on two lines
    above: str = "x"
    both: bool = True  # and beside

    def check(self) -> None:
        pass  # a method's comment is no field's note


def test_a_field_note_is_its_source_comment():
    assert _notes(_Tiny) == {
        "beside": "the note beside",
        "above": "the note above, on two lines",
        "both": "and beside",
    }


def test_a_class_without_a_docstring_gets_no_signature_line():
    @dataclasses.dataclass
    class Bare(Config):
        n: int = 0

    out: list[str] = []
    _section(Bare, "here", out, set())
    assert out[2] == "Set in here." and "Bare(" not in "\n".join(out)

from dataclasses import dataclass, field

import pytest

from midtrain.config import Config, ConfigError, require


@dataclass
class Inner(Config):
    lr: float = 1e-3
    steps: int = 10
    style: str = "wsd"
    tags: list[str] = field(default_factory=list)

    def check(self) -> None:
        require(self.steps > 0, "steps", "must be positive")


@dataclass
class Outer(Config):
    name: str = "x"
    flag: bool = False
    maybe: int | None = None
    inner: Inner = field(default_factory=Inner)


def test_override_nested_typed():
    cfg = Outer().apply_overrides(["inner.lr=3e-4", "inner.steps=5", "flag=true", "maybe=7", "inner.tags=[a, b]"])
    assert cfg.inner.lr == pytest.approx(3e-4) and isinstance(cfg.inner.lr, float)
    assert cfg.inner.steps == 5 and cfg.flag is True and cfg.maybe == 7
    assert cfg.inner.tags == ["a", "b"]
    assert Outer().inner.lr == 1e-3  # original untouched


def test_int_promotes_to_float_and_null_to_none():
    cfg = Outer(maybe=3).apply_overrides(["inner.lr=1", "maybe=null"])
    assert cfg.inner.lr == 1.0 and isinstance(cfg.inner.lr, float)
    assert cfg.maybe is None


def test_unknown_field_suggests_closest():
    with pytest.raises(ConfigError, match=r"unknown field 'inner.stpes'.*did you mean 'steps'"):
        Outer().apply_overrides(["inner.stpes=3"])
    with pytest.raises(ConfigError, match=r"unknown field 'inr'.*did you mean 'inner'"):
        Outer().apply_overrides(["inr.lr=3"])


def test_wrong_type_names_field_and_type():
    with pytest.raises(ConfigError, match=r"inner.steps: expected int, got 'many'"):
        Outer().apply_overrides(["inner.steps=many"])
    with pytest.raises(ConfigError, match=r"flag: expected bool"):
        Outer().apply_overrides(["flag=3"])
    with pytest.raises(ConfigError, match=r"not of the form key=value"):
        Outer().apply_overrides(["flag"])


def test_validate_names_field():
    cfg = Outer().apply_overrides(["inner.steps=0"])
    with pytest.raises(ConfigError, match=r"^inner.steps: must be positive"):
        cfg.validate()
    cfg = Outer()
    cfg.inner.lr = "fast"  # type: ignore[assignment]  # a wrong type behind the parser's back: validate catches it
    with pytest.raises(ConfigError, match=r"inner.lr: expected float"):
        cfg.validate()


def test_yaml_round_trip():
    cfg = Outer(name="run", flag=True, maybe=2, inner=Inner(lr=2e-5, steps=3, tags=["t"]))
    text = cfg.to_yaml()
    back = Outer.from_yaml(text)
    assert back == cfg
    assert back.to_yaml() == text


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="unknown field 'inner.lrr'"):
        Outer.from_dict({"inner": {"lrr": 1.0}})


def test_replace_is_typed_and_keeps_text_as_text():
    from pathlib import Path

    base = Outer()
    cfg = base.replace(name="1e3", maybe=None, inner={"lr": 1, "tags": ["true"]})
    assert type(cfg) is Outer and cfg.name == "1e3" and cfg.inner.tags == ["true"]
    assert cfg.inner.lr == 1.0 and isinstance(cfg.inner.lr, float)
    assert base.replace(name=Path("runs/a")).name == "runs/a"
    # a copy: changing it leaves the original (and the sub-configs it did not change) alone
    cfg.inner.steps = 99
    assert base.inner.steps == 10 and base.inner.lr == 1e-3
    with pytest.raises(ConfigError, match=r"unknown field 'inner\.lrr' \(did you mean 'lr'\?\)"):
        base.replace(inner={"lrr": 1})
    with pytest.raises(ConfigError, match=r"inner\.steps: expected int"):
        base.replace(inner={"steps": "five"})


def test_to_overrides_reads_back_exactly():
    """The overrides a command line carries rebuild the config, strings that look like numbers included."""
    cfg = Outer().replace(name="1e3", flag=True, inner={"lr": 1e-5, "style": "null", "tags": ["1e3", "a: b"]})
    overrides = cfg.to_overrides()
    assert "name='1e3'" in overrides and Outer().to_overrides() == []
    assert Outer().apply_overrides(overrides) == cfg

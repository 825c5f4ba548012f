"""Typed configuration: dataclasses with ``key=value`` overrides, ``validate()`` and YAML round-trip.

A config is a tree of :class:`Config` dataclasses. Recipes (recipes/) are Python functions returning one;
users change fields with dotlist overrides (``optim.lr=3e-4``). Every error names the field.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path, PurePath
from typing import Any, Literal, Self, Union, get_args, get_origin

import yaml


class ConfigError(ValueError):
    """A config problem; the message names the offending field."""


def _suggest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else f" (valid: {', '.join(sorted(options))})"


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Check ``value`` against type ``tp`` and convert where lossless (int -> float, dict -> Config)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        errors = []
        for arg in get_args(tp):
            try:
                return _coerce(value, arg, path)
            except ConfigError as e:
                errors.append(e)
        raise ConfigError(f"{path}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{path}: expected None, got {value!r}")
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise ConfigError(f"{path}: expected one of {_type_name(tp)}, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
        args = get_args(tp)
        item_tp = args[0] if args else Any
        return [_coerce(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
        kt, vt = get_args(tp) or (Any, Any)
        return {_coerce(k, kt, f"{path}.<key>"): _coerce(v, vt, f"{path}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Config):
        if isinstance(value, tp):
            return value
        if isinstance(value, dict):
            return tp.from_dict(value, _path=path)
        raise ConfigError(f"{path}: expected a mapping for {tp.__name__}, got {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected bool (true/false), got {value!r} ({type(value).__name__})")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}: expected float, got {value!r} ({type(value).__name__})")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: expected int, got {value!r} ({type(value).__name__})")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{path}: expected str, got {value!r} ({type(value).__name__})")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{path}: expected {tp.__name__}, got {value!r} ({type(value).__name__})")
    return value


_SCI_FLOAT = re.compile(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+")


def _parse_scalar(text: str) -> Any:
    """Parse the right-hand side of ``key=value`` with YAML rules (1e-4, true, [1, 2], null)."""
    if _SCI_FLOAT.fullmatch(text.strip()):  # YAML 1.1 reads '3e-4' as a string
        return float(text)
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def _override_text(value: Any) -> str:
    """``value`` as the right-hand side of an override that ``_parse_scalar`` reads back exactly."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    if isinstance(value, str) and _parse_scalar(text) != value:  # '1e3' would read back as 1000.0
        text = yaml.safe_dump(value, default_style="'", width=10_000).strip()
    return text


@dataclasses.dataclass
class Config:
    """Base for all config dataclasses."""

    # -- introspection -------------------------------------------------------------------------
    @classmethod
    def _hints(cls) -> dict[str, Any]:
        return typing.get_type_hints(cls)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    # -- dict / YAML ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            out[f.name] = _to_plain(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], _path: str = "") -> Self:
        if not isinstance(data, dict):
            raise ConfigError(f"{_path or cls.__name__}: expected a mapping, got {data!r}")
        hints = cls._hints()
        names = cls.field_names()
        kwargs = {}
        for key, value in data.items():
            path = f"{_path}.{key}" if _path else key
            if key not in names:
                raise ConfigError(f"unknown field '{path}'{_suggest(key, names)}")
            kwargs[key] = _coerce(value, hints[key], path)
        try:
            return cls(**kwargs)
        except TypeError as e:  # a required field is missing
            raise ConfigError(f"{_path or cls.__name__}: {e}") from None

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False, width=100)

    def save_yaml(self, path: str | Path) -> None:
        """Write atomically (a temporary file renamed into place): a killed writer or a full disk never
        leaves a cut config that would read back as defaults for its missing fields."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.to_yaml())
        tmp.replace(path)

    @classmethod
    def from_yaml(cls, text_or_path: str | Path) -> Self:
        text = Path(text_or_path).read_text() if isinstance(text_or_path, Path) else text_or_path
        return cls.from_dict(yaml.safe_load(text) or {})

    # -- overrides -------------------------------------------------------------------------------
    def apply_overrides(self, overrides: list[str]) -> Self:
        """Return a copy with ``a.b.c=value`` overrides applied (typed; unknown keys rejected)."""
        data = self.to_dict()
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override '{item}' is not of the form key=value")
            key, raw = item.split("=", 1)
            key = key.strip()
            if not key:
                raise ConfigError(f"override '{item}' has an empty key")
            self._check_path(key)
            node = data
            parts = key.split(".")
            for part in parts[:-1]:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
            node[parts[-1]] = _parse_scalar(raw)
        return type(self).from_dict(data)

    def follow_overrides(self, overrides: list[str]) -> Self:
        """The config a command line resolves to, after ``apply_overrides(overrides)``: a class whose fields
        follow others the user set (a protocol's report_dir follows its ``output=``) changes them here, so
        every command that resolves one (``midtrain config``, the run itself) shows and uses the same config.
        The base class has no such fields."""
        return self

    def replace(self, **changes: Any) -> Self:
        """A copy with these fields changed, typed: each value is checked against its field's type (no text is
        parsed, so a path or a name stays what it is); a sub-config takes a mapping of its own changes
        (``parallel={"tensor": 1}``) or a whole config. The copy shares nothing with ``self``."""
        return copy.deepcopy(self)._replaced(changes, "")

    def _replaced(self, changes: dict[str, Any], prefix: str) -> Self:
        hints, names = self._hints(), self.field_names()
        for key, value in changes.items():
            path = f"{prefix}{key}"
            if key not in names:
                raise ConfigError(f"unknown field '{path}'{_suggest(key, names)}")
            current = getattr(self, key)
            if isinstance(current, Config) and isinstance(value, dict):
                value = current._replaced(value, path + ".")
            elif isinstance(value, PurePath):
                value = str(value)
            setattr(self, key, _coerce(copy.deepcopy(value), hints[key], path))
        return self

    def to_overrides(self, _prefix: str = "") -> list[str]:
        """``key=value`` overrides that turn ``type(self)()`` into ``self`` (changed fields only), for a command
        line: ``apply_overrides`` reads each back to the same value (a string that would read as a number or
        a boolean is quoted)."""
        default = type(self)()
        out = []
        for key in self.field_names():
            value, base = getattr(self, key), getattr(default, key)
            if isinstance(value, Config):
                out += value.to_overrides(f"{_prefix}{key}.")
            elif value != base:
                out.append(f"{_prefix}{key}={_override_text(value)}")
        return out

    @classmethod
    def _check_path(cls, key: str) -> None:
        """Reject an unknown dotted key with the closest valid name, before any value is parsed."""
        tp: Any = cls
        walked = []
        for part in key.split("."):
            walked.append(part)
            sub = _config_class(tp)
            if sub is None:
                if get_origin(tp) is dict or tp is Any:
                    return  # free-form mapping
                raise ConfigError(f"'{'.'.join(walked[:-1])}' is a {_type_name(tp)}, it has no field '{part}'")
            names = sub.field_names()
            if part not in names:
                where = ".".join(walked[:-1])
                full = f"{where}.{part}" if where else part
                raise ConfigError(f"unknown field '{full}'{_suggest(part, names)}")
            tp = sub._hints()[part]

    # -- validation ------------------------------------------------------------------------------
    def validate(self) -> Self:
        """Check the whole tree without I/O; raise ConfigError naming the field. Returns self."""
        self._validate_tree("")
        return self

    def _validate_tree(self, prefix: str) -> None:
        hints = self._hints()
        for f in dataclasses.fields(self):
            path = f"{prefix}{f.name}"
            value = getattr(self, f.name)
            _coerce(value, hints[f.name], path)
            if isinstance(value, Config):
                value._validate_tree(path + ".")
        try:
            self.check()
        except ConfigError as e:
            if prefix and not str(e).startswith(prefix):
                raise ConfigError(f"{prefix}{e}") from None
            raise

    def check(self) -> None:
        """Per-class semantic checks; override and raise ConfigError('field: why')."""


def _config_class(tp: Any) -> type[Config] | None:
    if isinstance(tp, type) and issubclass(tp, Config):
        return tp
    if get_origin(tp) in (Union, types.UnionType):
        for arg in get_args(tp):
            if isinstance(arg, type) and issubclass(arg, Config):
                return arg
    return None


def _to_plain(value: Any) -> Any:
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def require(condition: bool, field: str, message: str) -> None:
    """Raise ConfigError('field: message') unless condition holds (for use in ``check()``)."""
    if not condition:
        raise ConfigError(f"{field}: {message}")

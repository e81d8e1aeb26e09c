"""The `config=` keyword of functions with a Triton JIT implementation.

It lives in the core because the schema is checked whatever the slot a call
takes, before anything is built.

Two forms (docs/behaviour.md, "Triton JIT config"):

- a compile config ``{"num_warps": int, "num_stages": int, "constexprs":
  {name: int}}``, every key optional (4, 3 and the kernel's defaults);
- an auto-tuning config ``{"auto_tuning": {"warmup_milliseconds": int = 25,
  "repetition_milliseconds": int = 100, "keys": [str], "candidates":
  [<compile config>, ...]}}``, with `auto_tuning` the only top-level key.

Unknown keys at any level raise ``ValueError("Unknown Triton JIT config field
`<name>`.")``. Checks the original leaves to release-mode asserts (empty
candidates, negative durations, malformed values) raise `ValueError` here.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3
DEFAULT_WARMUP_MILLISECONDS = 25
DEFAULT_REPETITION_MILLISECONDS = 100

_COMPILE_FIELDS = ("num_warps", "num_stages", "constexprs")
_AUTO_TUNING_FIELDS = (
    "warmup_milliseconds",
    "repetition_milliseconds",
    "keys",
    "candidates",
)


@dataclass(frozen=True)
class CompileConfig:
    """Launch options and constexpr values; `constexprs` is sorted by name."""

    num_warps: int = DEFAULT_NUM_WARPS
    num_stages: int = DEFAULT_NUM_STAGES
    constexprs: tuple[tuple[str, int], ...] = ()

    def with_defaults(self, defaults: dict) -> CompileConfig:
        """The config with the kernel's default constexprs filled in."""
        merged = dict(defaults)
        merged.update(self.constexprs)
        return CompileConfig(
            self.num_warps, self.num_stages, tuple(sorted(merged.items()))
        )

    def to_json(self) -> dict:
        return {
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "constexprs": dict(self.constexprs),
        }


@dataclass(frozen=True)
class AutoTuningConfig:
    warmup_milliseconds: int = DEFAULT_WARMUP_MILLISECONDS
    repetition_milliseconds: int = DEFAULT_REPETITION_MILLISECONDS
    keys: tuple[str, ...] = ()
    candidates: tuple[CompileConfig, ...] = ()


def _unknown(name) -> ValueError:
    return ValueError(f"Unknown Triton JIT config field `{name}`.")


def _check_fields(value: dict, known) -> None:
    for name in value:
        if name not in known:
            raise _unknown(name)


def _integer(value, what: str) -> int:
    # `bool` is an `int` in Python, but never what a caller means here.
    if type(value) is bool or not hasattr(value, "__index__"):
        raise ValueError(
            f"The Triton JIT config field `{what}` must be an integer, got {value!r}."
        )
    return int(value.__index__())


def _positive(value, what: str) -> int:
    number = _integer(value, what)
    if number <= 0:
        raise ValueError(
            f"The Triton JIT config field `{what}` must be positive, got {number}."
        )
    return number


def parse_compile_config(value, where: str = "") -> CompileConfig:
    if not isinstance(value, dict):
        raise ValueError(
            f"A Triton JIT compile config{where} must be a dict, got {value!r}."
        )
    _check_fields(value, _COMPILE_FIELDS)
    num_warps = _positive(value.get("num_warps", DEFAULT_NUM_WARPS), "num_warps")
    if num_warps & (num_warps - 1):
        raise ValueError(
            "The Triton JIT config field `num_warps` must be a power of two, "
            f"got {num_warps}."
        )
    num_stages = _positive(value.get("num_stages", DEFAULT_NUM_STAGES), "num_stages")
    constexprs = value.get("constexprs", {})
    if not isinstance(constexprs, dict):
        raise ValueError(
            "The Triton JIT config field `constexprs` must be a dict of names to "
            f"integers, got {constexprs!r}."
        )
    items = []
    for name, number in constexprs.items():
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"Triton JIT constexpr names must be non-empty strings, got {name!r}."
            )
        items.append((name, _integer(number, f"constexprs.{name}")))
    return CompileConfig(num_warps, num_stages, tuple(sorted(items)))


def parse_auto_tuning_config(value) -> AutoTuningConfig:
    if not isinstance(value, dict):
        raise ValueError(
            f"The Triton JIT config field `auto_tuning` must be a dict, got {value!r}."
        )
    _check_fields(value, _AUTO_TUNING_FIELDS)
    warmup = _integer(
        value.get("warmup_milliseconds", DEFAULT_WARMUP_MILLISECONDS),
        "warmup_milliseconds",
    )
    repetition = _integer(
        value.get("repetition_milliseconds", DEFAULT_REPETITION_MILLISECONDS),
        "repetition_milliseconds",
    )
    keys = value.get("keys", [])
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        raise ValueError(
            "The Triton JIT config field `keys` must be a list of tuning value "
            f"names, got {keys!r}."
        )
    for key in keys:
        if not isinstance(key, str):
            raise ValueError(
                f"Auto-tuning keys must be tuning value names, got {key!r}."
            )
    candidates = value.get("candidates", [])
    if not isinstance(candidates, (list, tuple)):
        raise ValueError(
            "The Triton JIT config field `candidates` must be a list of compile "
            f"configs, got {candidates!r}."
        )
    parsed = tuple(
        parse_compile_config(candidate, f" (candidate {index})")
        for index, candidate in enumerate(candidates)
    )
    if not parsed:
        raise ValueError("At least one auto-tuning candidate is required.")
    if warmup < 0:
        raise ValueError("The auto-tuning warmup duration must not be negative.")
    if repetition <= 0:
        raise ValueError("The auto-tuning repetition duration must be positive.")
    return AutoTuningConfig(warmup, repetition, tuple(keys), parsed)


def parse_config(value) -> CompileConfig | AutoTuningConfig:
    """The config a `config=` dict describes; `ValueError` when malformed."""
    if isinstance(value, (CompileConfig, AutoTuningConfig)):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"A Triton JIT config must be a dict, got {value!r}.")
    if "auto_tuning" in value:
        for name in value:
            if name != "auto_tuning":
                raise ValueError(
                    f"Unknown Triton JIT config field `{name}`: `auto_tuning` "
                    "must be the only top-level field."
                )
        return parse_auto_tuning_config(value["auto_tuning"])
    return parse_compile_config(value)


def check_keys(keys, tuning_values: dict, operator: str) -> tuple[str, ...]:
    """The auto-tuning keys (all tuning values when `keys` is empty)."""
    if not keys:
        return tuple(tuning_values)
    seen = []
    for key in keys:
        if key not in tuning_values:
            names = ", ".join(tuning_values)
            raise ValueError(
                f"Unknown auto-tuning key `{key}`; the tuning values of "
                f"`{operator}` are: {names}."
            )
        if key in seen:
            raise ValueError(f"The auto-tuning key `{key}` appears more than once.")
        seen.append(key)
    return tuple(seen)

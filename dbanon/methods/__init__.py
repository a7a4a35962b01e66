"""The method registry: every publishing method, by name.

The CLI's `--algorithm` choices, `dbanon methods`, `publish --help` and the README's method table
all come from here. A method is one module of this package that registers an instance; a method
kept elsewhere (a plug-in, a test's toy) registers itself the same way.
"""

from __future__ import annotations

from importlib import import_module

from dbanon.errors import DbanonError
from dbanon.methods.base import BuildContext, Built, Check, Method, Option

__all__ = ["Built", "BuildContext", "Check", "Method", "Option", "get", "methods", "register"]

_REGISTRY: dict[str, Method] = {}
# The built-in methods, in the order they are listed (the default first).
BUILTIN = (
    "kmember", "mondrian", "fulldomain", "anatomy", "thetak", "ina", "noise", "rfka", "hamdist",
    "cbg", "localanatomy", "lag", "safepub",
)
DEFAULT = "kmember"


def register(method: Method) -> Method:
    """Add a method (replacing one of the same name); returns it, so it can decorate."""
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _load_builtin() -> None:
    for name in BUILTIN:
        if name not in _REGISTRY:
            import_module(f"dbanon.methods.{name}")


def methods() -> dict[str, Method]:
    _load_builtin()
    return dict(_REGISTRY)


def get(name: str) -> Method:
    found = methods().get(name)
    if found is None:
        raise DbanonError(f"unknown method {name!r} (choose from {', '.join(methods())})")
    return found


def markdown_table() -> str:
    """The README's method table: name, what it can promise, its options, what it does."""
    from dbanon.models.specs import MODEL_KINDS

    lines = ["| method | promises | options | how |", "|---|---|---|---|"]
    for m in methods().values():
        by_flag: dict[str, list[str]] = {}
        for p in m.promises:
            by_flag.setdefault(MODEL_KINDS[p].option, []).append(p)
        promises = ", ".join(
            f"`{flag}`"
            + (f" ({', '.join(k.removesuffix('-l-diversity') for k in kinds)})"
               if flag == "--l" else "")
            for flag, kinds in by_flag.items()
        )
        promises = promises or "no class model: checks of its own"
        options = ", ".join(f"`{o.flag}`" for o in m.all_options()) or "-"
        default = " (default)" if m.name == DEFAULT else ""
        lines.append(f"| `{m.name}`{default} | {promises} | {options} | {m.summary} |")
    return "\n".join(lines)


def releases_table() -> str:
    """The README's table of releases: what each method releases, column by column, and the
    attacker its guarantee holds against (each method's `releases` and `attacker`)."""
    lines = [
        "| method | what it releases, column by column | the attacker its guarantee holds "
        "against |",
        "|---|---|---|",
    ]
    for m in methods().values():
        lines.append(f"| `{m.name}` | {m.releases} | {m.attacker} |")
    return "\n".join(lines)

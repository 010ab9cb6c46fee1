"""How ``--help`` reads in a terminal: typer's command and group classes with three fixes.

Every command (``cls=Command``) and group (``cls=Group``) of the ``sgdask`` tree uses them;
the options' help, metavars and panels are declared with the options. At 80 columns rich
cuts an option's name, metavar or default with "…" when the table is too wide, so the help
lines are short and the options grouped into panels (each panel is its own table).
"""

from __future__ import annotations

import inspect
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


def _rewrapped(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line, so the terminal wraps them (typer keeps the
    source's line breaks inside every paragraph but the first)."""
    if text is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class _Argument(TyperArgument):
    """An argument shown by its name alone (typer prints its Python type beside it)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _without_types(params: list[Any]) -> None:
    """Flags show no ``<bool>`` and arguments no Python type in ``--help``."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
        elif isinstance(param, TyperArgument):
            param.__class__ = _Argument


class _ReadableHelp:
    """``--help`` that reads well at 80 columns: see ``_rewrapped`` and ``_without_types``
    (mixed into typer's command and group classes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _rewrapped(self.help)
        _without_types(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            _without_types([option])
        return option


class Command(_ReadableHelp, TyperCommand):
    """A command whose ``--help`` reads well at 80 columns."""


class Group(_ReadableHelp, TyperGroup):
    """A command group whose ``--help`` reads well at 80 columns."""

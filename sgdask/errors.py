"""The one exception users see: a one-line message naming file, image and field, and how to
fix it, kept as data and rendered for whoever reads it.

An error's message is text and ``Option`` pieces (a setting or argument by its Python API
name: ``ks``, ``gt``); its ``fix`` is a ``Fix`` record (raise a limit, choose among names).
``render`` writes them for one audience:

- ``"cli"``: options as the command line's flags (``--k``, ``--limit max_entries=N``), what
  the ``sgdask`` command prints;
- ``"api"``: options as the Python API's argument names (``ks``,
  ``limits=ArchiveLimits(max_entries=N)``); ``str(err)`` is this rendering;
- ``"http"``: what the benchmarking service shows: argument names, a limit as the server's
  (no flag), and no host path: storage locations by the names in ``names``, other files by
  their basename.

Adding a hint is one keyword at the raise site (``fix=Choose(given, known)``; an input
error's ``expected=limit_hint(limits, "max_entries")``); a new kind of hint is one small
``Fix`` class.
"""

from __future__ import annotations

import copy
import difflib
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Audience = Literal["cli", "api", "http"]
#: longest message (before its fix) an error renders: input echoed into a message (a name,
#: a value) never makes a line longer than this; the cut says how much was left out
MAX_MESSAGE = 400
#: API names whose command line option is not ``--`` and the name with dashes (the settings
#: record's fields take their ``flag`` from here: ``sgdask.core.settings``)
_FLAGS = {"protocols": "--protocol", "ks": "--k", "legacy": "--legacy-metrics",
          "limits": "--limit"}


@dataclass(frozen=True)
class Option:
    """A setting or argument named in a message, by its Python API name (a ``Settings``
    field, a keyword argument); ``value``, if any, is shown with it (``--ci LEVEL`` on the
    command line, ``ci=LEVEL`` in Python; ``True``: a switch, ``--overwrite``)."""

    name: str
    value: object = None

    def render(self, audience: Audience) -> str:
        if audience == "cli":
            flag = cli_flag(self.name)
            return flag if self.value is None or self.value is True else f"{flag} {self.value}"
        return self.name if self.value is None else f"{self.name}={self.value}"


#: text that may name options: ``("only with ", Option("ci", "LEVEL"))``
Text = str | tuple[str | Option, ...]


class Fix:
    """How to fix an error, as data: ``render`` is its clause for one audience, written after
    the message (in parentheses)."""

    def render(self, audience: Audience) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class RaiseLimit(Fix):
    """A limit on untrusted input was exceeded: ``name`` is its ``ArchiveLimits`` field,
    ``value`` its value now."""

    name: str
    value: int | float

    def render(self, audience: Audience) -> str:
        shown = f"{self.value:g}" if isinstance(self.value, float) else str(self.value)
        how = {"cli": f"; raise with --limit {self.name}=N",
               "api": f"; raise with limits=ArchiveLimits({self.name}=N)",
               "http": f", the server's limit {self.name}; ask the maintainers to raise it"}
        return f"(expected at most {shown}{how[audience]})"


@dataclass(frozen=True)
class Choose(Fix):
    """``given`` is not one of the names ``choices``: the nearest one, if any, and all."""

    given: str
    choices: tuple[str, ...]

    def render(self, audience: Audience) -> str:
        near = difflib.get_close_matches(self.given, self.choices, n=1)
        mean = f"(did you mean {near[0]!r}?) " if near else ""
        return f"{mean}(expected one of: {', '.join(self.choices)})"


@dataclass(frozen=True)
class Hint(Fix):
    """What to do instead, as text that may name options: ``(pass it as --gt)``."""

    text: str | tuple[str | Option, ...]

    def render(self, audience: Audience) -> str:
        pieces = (self.text,) if isinstance(self.text, str) else self.text
        return "(" + "".join(_rendered(p, audience, None) for p in pieces) + ")"


class SgdaskError(Exception):
    """A problem a user can act on: ``parts`` (text, ``Option`` and ``SgdaskError``
    pieces) and ``fix``. ``str(err)`` is the Python API's rendering; ``render`` gives the
    others. Picklable with all of it, so errors raised on Dask workers arrive whole."""

    def __init__(self, *parts: str | Option | SgdaskError, fix: Fix | None = None) -> None:
        super().__init__(*parts)
        self.parts, self.fix = parts, fix

    def pieces(self) -> tuple[str | Option | SgdaskError, ...]:
        """The message's pieces, before the fix."""
        return self.parts

    def render(self, audience: Audience = "api", names: Mapping[str, str] | None = None
               ) -> str:
        """The one-line message for ``audience``; ``names`` maps storage locations to what
        to show instead (the service: the uploaded file's name, a submission id)."""
        text = cut("".join(_rendered(piece, audience, names) for piece in self.pieces()))
        return f"{text} {self.fix.render(audience)}" if self.fix is not None else text

    def __str__(self) -> str:
        return self.render("api")

    def renamed(self, names: Mapping[str, str]) -> SgdaskError:
        """This error with the options in ``names`` called by their new names (a function
        whose argument is called otherwise than the setting: ``protocol`` for
        ``protocols``)."""
        err = copy.copy(self)
        err.parts = tuple(Option(names.get(p.name, p.name), p.value)
                          if isinstance(p, Option) else p for p in self.parts)
        return err

    def __reduce__(self) -> tuple:
        return (_rebuilt, (type(self), self.__dict__))


def _rebuilt(cls: type[SgdaskError], state: dict) -> SgdaskError:
    err = cls.__new__(cls)
    err.__dict__.update(state)
    err.args = state.get("parts", ())
    return err


def cut(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text``, or its first ``limit`` characters and how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class SettingError(SgdaskError, ValueError):
    """A setting or argument with a bad value: ``SETTING: what``. A ``ValueError`` to Python
    callers, its message naming the argument (``ks: ...``); the command line names the
    option (``--k: ...``)."""

    def __init__(self, setting: str, *what: str | Option, fix: Fix | None = None) -> None:
        super().__init__(Option(setting), ": ", *what, fix=fix)

    @property
    def setting(self) -> str:
        """The API name of the setting (``ks``)."""
        option = self.parts[0]
        assert isinstance(option, Option)
        return option.name


def checked_choice(setting: str, given: str, choices: tuple[str, ...], what: str) -> str:
    """``given``, if it is one of ``choices``; else a ``SettingError`` naming ``setting``,
    the nearest choice and all (``--method psgtrr``: did you mean 'psgtr'?)."""
    if given not in choices:
        raise SettingError(setting, f"{given!r} is not a {what}", fix=Choose(given, choices))
    return given


class InputError(SgdaskError):
    """Malformed input: says which file, which image, which field, and what was expected:
    text (which may name options), or a ``Fix`` that says it and how to get there
    (``RaiseLimit``: at most N, and how to raise the limit), kept as the error's ``fix``."""

    def __init__(
        self,
        file: str,
        what: Text,
        *,
        image: object | None = None,
        field: str | Option | None = None,
        expected: Text | Fix | None = None,
    ) -> None:
        fix = expected if isinstance(expected, Fix) else None
        self.file, self.image, self.field, self.what = file, image, field, what
        self.expected = None if fix is not None else expected
        super().__init__(*_pieces(what), fix=fix)

    def pieces(self) -> tuple[str | Option | SgdaskError, ...]:
        parts: list[str | Option] = [_Location(self.file)]
        if self.image is not None:
            parts.append(f"image {self.image}")
        if self.field is not None:
            parts.append(self.field)
        expected = () if self.expected is None else (
            " (expected ", *_pieces(self.expected), ")")
        return (*_joined(parts, ": "), ": ", *_pieces(self.what), *expected)


class VideoInputError(InputError):
    """Malformed video input (PVSG's annotation, frame PNGs, a model's tubes and relations):
    the file, the video, the frame (if one) and the field, and what was expected."""

    def __init__(self, file: str, what: Text, *, video: object | None = None,
                 frame: int | None = None, field: str | None = None,
                 expected: Text | Fix | None = None) -> None:
        self.video, self.frame = video, frame
        super().__init__(file, what, field=field, expected=expected)

    def pieces(self) -> tuple[str | Option | SgdaskError, ...]:
        where = [f"video {self.video}"] if self.video is not None else []
        where += [f"frame {self.frame}"] if self.frame is not None else []
        head, *rest = super().pieces()
        return (head, *(piece for w in where for piece in (": ", w)), *rest)


class InstanceMismatch(ValueError):
    """Raised by a kernel when a prediction and its GT share no instance representation
    (masks or boxes): the one kernel failure caused by the inputs rather than by a bug.
    ``parts``: its text and ``Option`` pieces, which the ``InputError`` naming the image
    carries on."""

    def __init__(self, *parts: str | Option) -> None:
        super().__init__(*parts)
        self.parts = parts

    def __str__(self) -> str:
        return "".join(_rendered(piece, "api", None) for piece in self.parts)


class SgdaskWarning(UserWarning):
    """Something a user should know that does not stop the command (the CLI prints it as
    one ``sgdask: warning: ...`` line): text and ``Option`` pieces, rendered like an
    error's (``str``: the Python API's rendering)."""

    def __init__(self, *parts: str | Option) -> None:
        super().__init__(*parts)
        self.parts = parts

    def render(self, audience: Audience = "api") -> str:
        return "".join(_rendered(piece, audience, None) for piece in self.parts)

    def __str__(self) -> str:
        return self.render("api")


class StoreError(SgdaskError):
    """A canonical store is missing, incomplete, of the wrong kind or would be overwritten."""


class _Location(str):
    """The file an ``InputError`` names: for the service, by its name in ``names`` (an
    entry of an archive, ``URL:member``, or a file under a directory, ``URL/name``, by the
    name of the archive or directory), else by its basename."""

    def public(self, names: Mapping[str, str]) -> str:
        for location in sorted(names, key=len, reverse=True):
            if self == location or (self.startswith(location)
                                    and self[len(location)] in ":/"):
                return names[location] + self[len(location):]
        path, colon, member = self.rpartition("://")[2].partition(":")
        return posixpath.basename(path.rstrip("/")) + colon + member


def _pieces(text: Text) -> tuple[str | Option, ...]:
    return (text,) if isinstance(text, str) else text


def _joined(parts: list[str | Option], separator: str) -> list[str | Option]:
    joined: list[str | Option] = []
    for part in parts:
        joined += [separator, part] if joined else [part]
    return joined


def _rendered(piece: str | Option | SgdaskError, audience: Audience,
              names: Mapping[str, str] | None) -> str:
    """One piece of a message; in text, the storage locations of ``names`` by their names
    (longest first: a file under a directory before the directory)."""
    if isinstance(piece, Option):
        return piece.render(audience)
    if isinstance(piece, SgdaskError):
        return piece.render(audience, names)
    names = names or {}
    if audience == "http" and isinstance(piece, _Location):
        return piece.public(names)
    for location in sorted(names, key=len, reverse=True):
        piece = piece.replace(location, names[location])
    return piece


def cli_flag(name: str) -> str:
    """The command line's option for the API name ``name`` (``ks``: ``--k``, ``limits``:
    ``--limit``), else ``--`` and the name with dashes (``partition_size``:
    ``--partition-size``)."""
    return _FLAGS.get(name) or "--" + name.replace("_", "-")

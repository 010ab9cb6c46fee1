"""Setting documents read strictly: JSON and YAML that a person writes (a benchmark file,
a ``--predicate-groups`` file), where what a lenient parser would do silently is refused in
one line naming the file.

- a key given twice in one object (``visibility: private`` then ``public``; a second
  ``phases:``), where the parsers keep the last one;
- nesting deeper than ``MAX_DEPTH`` (the parsers recurse: thousands deep is a
  ``RecursionError``);
- integers of more digits than Python converts (4,300), and YAML timestamps that cannot be
  told in UTC (``9999-12-31T23:00:00-05:00``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import yaml

from sgdask.errors import InputError
from sgdask.io.archive import printable

#: deepest nesting of a setting document (the benchmark schema needs 4)
MAX_DEPTH = 32
#: longest key or value a message shows
SHOWN = 60


def shown(value: object) -> str:
    """``value``'s repr, printable and cut to ``SHOWN`` characters."""
    text = printable(repr(value))
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def strict_json(data: bytes | str, file: str, expected: str | None = None) -> Any:
    """A JSON setting document, or the ``InputError`` saying why not: not JSON, a key twice
    in one object, nested deeper than ``MAX_DEPTH``."""
    try:
        doc = json.loads(data, object_pairs_hook=_unique_keys)
    except _DuplicateKey as err:
        raise InputError(file, f"key {shown(err.key)} given twice in one object",
                         expected="each key once") from None
    except RecursionError:
        raise InputError(file, "nested too deeply",
                         expected=f"at most {MAX_DEPTH} levels") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise InputError(file, f"not JSON ({printable(str(err))})", expected=expected) \
            from None
    if _depth(doc) > MAX_DEPTH:
        raise InputError(file, "nested too deeply", expected=f"at most {MAX_DEPTH} levels")
    return doc


def strict_yaml(text: str, file: str) -> Any:
    """A YAML (or JSON) setting document, or the ``InputError`` saying why not."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader
    except yaml.YAMLError as err:
        raise InputError(file, f"not valid YAML ({printable(' '.join(str(err).split()))})") \
            from None
    except RecursionError:
        raise InputError(file, "nested too deeply",
                         expected=f"at most {MAX_DEPTH} levels") from None
    except (ValueError, OverflowError) as err:  # an integer of too many digits
        raise InputError(file, f"not valid YAML ({printable(str(err))})") from None


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _depth(doc: Any) -> int:
    """How deep a parsed document nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else \
            node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:
            stack.extend((child, depth + 1) for child in children)
    return deepest


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing duplicate keys, nesting past ``MAX_DEPTH``, and
    timestamps outside what a UTC ``datetime`` holds."""

    _nesting = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._nesting += 1
        try:
            if self._nesting > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._nesting -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                twice = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: SafeLoader says so
                continue
            if twice:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {shown(key)} given twice in one mapping",
                    key_node.start_mark)
        return super().construct_mapping(node, deep)

    def construct_yaml_timestamp(self, node: Any) -> datetime:
        when = super().construct_yaml_timestamp(node)
        try:
            if isinstance(when, datetime):
                (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)
        except OverflowError:
            raise yaml.constructor.ConstructorError(
                None, None, f"{shown(node.value)} is not a date in UTC's range",
                node.start_mark) from None
        return when


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp",
                              _StrictLoader.construct_yaml_timestamp)

"""Large JSON data documents (a submission's ``triplets.json``, psg.json, Open Images V6's
``vrd-*-anno.json``) parsed within the limits of ``ArchiveLimits``: size, the memory the
parse may take (the size times the expansion factor of the document's kind) and nesting
depth, each refused in one line naming the file. Shared by the formats that read them."""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from sgdask.errors import InputError
from sgdask.io.archive import ArchiveLimits, limit_hint, printable

DEFAULT_LIMITS = ArchiveLimits()


#: bytes of Python objects per byte of JSON, at most, by kind of document (tracemalloc's
#: peak of ``json.loads``): an upload may be built for the worst case, ``[[0],[0],...]``
#: (a list per 4 bytes: 25x); a GT file (psg.json, vrd-*-anno.json) is the maintainers',
#: objects of numbers and names (8x measured on such documents)
JSON_EXPANSION = {"submission": 26, "gt": 10}


def load_json(data: bytes, file: str, limits: ArchiveLimits = DEFAULT_LIMITS,
              kind: str = "submission") -> Any:
    """Parsed JSON within the size, memory (``kind``: ``JSON_EXPANSION``) and depth
    limits, or an InputError naming the file."""
    if len(data) > limits.max_json_size:
        raise InputError(file, f"is {len(data)} bytes", expected=limit_hint(limits,
                                                                             "max_json_size"))
    check_json_memory(len(data), file, limits, kind)
    too_deep = InputError(file, "JSON nested too deeply",
                          expected=limit_hint(limits, "max_json_depth"))
    try:
        with gc_paused():
            doc = json.loads(data)
    except RecursionError:
        raise too_deep from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise InputError(file, f"not valid JSON ({printable(str(err))})") from err
    if isinstance(data, bytes) and json.detect_encoding(data) == "utf-8":
        deeper = bracket_depth(data) > limits.max_json_depth
    else:
        deeper = nested_deeper(doc, limits.max_json_depth)
    if deeper:
        raise too_deep
    return doc



def check_json_memory(size: int, file: str, limits: ArchiveLimits, kind: str) -> None:
    """InputError when a JSON document of ``size`` bytes of ``kind`` could take more memory
    parsed than ``max_json_memory``: its size times the kind's expansion factor."""
    estimate = size * JSON_EXPANSION[kind]
    if estimate > limits.max_json_memory:
        raise InputError(file, f"is {size} bytes, up to {estimate} bytes once parsed "
                         f"({JSON_EXPANSION[kind]} x its size)",
                         expected=limit_hint(limits, "max_json_memory"))



@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block. A parsed document is millions of
    small lists without cycles; the collector's passes while they are made (each one walks
    every container made so far) cost more than the parse itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()



def bracket_depth(data: bytes) -> int:
    """How deep lists and objects nest in a UTF-8 JSON text that parses: the most open
    brackets outside strings at any point, in numpy (``nested_deeper`` walks the parsed
    document in Python, half a second for a 15 MB submission). Escaped backslashes, then
    escaped quotes, are dropped first, so that every quote left opens or closes a string."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    text = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(text == ord('"'))

    def outside_strings(positions: np.ndarray) -> np.ndarray:
        return positions[np.searchsorted(quotes, positions) % 2 == 0]

    opens = outside_strings(np.flatnonzero((text == ord("[")) | (text == ord("{"))))
    closes = outside_strings(np.flatnonzero((text == ord("]")) | (text == ord("}"))))
    # right after the k-th open bracket, k + 1 are open and the closes before it are shut
    depths = np.arange(1, len(opens) + 1) - np.searchsorted(closes, opens)
    return int(depths.max(initial=0))



def nested_deeper(doc: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels (iterative, no recursion)."""
    level = [doc] if isinstance(doc, dict | list) else []
    for _ in range(limit):
        level = [child for node in level
                 for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, dict | list)]
        if not level:
            return False
    return bool(level)

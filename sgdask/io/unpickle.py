"""A pickle reader that runs nothing from the file: only numpy arrays, dtypes and scalars,
and objects of any class named ``Result`` (as plain ``Record``s) can come out of it.

``pickle`` runs code by design: a global named in the file is imported and called. Here
every global goes through ``find_class``, which hands out only stand-ins written in this
module: numpy's array, dtype and scalar reconstructors become builders that check the dtype
(booleans, integers, floats; no objects, fields or sub-arrays) and the byte count before
they copy the bytes into a new array; a class named ``Result`` becomes ``Record``, which
keeps the attributes as a dict. No numpy or Python constructor is ever called with
arguments from the file, no module is imported, and any other global is refused by name
before anything refers to it. torch tensors get their own message (how to save numpy).

Refusing globals does not bound what the opcodes build by themselves, so ``census`` reads
every opcode before the C unpickler runs, keeping a model of its stack and memo, and refuses:

- more than ``max_objects`` objects (``--limit max_pickle_objects``, default 5 million;
  a PSG result list of 2177 images pickles to a few hundred thousand): one byte of opcode
  builds an empty set of 216 bytes, so a 5 MB file would otherwise take 1.2 GB;
- tuples nested more than ``max_depth`` deep (``--limit max_pickle_depth``, default 100):
  Python hashes tuples recursively, and a million nested tuples as a dict key overflow the
  C stack (the process dies);
- a memo index past the number of opcodes before it: the C unpickler sizes its memo table to
  twice the largest index, so a 9-byte pickle would otherwise allocate 16 GB.

The census costs a fraction of a microsecond per opcode (arrays' bytes are skipped, not
read): 0.7 s for a 530 MB list of 2177 results with 17 attributes each.
Resolving arrays afterwards (``resolved``) visits every (object, depth) pair once, within the
same object budget, so shared references stay shared: a few kilobytes of memo fan-out (lists
of a thousand references to the list below) no longer rebuild width^depth lists.
"""

from __future__ import annotations

import io
import pickle
import re
import reprlib
from collections.abc import Callable
from pickle import UnpicklingError
from typing import Any

import numpy as np

#: dtype codes numpy writes into pickles for the kinds allowed here ('b1', 'u1', 'f4', ...)
DTYPE_CODE = re.compile(r"^[<>|=]?[biuf]\d{1,2}$")
#: defaults of ``--limit max_pickle_objects`` and ``max_pickle_depth`` (``ArchiveLimits``)
MAX_OBJECTS = 5_000_000
MAX_DEPTH = 100
#: containers deeper than this stay as they are (a field that needs them fails its checks)
RESOLVE_DEPTH = 4
ALLOWED_KINDS = "biuf"
TORCH_HINT = ("save numpy arrays instead: call .cpu().numpy() on every tensor before "
              "pickling, or write one .npz per image with numpy.savez")


class Refused(Exception):
    """The pickle asks for something this reader never does; ``str()`` says what."""


class OverLimit(Refused):
    """The pickle goes past a limit ``--limit`` can raise; ``limit`` names it."""

    def __init__(self, what: str, limit: str) -> None:
        super().__init__(what)
        self.limit = limit


class Sealed(type):
    """Metaclass of the classes a pickle can name: BUILD cannot set attributes on them, so
    one file cannot change how the next one is read in the same process."""

    def __setattr__(cls, name: str, value: Any) -> None:
        raise Refused(f"sets {printable_value(name)} on {cls.__name__}")


class StandIn:
    """A function a pickle can name, wrapped so that BUILD cannot touch it."""

    __slots__ = ("call",)

    def __init__(self, call: Callable[..., Any]) -> None:
        object.__setattr__(self, "call", call)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise Refused(f"sets {printable_value(name)} on {self.call.__name__}")

    def __setstate__(self, state: Any) -> None:
        raise Refused(f"sets state on {self.call.__name__}")


class Record(metaclass=Sealed):
    """An object of a class named ``Result``: its attributes, nothing else."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Record:
        if args:
            raise Refused("a Result object built from positional arguments (expected one "
                          "whose attributes are pickled by name)")
        record = super().__new__(cls)
        record.fields = dict(kwargs)
        return record

    def __setstate__(self, state: Any) -> None:
        """BUILD: a dict of attributes, or (dict or None, slot dict) for slotted classes."""
        parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
        for part in parts:
            if part is None:
                continue
            if not isinstance(part, dict) or not all(isinstance(k, str) for k in part):
                raise Refused("a Result object whose state is not a dict of attributes")
            self.fields.update(part)


class ArrayToken(metaclass=Sealed):
    """Stands for ``numpy.ndarray`` in a pickle: accepted only as ``_reconstruct``'s first
    argument, never callable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise Refused("numpy.ndarray called directly (expected arrays as numpy pickles them)")


class ObjectToken(metaclass=Sealed):
    """Stands for ``builtins.object`` (protocol 0 and 1 name it for ``_reconstructor``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise Refused("builtins.object called directly")


class DTypeBuilder(metaclass=Sealed):
    """``numpy.dtype(code)`` as pickled: the code now, the byte order from BUILD."""

    def __init__(self, code: Any, align: Any = False, copy: Any = True) -> None:
        if not isinstance(code, str) or not DTYPE_CODE.match(code):
            raise Refused(f"numpy dtype {printable_value(code)} (expected booleans, integers "
                          "or floats)")
        self.code, self.order = code, "="

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) < 5 or any(s is not None
                                                                  for s in state[2:5]):
            raise Refused("a numpy dtype with fields or sub-arrays (expected plain numbers)")
        if state[1] not in ("<", ">", "|", "="):
            raise Refused(f"a numpy dtype with byte order {printable_value(state[1])}")
        self.order = state[1]

    def dtype(self) -> np.dtype:
        dtype = np.dtype(self.code)
        if self.order in "<>" and dtype.itemsize > 1:
            dtype = dtype.newbyteorder(self.order)
        if dtype.kind not in ALLOWED_KINDS:
            raise Refused(f"numpy dtype {dtype} (expected booleans, integers or floats)")
        return dtype


class ArrayBuilder:
    """An array as ``numpy.core.multiarray._reconstruct`` + BUILD pickle it; ``array`` is
    set by BUILD, from the bytes in the file."""

    array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise Refused("a numpy array with an unknown state layout")
        shape, dtype, fortran, data = state[-4:]
        self.array = array_from(data, dtype, shape, "F" if fortran is True else "C")


def array_from(data: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """A new array holding exactly the given bytes, after checking dtype and size."""
    if not isinstance(dtype, DTypeBuilder):
        raise Refused("a numpy array without a plain dtype")
    if isinstance(data, pickle.PickleBuffer):
        data = data.raw()
    if not isinstance(data, bytes | bytearray | memoryview):
        raise Refused("a numpy array whose data is not bytes (object arrays are not allowed)")
    if (not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape)
            or order not in ("C", "F")):
        raise Refused("a numpy array with a malformed shape")
    dt = dtype.dtype()
    count = int(np.prod(shape, dtype=object))
    if count * dt.itemsize != len(data):
        raise Refused(f"a numpy array of shape {printable_value(shape)} with {len(data)} "
                      "bytes of data")
    return np.frombuffer(data, dtype=dt, count=count).reshape(shape, order=order).copy()


def reconstruct(subtype: Any, shape: Any, code: Any) -> ArrayBuilder:
    """Stand-in for ``numpy.core.multiarray._reconstruct``."""
    if subtype is not ArrayToken:
        raise Refused("an array of a numpy.ndarray subclass (expected plain numpy arrays)")
    return ArrayBuilder()


def from_buffer(data: Any, dtype: Any, shape: Any, order: Any = "C") -> np.ndarray:
    """Stand-in for ``numpy.core.numeric._frombuffer`` (pickle protocol 5)."""
    return array_from(data, dtype, shape, order)


def scalar(dtype: Any, data: Any = None) -> Any:
    """Stand-in for ``numpy.core.multiarray.scalar``."""
    if not isinstance(data, bytes):
        raise Refused("a numpy scalar of an object dtype")
    return array_from(data, dtype, (), "C")[()]


def latin1(text: Any, encoding: Any = None) -> bytes:
    """Stand-in for ``_codecs.encode``: protocols 0-2 spell bytes as latin-1 text."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise Refused("_codecs.encode used for anything but bytes")
    return text.encode("latin-1")


def empty_bytes(*args: Any) -> bytes:
    """Stand-in for ``builtins.bytes``: protocols 0-2 spell empty bytes as ``bytes()``."""
    if args:
        raise Refused("builtins.bytes called with arguments")
    return b""


def reconstructor(cls: Any, base: Any, state: Any) -> Record:
    """Stand-in for ``copyreg._reconstructor`` (protocols 0 and 1 build objects with it)."""
    if cls is not Record or base is not ObjectToken or state is not None:
        raise Refused("copyreg._reconstructor used for anything but a Result object")
    return Record()


NUMPY_CORE = ("numpy.core", "numpy._core")
#: (module, name) -> what the file gets instead
STANDINS: dict[tuple[str, str], Any] = {
    **{(f"{core}.multiarray", "_reconstruct"): StandIn(reconstruct) for core in NUMPY_CORE},
    **{(f"{core}.multiarray", "scalar"): StandIn(scalar) for core in NUMPY_CORE},
    **{(f"{core}.numeric", "_frombuffer"): StandIn(from_buffer) for core in NUMPY_CORE},
    ("numpy", "ndarray"): ArrayToken,
    ("numpy", "dtype"): DTypeBuilder,
    ("_codecs", "encode"): StandIn(latin1),
    **{(builtins, "bytes"): StandIn(empty_bytes) for builtins in ("builtins", "__builtin__")},
    **{(builtins, "object"): ObjectToken for builtins in ("builtins", "__builtin__")},
    **{(copyreg, "_reconstructor"): StandIn(reconstructor)
       for copyreg in ("copyreg", "copy_reg")},
}


class _ShortRepr(reprlib.Repr):
    """``repr`` that looks at a bounded part of a value, however large or shared it is."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 2, 61, 61

    def repr_str(self, x: str | bytes | bytearray, level: int) -> str:
        return repr(x[:self.maxstring])

    repr_bytes = repr_bytearray = repr_str

    def repr_int(self, x: int, level: int) -> str:
        return repr(x) if x.bit_length() <= 200 else f"<a {x.bit_length()}-bit integer>"


_SHORT_REPR = _ShortRepr()


def printable_value(value: Any) -> str:
    text = _SHORT_REPR.repr(value)
    text = text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= 60 else text[:57] + "..."


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose globals are the stand-ins above, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if name == "Result" or name.endswith(".Result"):
            return Record
        standin = STANDINS.get((module, name))
        if standin is not None:
            return standin
        where = printable_value(f"{module}.{name}")[1:-1]
        if module == "torch" or module.startswith("torch."):
            raise Refused(f"holds torch tensors ({where}): {TORCH_HINT}")
        raise Refused(f"refers to {where}, which is not allowed (expected only numpy arrays, "
                      "dtypes, scalars and Result objects; nothing in the file is run)")

    def persistent_load(self, pid: Any) -> Any:
        raise Refused(f"uses persistent ids, as torch.save does: {TORCH_HINT}")


# --------------------------------------------------------------------------- census

# argument layouts: n >= 0 fixed bytes; one or two lines; a 1, 4 (signed or not) or 8-byte
# little-endian length, then that many bytes
_LINE, _TWO_LINES, _SIZE1, _SIZE4S, _SIZE4, _SIZE8 = -1, -2, -3, -4, -5, -6
_SIZE_BYTES = {_SIZE1: 1, _SIZE4S: 4, _SIZE4: 4, _SIZE8: 8}
# stack effects: push a new object; push a singleton; push a tuple of n items or of the items
# above the mark; replace the items above the mark by a new object; replace n items by a new
# object (a call); pop n items into the container below them; pop the items above the mark
# into the container below it; drop the items above the mark; MARK, DUP, POP; memo get, put
# (index in the argument, or the next one); nothing (PROTO, FRAME); STOP
(_NEW, _SINGLETON, _TUPLE, _MARK_TUPLE, _MARK_NEW, _CALL, _FILL, _MARK_FILL, _POP_MARK,
 _MARK, _DUP, _POP, _GET, _PUT, _MEMOIZE, _NOTHING, _STOP) = range(17)
#: opcode -> (argument layout, stack effect, item count), as CPython's unpickler reads them
_OPCODES: dict[bytes, tuple[int, int, int]] = {
    **{code: (_LINE, _NEW, 0) for code in (b"I", b"L", b"S", b"V", b"F", b"P")},
    b"J": (4, _NEW, 0), b"K": (1, _NEW, 0), b"M": (2, _NEW, 0), b"G": (8, _NEW, 0),
    **{code: (_SIZE1, _NEW, 0) for code in (b"\x8a", b"U", b"C", b"\x8c")},
    **{code: (_SIZE4S, _NEW, 0) for code in (b"\x8b", b"T")},
    **{code: (_SIZE4, _NEW, 0) for code in (b"B", b"X")},
    **{code: (_SIZE8, _NEW, 0) for code in (b"\x8e", b"\x96", b"\x8d")},
    **{code: (0, _NEW, 0) for code in (b"\x97", b"]", b"}", b"\x8f")},
    **{code: (0, _SINGLETON, 0) for code in (b"N", b"\x88", b"\x89")},
    b")": (0, _TUPLE, 0), b"\x85": (0, _TUPLE, 1), b"\x86": (0, _TUPLE, 2),
    b"\x87": (0, _TUPLE, 3), b"t": (0, _MARK_TUPLE, 0),
    **{code: (0, _MARK_NEW, 0) for code in (b"l", b"d", b"\x91", b"o")},
    b"i": (_TWO_LINES, _MARK_NEW, 0), b"c": (_TWO_LINES, _NEW, 0),
    b"\x82": (1, _NEW, 0), b"\x83": (2, _NEW, 0), b"\x84": (4, _NEW, 0),
    b"\x98": (0, _CALL, 1), b"Q": (0, _CALL, 1), b"\x93": (0, _CALL, 2),
    b"R": (0, _CALL, 2), b"\x81": (0, _CALL, 2), b"\x92": (0, _CALL, 3),
    b"a": (0, _FILL, 1), b"s": (0, _FILL, 2), b"b": (0, _FILL, 1),
    **{code: (0, _MARK_FILL, 0) for code in (b"e", b"u", b"\x90")},
    b"1": (0, _POP_MARK, 0), b"(": (0, _MARK, 0), b"2": (0, _DUP, 0), b"0": (0, _POP, 0),
    b"g": (_LINE, _GET, 0), b"h": (1, _GET, 0), b"j": (4, _GET, 0),
    b"p": (_LINE, _PUT, 0), b"q": (1, _PUT, 0), b"r": (4, _PUT, 0),
    b"\x94": (0, _MEMOIZE, 0), b"\x80": (1, _NOTHING, 0), b"\x95": (8, _NOTHING, 0),
    b".": (0, _STOP, 0),
}
_TABLE: list[tuple[int, int, int] | None] = [_OPCODES.get(bytes([b])) for b in range(256)]


def census(data: bytes, max_objects: int = MAX_OBJECTS, max_depth: int = MAX_DEPTH) -> int:
    """How many objects unpickling ``data`` builds, read from its opcodes before anything is
    built; refuses more than ``max_objects``, tuples nested deeper than ``max_depth`` and
    memo indices past the opcodes read (see the module docstring).

    The model of the stack holds each item's tuple nesting (0 for anything but a tuple).
    Malformed data raises ``UnpicklingError`` at the latest where the C unpickler
    would fail, so the census never stops short of what the unpickler goes on to build.
    """
    end, pos, ops, built = len(data), 0, 0, 0
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    try:
        while True:
            spec = _TABLE[data[pos]] if pos < end else None
            if spec is None:
                raise UnpicklingError("pickle data was truncated" if pos >= end
                                      else f"invalid load key, {data[pos:pos + 1]!r}")
            layout, effect, n = spec
            start = pos + 1
            pos = start + layout if layout >= 0 else _after_argument(data, start, layout)
            if pos > end:
                raise UnpicklingError("pickle data was truncated")
            ops += 1
            if effect == _NEW:
                built += 1
                stack.append(0)
            elif effect == _SINGLETON:
                stack.append(0)
            elif effect in (_TUPLE, _MARK_TUPLE):
                items = (_popped(stack, marks, n) if effect == _TUPLE
                         else _popped_to_mark(stack, marks))
                depth = 1 + max(items, default=0)
                if depth > max_depth:
                    raise OverLimit(f"nests tuples more than {max_depth} deep",
                                    "max_pickle_depth")
                built += 1
                stack.append(depth)
            elif effect in (_MARK_NEW, _CALL):
                if effect == _MARK_NEW:
                    _popped_to_mark(stack, marks)
                else:
                    _popped(stack, marks, n)
                built += 1
                stack.append(0)
            elif effect in (_FILL, _MARK_FILL):
                if effect == _FILL:
                    _popped(stack, marks, n)
                else:
                    _popped_to_mark(stack, marks)
                stack.append(_popped(stack, marks, 1)[0])  # the container must be there
            elif effect == _POP_MARK:
                _popped_to_mark(stack, marks)
            elif effect == _MARK:
                marks.append(len(stack))
            elif effect == _DUP:
                stack.extend(_popped(stack, marks, 1) * 2)
            elif effect == _POP:
                if marks and marks[-1] == len(stack):
                    marks.pop()
                else:
                    _popped(stack, marks, 1)
            elif effect == _GET:
                index = _memo_index(data[start:pos], layout)
                if index not in memo:
                    raise UnpicklingError(f"Memo value not found at index {index}")
                stack.append(memo[index])
            elif effect in (_PUT, _MEMOIZE):
                index = len(memo) if effect == _MEMOIZE else _memo_index(data[start:pos],
                                                                         layout)
                if index > ops:
                    raise Refused(f"memo index {index} at opcode {ops} (expected indices "
                                  "in order, as pickle writes them)")
                memo[index] = _popped(stack, marks, 1)[0]
                stack.append(memo[index])
            elif effect == _STOP:
                _popped(stack, marks, 1)
                return built
            if built > max_objects:
                raise OverLimit(f"builds more than {max_objects} objects", "max_pickle_objects")
    except IndexError:
        raise UnpicklingError("unpickling stack underflow") from None


def _after_argument(data: bytes, pos: int, layout: int) -> int:
    """Where an opcode's line or counted argument starting at ``pos`` ends."""
    if layout in (_LINE, _TWO_LINES):
        for _ in range(-layout):
            newline = data.find(b"\n", pos)
            pos = len(data) if newline < 0 else newline + 1
        return pos
    width = _SIZE_BYTES[layout]
    size = int.from_bytes(data[pos:pos + width], "little", signed=layout == _SIZE4S)
    if size < 0:
        raise UnpicklingError("negative byte count")
    return pos + width + size


def _popped(stack: list[int], marks: list[int], n: int) -> list[int]:
    """The top ``n`` items, taken off the stack; none may come from below the last mark."""
    if len(stack) - n < (marks[-1] if marks else 0):
        raise IndexError
    items = stack[len(stack) - n:]
    del stack[len(stack) - n:]
    return items


def _popped_to_mark(stack: list[int], marks: list[int]) -> list[int]:
    """The items above the last mark, taken off the stack with the mark."""
    mark = marks.pop()
    items = stack[mark:]
    del stack[mark:]
    return items


def _memo_index(arg: bytes, layout: int) -> int:
    """A memo index: a little-endian number, or a decimal line (protocol 0)."""
    if layout >= 0:
        return int.from_bytes(arg, "little")
    try:
        index = int(arg)
    except ValueError:
        raise UnpicklingError("a memo index that is not a number") from None
    if index < 0:
        raise UnpicklingError("negative memo index")
    return index


def restricted_loads(data: bytes, max_objects: int = MAX_OBJECTS,
                     max_depth: int = MAX_DEPTH) -> Any:
    """The object pickled in ``data``, with every numpy array resolved.

    Raises ``Refused`` for what the file may not ask for (``OverLimit`` past a limit) and
    lets the unpickler's own exceptions through for malformed data (truncated, corrupt).
    """
    built = census(data, max_objects, max_depth)
    obj = RestrictedUnpickler(io.BytesIO(data)).load()
    return resolved(obj, max_objects - built, max_objects)


def resolved(obj: Any, budget: int, max_objects: int = MAX_OBJECTS) -> Any:
    """``obj`` with array builders replaced by their arrays, inside lists, tuples, dicts and
    Records to ``RESOLVE_DEPTH`` (deeper values stay as they are and fail the field checks
    if a field needs them).

    Each (container, depth) is resolved once, so shared references stay shared and the work
    is bounded by the objects in the pickle, not by the paths to them; ``budget`` more
    objects and references may be visited (``max_objects`` is only for the message).
    """
    done: dict[tuple[int, int], tuple[Any, Any]] = {}  # (id, depth) -> (original, resolved)
    left = budget

    def walk(value: Any, depth: int) -> Any:
        nonlocal left
        if isinstance(value, ArrayBuilder):
            if value.array is None:
                raise Refused("a numpy array without data")
            return value.array
        if isinstance(value, DTypeBuilder):
            return value.dtype()
        if depth >= RESOLVE_DEPTH or not isinstance(value, Record | list | tuple | dict):
            return value
        key = (id(value), depth)
        if key in done:
            return done[key][1]
        items = value.fields if isinstance(value, Record) else value
        left -= 1 + len(items)
        if left < 0:
            raise OverLimit(f"builds more than {max_objects} objects (with the references "
                            "resolved)", "max_pickle_objects")
        out: Any
        if isinstance(value, Record):
            value.fields = {k: walk(v, depth + 1) for k, v in value.fields.items()}
            out = value
        elif isinstance(value, list):
            out = [walk(v, depth + 1) for v in value]
        elif isinstance(value, tuple):
            out = tuple(walk(v, depth + 1) for v in value)
        else:
            out = {k: walk(v, depth + 1) for k, v in value.items()}
        done[key] = (value, out)  # the original stays alive: its id cannot be reused
        return out

    return walk(obj, 0)

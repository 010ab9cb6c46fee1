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
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Callable
from typing import Any

import numpy as np

#: dtype codes numpy writes into pickles for the kinds allowed here ('b1', 'u1', 'f4', ...)
DTYPE_CODE = re.compile(r"^[<>|=]?[biuf]\d{1,2}$")
ALLOWED_KINDS = "biuf"
TORCH_HINT = ("save numpy arrays instead: call .cpu().numpy() on every tensor before "
              "pickling, or write one .npz per image with numpy.savez")


class Refused(Exception):
    """The pickle asks for something this reader never does; ``str()`` says what."""


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
        raise Refused(f"a numpy array of shape {shape} with {len(data)} bytes of data")
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


def printable_value(value: Any) -> str:
    text = repr(value)
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


def restricted_loads(data: bytes) -> Any:
    """The object pickled in ``data``, with every numpy array resolved.

    Raises ``Refused`` for what the file may not ask for and lets the unpickler's own
    exceptions through for malformed data (truncated, corrupt).
    """
    obj = RestrictedUnpickler(io.BytesIO(data)).load()
    return resolved(obj)


def resolved(obj: Any, depth: int = 0) -> Any:
    """``obj`` with array builders replaced by their arrays, inside lists, tuples, dicts
    and Records (to a fixed depth: deeper values stay as they are and fail the field
    checks if a field needs them)."""
    if isinstance(obj, ArrayBuilder):
        if obj.array is None:
            raise Refused("a numpy array without data")
        return obj.array
    if isinstance(obj, DTypeBuilder):
        return obj.dtype()
    if depth >= 4:
        return obj
    walk: Callable[[Any], Any] = lambda value: resolved(value, depth + 1)  # noqa: E731
    if isinstance(obj, Record):
        obj.fields = {k: walk(v) for k, v in obj.fields.items()}
    elif isinstance(obj, list):
        return [walk(v) for v in obj]
    elif isinstance(obj, tuple):
        return tuple(walk(v) for v in obj)
    elif isinstance(obj, dict):
        return {k: walk(v) for k, v in obj.items()}
    return obj

"""The JSON schemas the package checks files against when it reads them.

They live in ``sgdask/schemas/`` and are package data, so an installed wheel has them; the
repository's ``schemas/`` (the documentation of every format) links to the same files
rather than holding copies. Each schema is compiled by ``fastjsonschema`` once per process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from importlib import resources
from typing import Any

import fastjsonschema

STORE_MANIFEST = "store-manifest.schema.json"
BENCHMARK = "benchmark.schema.json"


def no_remote(uri: str) -> Any:
    """fastjsonschema's fetcher for remote ``$ref``s: the schemas have none, never fetch."""
    raise ValueError(f"a schema refers to {uri}: remote references are not allowed")


@functools.cache
def validator(name: str) -> Callable[[Any], Any]:
    """The compiled validator of the package's schema ``name``."""
    text = resources.files("sgdask").joinpath("schemas").joinpath(name).read_text("utf-8")
    handlers = dict.fromkeys(("http", "https", "ftp", "file", "data"), no_remote)
    return fastjsonschema.compile(json.loads(text), handlers=handlers)


def schema_problem(name: str, document: Any) -> str | None:
    """The first way ``document`` breaks schema ``name`` as ``field: what`` (None: valid)."""
    try:
        validator(name)(document)
    except fastjsonschema.JsonSchemaValueException as err:
        field = err.name.removeprefix("data").lstrip(".")
        if err.rule == "required" and isinstance(err.value, dict):
            missing = [k for k in err.rule_definition if k not in err.value]
            return f"{field + '.' if field else ''}{missing[0]}: missing (a required field)"
        what = err.message.removeprefix(err.name).strip()
        return f"{field or 'the document'}: {what}"
    return None

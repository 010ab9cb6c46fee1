"""The literal twins: for every registered protocol, a slow implementation written from its
definition (the SPEC, or the reference tool's own code) that shares no code with ``sgdask``.

``TWINS`` names each protocol's twin; ``tests/differential/test_literal_twins.py`` fails for
a registered protocol without one, and checks every protocol against its twin on seeded
data. The long hypothesis runs are beside each twin's protocol tests
(``tests/differential/test_literal.py``, ``tests/protocols/test_sgbpytorch.py``,
``tests/protocols/test_oiv6.py``).
"""

TWINS: dict[str, str] = {
    "singlempo": "tests.literal.spec",
    "sgbench": "tests.literal.spec",
    "sgbench2": "tests.literal.spec",
    "multimpo": "tests.literal.spec",
    "sgbpytorch": "tests.literal.sgbpytorch",
    "oiv6": "tests.literal.oiv6",
    "ag-with": "tests.literal.ag",
    "ag-semi": "tests.literal.ag",
    "ag-no": "tests.literal.ag",
    "pvsg": "tests.literal.pvsg",
    "pvsg-oneweak": "tests.literal.pvsg",
}
"""Protocol name -> the module of its literal twin."""

"""The driver's check of a submission takes fast paths around the generated schema validator
for the common plain lists (``sgdask.formats.sgbench``): they must never accept what the
validator refuses, or an image's first problem could change."""

from __future__ import annotations

import fastjsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.formats.sgbench import INT32_MAX, _plain_instances, checked_image, validators

_ODD_VALUES = st.one_of(st.booleans(), st.none(), st.text(max_size=2), st.just(1.0), st.just(1.5),
                        st.just(-1), st.just(INT32_MAX + 1), st.just([]), st.just({}))
_NUMBERS = st.one_of(st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True))


_PLAIN_INSTANCE = st.fixed_dictionaries(
    {"category": st.integers(0, INT32_MAX)},
    optional={"bbox": st.lists(_NUMBERS, min_size=4, max_size=5), "score": _NUMBERS})


@st.composite
def _one_odd_field(draw: st.DrawFn) -> list:
    """A plain instance list with one thing made odd: an instance, a field, a box value."""
    instances = draw(st.lists(_PLAIN_INSTANCE, min_size=1, max_size=4))
    i = draw(st.integers(0, len(instances) - 1))
    odd = draw(_ODD_VALUES)
    where = draw(st.sampled_from(["instance", "category", "bbox", "bbox value", "score",
                                  "drop category", "other"]))
    inst = dict(instances[i])
    if where == "instance":
        instances[i] = odd
        return instances
    if where == "bbox value":
        box = list(inst.get("bbox", [0, 0, 1, 1]))
        box[draw(st.integers(0, len(box) - 1))] = odd
        inst["bbox"] = box
    elif where == "drop category":
        del inst["category"]
    else:
        inst[where] = odd
    instances[i] = inst
    return instances


def _accepted(instances: object) -> bool:
    try:
        validators()[1]({"id": "img", "triplets": [], "annotation": instances})
    except fastjsonschema.JsonSchemaValueException:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.one_of(_one_odd_field(), _ODD_VALUES))
def test_the_instance_fast_path_accepts_nothing_the_schema_refuses(instances):
    if _plain_instances(instances):
        assert _accepted(instances), instances


@settings(max_examples=100, deadline=None)
@given(st.lists(_PLAIN_INSTANCE, max_size=6))
def test_plain_instance_lists_take_the_fast_path(instances):
    """Not vacuous: what submissions hold takes it (and the schema accepts it too)."""
    assert _plain_instances(instances) and _accepted(instances)


def test_a_bad_instance_is_still_reported_by_the_schema():
    """A bool category: the fast path declines, the validator names the field."""
    img = {"id": "img", "triplets": [[0, 1, 2]],
           "annotation": [{"category": 1, "bbox": [0, 0, 4, 4]},
                          {"category": True, "bbox": [0, 0, 4, 4]}]}
    image, problems = checked_image(img, 0, "sub.json", masks=False)
    assert image is None and len(problems) == 1
    assert "annotation[1].category" in str(problems[0]), problems[0]


@pytest.mark.parametrize("img", [None, [], "img", 3])
def test_an_image_that_is_not_an_object_is_one_schema_problem(img):
    image, problems = checked_image(img, 4, "sub.json", masks=False)
    assert image is None and len(problems) == 1 and "images[4]" in str(problems[0])

"""JSON nested deeper than Python's parser follows is malformed JSON like any other."""

from __future__ import annotations

import json

import pytest

from tools_app.engine import json_nesting

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("data", [DEEP, DEEP.encode()])
def test_loads_says_nested_too_deeply_as_a_json_decode_error(data: str | bytes) -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        json_nesting.loads(data)
    assert str(caught.value) == "nested too deeply"
    assert isinstance(caught.value, ValueError)


def test_the_decoder_says_the_same_for_cls() -> None:
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        json.loads(DEEP, cls=json_nesting.Decoder)


@pytest.mark.parametrize("text", ['{"a": [1, 2.5, null, true]}', '"x"', "[" * 50 + "]" * 50])
def test_json_within_reach_parses_as_json_loads_does(text: str) -> None:
    assert json_nesting.loads(text) == json.loads(text)
    assert json.loads(text, cls=json_nesting.Decoder) == json.loads(text)


def test_other_malformed_json_keeps_its_own_message() -> None:
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        json_nesting.loads("[1,")

"""Scripts that vary: a step played with a probability, deterministic given the seed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from tools_app.fake_llm.script import MISSED_TEXT, FakeScript, draw

from .support import openai_body


def set_script(fake: httpx.Client, name: str, script: dict[str, Any]) -> None:
    fake.put(f"/_fake/scripts/{name}", json=script).raise_for_status()

GOOD = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
BAD = {"tool_calls": [{"name": "get_time", "arguments": {"zone": "UTC"}}]}


def varying(probability: float, seed: int, **step: Any) -> dict[str, Any]:
    return {"seed": seed, "steps": [GOOD | {"probability": probability} | step]}


def first_calls(fake: httpx.Client, times: int, question: str = "Weather?") -> list[str]:
    names = []
    for _ in range(times):
        body = openai_body([{"role": "user", "content": question}], model="vary")
        message = fake.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        names.append(calls[0]["function"]["name"] if calls else f"text:{message['content']}")
    return names


def test_a_step_plays_as_often_as_the_seeded_draws_say(fake: httpx.Client) -> None:
    set_script(fake, "vary", varying(0.5, seed=11, otherwise=BAD))

    played = first_calls(fake, 40)

    expected = ["get_weather" if draw(11, "vary", 0, "Weather?", n) < 0.5 else "get_time"
                for n in range(40)]
    assert played == expected
    assert 0 < played.count("get_weather") < 40  # it really varies


def test_the_same_seed_gives_the_same_outcomes_again(fake: httpx.Client) -> None:
    set_script(fake, "vary", varying(0.3, seed=5, otherwise=BAD))
    first = first_calls(fake, 20)
    fake.post("/_fake/reset").raise_for_status()
    set_script(fake, "vary", varying(0.3, seed=5, otherwise=BAD))

    assert first_calls(fake, 20) == first


def test_another_seed_gives_other_outcomes(fake: httpx.Client) -> None:
    set_script(fake, "vary", varying(0.5, seed=1, otherwise=BAD))
    one = first_calls(fake, 30)
    set_script(fake, "vary", varying(0.5, seed=2, otherwise=BAD))

    assert first_calls(fake, 30) != one


def test_each_question_has_its_own_sequence(fake: httpx.Client) -> None:
    set_script(fake, "vary", varying(0.5, seed=3, otherwise=BAD))

    paris = first_calls(fake, 10, "Paris?")
    lima = first_calls(fake, 10, "Lima?")

    assert paris == ["get_weather" if draw(3, "vary", 0, "Paris?", n) < 0.5 else "get_time"
                     for n in range(10)]
    assert lima == ["get_weather" if draw(3, "vary", 0, "Lima?", n) < 0.5 else "get_time"
                    for n in range(10)]


@pytest.mark.parametrize(("probability", "expected"), [(1.0, "get_weather"),
                                                       (0.0, f"text:{MISSED_TEXT}")])
def test_certain_steps_and_the_default_otherwise(fake: httpx.Client, probability: float,
                                                 expected: str) -> None:
    set_script(fake, "vary", varying(probability, seed=0))

    assert first_calls(fake, 5) == [expected] * 5


def test_a_probability_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValidationError, match="probability"):
        FakeScript.model_validate(varying(1.5, seed=0))

"""The suites' small world: three fake-provider models of different quality, cases on
the demo tools, and a wait that executes a suite run's runs in this process."""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import async_to_sync

from tools_app.fake_llm.script import draw
from tools_app.models import Run, SuiteRun
from tools_app.runs import tasks

WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
WRONG_CITY = {"name": "get_weather", "arguments": {"city": "Lima"}}
SUM_CALL = {"name": "calculator", "arguments": {"expression": "2+3"}}
SEED = 41
SLOPPY = 0.6


def model_scripts() -> dict[str, Any]:
    """good: always right; sloppy: right 60% of the time (seeded); bad: never."""
    def script(probability: float) -> dict[str, Any]:
        return {"seed": SEED, "when_exhausted": "repeat_last", "steps": [
            {"tool_calls": [WEATHER_CALL], "probability": probability,
             "otherwise": {"tool_calls": [WRONG_CITY]}},
            {"text": "Done: {last_result}"},
        ]}
    return {"scripts": {"good": script(1.0), "sloppy": script(SLOPPY), "bad": script(0.0)}}


WEATHER_ASSERTIONS: list[dict[str, Any]] = [
    {"kind": "call_sequence", "tools": ["get_weather"], "match": "exact"},
    {"kind": "arguments_match", "tool": "get_weather", "pointer": "/city",
     "check": {"kind": "equals", "value": "Paris"}},
    {"kind": "rounds_at_most", "rounds": 2},
    {"kind": "no_error"},
]


def weather_case(name: str, question: str) -> dict[str, Any]:
    return {"name": name, "messages": [{"role": "user", "content": question}],
            "tools": ["get_weather"], "assertions": WEATHER_ASSERTIONS}


def sloppy_passes(question: str, repeat: int) -> int:
    """How many of `repeat` runs of a question the sloppy model gets right: the fake
    provider's seeded draws at step 0 (the runs' order does not change the count)."""
    return sum(draw(SEED, "sloppy", 0, question, n) < SLOPPY for n in range(repeat))


def execute_inline(suite_run: SuiteRun, started: list[Run]) -> None:
    """The runs just started, executed here concurrently, as a worker would."""
    async def execute_all() -> None:
        await asyncio.gather(*(tasks.execute_run.acall(str(run.pk)) for run in started))

    if started:
        async_to_sync(execute_all)()

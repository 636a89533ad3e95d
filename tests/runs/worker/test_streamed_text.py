"""The text a round streamed so far, kept for a run that ends before the round's
response (runs/worker/recorder.StreamedText)."""

from __future__ import annotations

from tools_app.runs.worker.recorder import StreamedText


def test_pieces_read_as_the_text_so_far() -> None:
    streamed = StreamedText()
    for piece in ["The wea", "ther in ", "Paris", " is"]:
        streamed.add(2, piece)
    assert dict(streamed) == {2: "The weather in Paris is"}


def test_only_the_round_in_progress_is_kept() -> None:
    # An earlier round has its response stored by the time the next one streams.
    streamed = StreamedText()
    streamed.add(0, "first")
    streamed.add(1, "second")
    streamed.add(1, " round")
    assert dict(streamed) == {1: "second round"}
    assert len(streamed) == 1


def test_nothing_streamed_is_empty() -> None:
    assert dict(StreamedText()) == {}

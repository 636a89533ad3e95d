"""Cached input tokens, as each provider reports them, carried into TokenUsage (the
cached price applies to them: engine/pricing.py)."""

from tools_app.engine.providers import anthropic, gemini, openai, openai_responses


def test_openai_reports_cached_tokens_in_the_prompt_details() -> None:
    usage = openai.map_usage({"prompt_tokens": 1200, "completion_tokens": 30,
                              "total_tokens": 1230,
                              "prompt_tokens_details": {"cached_tokens": 1024}})
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens) == (1200, 1024)


def test_anthropic_cache_reads_are_part_of_the_input_and_its_cached_part() -> None:
    usage = anthropic.map_usage({"input_tokens": 20, "cache_creation_input_tokens": 100,
                                 "cache_read_input_tokens": 900, "output_tokens": 5})
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens) == (1020, 900)


def test_gemini_reports_cached_content_tokens() -> None:
    usage = gemini.map_usage({"promptTokenCount": 500, "cachedContentTokenCount": 256,
                              "candidatesTokenCount": 7, "totalTokenCount": 507})
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens) == (500, 256)


def test_no_cache_report_is_no_cached_count() -> None:
    usage = openai.map_usage({"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
    assert usage is not None
    assert usage.cached_input_tokens is None


def test_the_responses_api_reports_cached_tokens_in_the_input_details() -> None:
    usage = openai_responses.map_usage({"input_tokens": 3000, "output_tokens": 40,
                                        "total_tokens": 3040,
                                        "input_tokens_details": {"cached_tokens": 2048}})
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens) == (3000, 2048)

"""A fake LLM provider: OpenAI (Chat Completions and Responses), Anthropic and Gemini
wire formats, scriptable replies
and faults, and a request log. Framework-free (a plain ASGI app served by uvicorn).

    python -m tools_app.fake_llm --port 8765 --script my-script.json

Base URLs: OpenAI (both APIs) http://HOST:PORT/v1, Anthropic http://HOST:PORT, Gemini
http://HOST:PORT/v1beta. The script format is documented in `script.py`, the routes
(including the /_fake/ control endpoints) in `app.py`, the no-script behaviour in
`auto.py`.
"""

from .app import FakeLLMApp
from .auto import sample_arguments
from .script import (
    AutoOptions,
    CutFault,
    FakeScript,
    FakeStep,
    FakeToolCall,
    GarbageFault,
    HangFault,
    ResetFault,
    ScriptSet,
    StatusFault,
    StreamErrorFault,
    load_script_set,
)
from .server import BackgroundServer, base_urls, build_app, serve

__all__ = [
    "AutoOptions",
    "BackgroundServer",
    "CutFault",
    "FakeLLMApp",
    "FakeScript",
    "FakeStep",
    "FakeToolCall",
    "GarbageFault",
    "HangFault",
    "ResetFault",
    "ScriptSet",
    "StatusFault",
    "StreamErrorFault",
    "base_urls",
    "build_app",
    "load_script_set",
    "sample_arguments",
    "serve",
]

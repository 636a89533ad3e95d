"""Model providers: the ChatModel protocol, wire adapters, and the offline models.

    base         the ChatModel protocol
    registry     kind -> adapter, imported lazily: build_chat_model("openai", settings)
    endpoint     EndpointSettings: one endpoint's settings, built once, passed down whole
    client       ProviderHttpClient: send JSON, open an event stream
    clients      the httpx clients (aiohttp's pool), shared per endpoint and event loop
    aiohttp_transport  httpx-aiohttp's transport with aiohttp's errors mapped right
    retry, redaction, wire_errors, jsoncodec, sse
                 the retry loop, credentials scrubbing, errors, JSON, event streams
    adapter      the chat() skeleton the wire adapters share
    openai       OpenAIChatModel, OpenAICompatibleChatModel (Chat Completions)
    openai_responses  OpenAIResponsesModel (the Responses API), with openai_responses_stream
    anthropic    AnthropicChatModel (Messages)
    gemini       GeminiChatModel (generateContent), with gemini_schema
    scripted     ScriptedChatModel, FunctionChatModel (offline)
"""

from .registry import PROVIDERS, build_chat_model, chat_model_class, provider_kinds

__all__ = ["PROVIDERS", "build_chat_model", "chat_model_class", "provider_kinds"]

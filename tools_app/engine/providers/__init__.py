"""Model providers: the ChatModel protocol, wire adapters, and the offline models.

    base         the ChatModel protocol
    registry     kind -> adapter, imported lazily: build_chat_model("openai", ...)
    http, sse    the one HTTP layer (client, credentials, retries, error mapping) and
                 the event-stream decoder
    adapter      the chat() skeleton the wire adapters share
    openai       OpenAIChatModel, OpenAICompatibleChatModel (Chat Completions)
    anthropic    AnthropicChatModel (Messages)
    gemini       GeminiChatModel (generateContent), with gemini_schema
    scripted     ScriptedChatModel, FunctionChatModel (offline)
"""

from .registry import PROVIDERS, build_chat_model, chat_model_class, provider_kinds

__all__ = ["PROVIDERS", "build_chat_model", "chat_model_class", "provider_kinds"]

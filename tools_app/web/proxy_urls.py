"""The recording proxy's routes (tools_app/proxy): OpenAI and Anthropic clients' base
URLs. Part of the site's URLconf (tools_app/web/urls.py), and the whole URLconf of the
requests agentforge_web/handler.py serves on the event loop (every path under
`/proxy/`): resolved against these two routes alone, and a path under `/proxy/` that
is neither answers Django's own 404."""

from django.urls import path

from tools_app.web.api import proxy

urlpatterns = [
    path("proxy/<str:endpoint>/v1/chat/completions", proxy.chat_completions,
         name="proxy_chat_completions"),
    path("proxy/<str:endpoint>/v1/messages", proxy.messages, name="proxy_messages"),
]

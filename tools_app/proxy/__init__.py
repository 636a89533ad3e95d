"""The recording proxy: OpenAI- and Anthropic-compatible clients point their base URL at
`/proxy/<endpoint>/v1` (Chat Completions) or `/proxy/<endpoint>` (Messages) and their
requests go to that registered endpoint, with its key, while each exchange is recorded.

`dialects` reads the two wire formats (a request's messages, tools and model; the error
body each provider answers with); `upstream` finds the endpoint and sends the client's
body there on the providers' shared HTTP clients, under the outbound policy;
`exchanges` assembles a response (streamed ones with the providers' own stream
parsers); `conversations` finds the run a request continues (its `X-AgentForge-Run`
header, or the messages of an earlier exchange as its prefix); `recording` turns an
exchange into spans in the GenAI conventions and hands them to `tools_app.ingest`,
which builds received runs (one builder for OTLP and the proxy), off the request's path
so the client never waits for the record: `recorders` (a recorder process by default,
`recorder_child` and `recorder_work`; a thread with AGENTFORGE_PROXY_RECORDER=thread).
`lookups` keeps tokens' users and built endpoints per process for a few seconds. The
views are `web/api/proxy.py`.
"""

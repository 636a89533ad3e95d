"""The HTTP layer every provider adapter shares: how to reach an endpoint
(`endpoint`), one client per endpoint configuration on aiohttp's pool (`client`,
`clients`, `aiohttp_transport`), the one retry loop (`retry`), server-sent events
(`sse`), JSON in and out (`jsoncodec`), provider errors from HTTP answers
(`wire_errors`) and secrets redacted from what is recorded (`redaction`)."""

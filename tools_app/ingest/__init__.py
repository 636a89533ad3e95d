"""OTLP in: traces of agents built anywhere become runs here.

`wire` decodes an OTLP/HTTP export (protobuf or JSON, gzip) with opentelemetry-proto;
`spans` reads its spans into records; `conventions` and `messages` read what a span
says in the OpenTelemetry GenAI or OpenInference conventions; `assemble` turns a run's
spans (any order, any number of batches) into its rounds and calls; `rows` writes them,
`snapshot` labels the run with its source, and `receive` does it all in one transaction
per request and tells live viewers (`span_cache` keeps parsed committed spans, so a
rebuild reads back only the rows it lacks). A run whose root span never comes is ended
by the workers' sweeps once idle (`idle`, also where the proxy's runs end). The view is
`web/api/otlp.py` (`POST /v1/traces`).
"""

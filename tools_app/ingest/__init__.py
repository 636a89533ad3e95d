"""OTLP in: traces of agents built anywhere become runs here.

`wire` decodes an OTLP/HTTP export (protobuf or JSON, gzip) with opentelemetry-proto;
`spans` reads its spans into records; `conventions` and `messages` read what a span
says in the OpenTelemetry GenAI or OpenInference conventions; `assemble` turns a run's
spans (any order, any number of batches) into its rounds and calls; `rows` writes them,
`snapshot` labels the run with its source, and `receive` does it all in one transaction
per request and tells live viewers. The view is `web/api/otlp.py` (`POST /v1/traces`).
"""

"""OTLP out: every run exported, live as it goes, as spans in the OpenTelemetry GenAI
semantic conventions to the operator's OTLP/HTTP endpoint (`spans` builds them from the
stored rows, `exporter` queues and sends them off the run's path)."""

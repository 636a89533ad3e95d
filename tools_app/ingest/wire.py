"""OTLP/HTTP for traces: a request body (protobuf or JSON, maybe gzipped) decoded into
an `ExportTraceServiceRequest`, and the answer encoded the way the request came.

The protos and their JSON mapping are opentelemetry-proto's and protobuf's
(`json_format`). One thing OTLP's JSON does differently from protobuf's mapping: trace
and span ids are hex strings, not base64; they are turned into what `json_format`
reads before it parses, and nothing else is touched.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = (PROTOBUF, JSON)
ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class OtlpError(Exception):
    """A request the receiver refuses as a whole: `status` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def media_type(content_type: str) -> str:
    """The request's media type, if it is one OTLP/HTTP speaks; else OtlpError(415)."""
    media = content_type.partition(";")[0].strip().lower()
    if media not in MEDIA_TYPES:
        raise OtlpError(415, f"Content-Type {media or '(none)'!r} is not supported: send "
                             f"{PROTOBUF} or {JSON}")
    return media


def decode_request(body: bytes, *, media: str, encoding: str,
                   limit: int) -> ExportTraceServiceRequest:
    """The export request in `body`. OtlpError: 415 for an unknown Content-Encoding,
    413 for a body past `limit` bytes once inflated, 400 for one that does not decode."""
    raw = _inflate(body, encoding.strip().lower(), limit)
    request = ExportTraceServiceRequest()
    if media == PROTOBUF:
        try:
            request.ParseFromString(raw)
        except DecodeError as exc:
            raise OtlpError(400, f"the body is not an OTLP protobuf trace export: {exc}") from exc
        return request
    try:
        data = json.loads(raw)
        json_format.ParseDict(_ids_as_base64(data), request, ignore_unknown_fields=True)
    except (ValueError, RecursionError, json_format.ParseError) as exc:
        raise OtlpError(400, f"the body is not an OTLP JSON trace export: {exc}") from exc
    return request


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise OtlpError(415, f"Content-Encoding {encoding!r} is not supported: send gzip "
                             "or none")
    inflater = zlib.decompressobj(wbits=31)
    try:
        raw = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"the body is not valid gzip: {exc}") from exc
    if len(raw) > limit:
        raise OtlpError(413, f"the body is larger than {limit} bytes once decompressed")
    if not inflater.eof:
        raise OtlpError(400, "the gzip body is truncated")
    return raw


def _ids_as_base64(data: Any) -> Any:
    """OTLP JSON's hex ids as the base64 protobuf's JSON mapping reads (bytes fields)."""
    if isinstance(data, list):
        return [_ids_as_base64(item) for item in data]
    if not isinstance(data, dict):
        return data
    return {key: _id_field(value) if key in ID_FIELDS else _ids_as_base64(value)
            for key, value in data.items()}


def _id_field(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        return value
    try:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a hex-encoded id") from exc


def encode_response(*, rejected: int, message: str, media: str) -> tuple[bytes, str]:
    """The ExportTraceServiceResponse (partial_success when spans were rejected) in the
    request's encoding, and its content type."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return encode_message(response, media), media


def encode_message(message: Message, media: str) -> bytes:
    if media == PROTOBUF:
        return bytes(message.SerializeToString())
    return str(json_format.MessageToJson(message, indent=None)).encode()


def error_body(status: int, message: str, media: str) -> bytes:
    """A refusal's body: a google.rpc.Status, as OTLP/HTTP answers errors."""
    return encode_message(Status(code=_rpc_code(status), message=message), media)


def _rpc_code(status: int) -> int:
    # google.rpc.Code: INVALID_ARGUMENT, UNAUTHENTICATED, RESOURCE_EXHAUSTED, else UNKNOWN.
    return {400: 3, 401: 16, 413: 3, 415: 3, 429: 8}.get(status, 2)


def hex_id(raw: bytes) -> str:
    return binascii.hexlify(raw).decode("ascii")

"""The suites router of the JSON API (bearer token, like the rest):

GET  /api/suites                          the suites, with their case counts
POST /api/suites                          {name, description?, cases?} (the suite file
                                          shape, docs/suites.md)  -> 201 the suite
GET  /api/suites/<name>                   the suite as its file (JSON)
POST /api/suites/<name>/cases             one case (the file's case shape) -> 201
POST /api/suites/<name>/runs              {endpoints, repeat?, tools?, concurrency?,
                                          min_pass_rate?} -> 201 {id, status, url}
GET  /api/suite-runs/<id>                 the matrix: each cell's pass count and rate,
                                          flaky mark, mean tokens and latency

A suite or case the file format refuses is a 400 naming the case and the field; a suite
run is read by its starter and by staff.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Router
from pydantic import Field, ValidationError

from tools_app.models import Suite, SuiteRun
from tools_app.suites.files import (
    SuiteFile,
    describe_errors,
    save_suite_file,
    suite_file_data,
    suite_file_of,
)
from tools_app.suites.matrix import SuiteMatrix, suite_matrix
from tools_app.suites.runner import SuiteConfigError, suite_run_start
from tools_app.suites.services import CaseError, case_create
from tools_app.suites.tasks import enqueue_suite_run
from tools_app.web.api.base import ApiError, answers
from tools_app.web.api.schemas import Body, Created, JsonObject

router = Router(tags=["suites"])
runs_router = Router(tags=["suites"])


class SuiteBody(Body):
    name: str = Field(min_length=1, max_length=100)
    description: str = ""
    cases: list[JsonObject] = []


class CaseBody(Body):
    name: str = Field(min_length=1, max_length=100)
    messages: list[JsonObject] = Field(min_length=1)
    tools: list[str] = []
    tool_modes: dict[str, str] = {}
    assertions: list[JsonObject] = []


class SuiteRunBody(Body):
    endpoints: list[str] = Field(min_length=1, description="Endpoint names")
    repeat: int = Field(default=1, ge=1, le=100)
    tools: str | None = Field(default=None, description="live, recorded or mock for "
                                                        "every tool (default: per tool)")
    concurrency: int = Field(default=4, ge=1, le=64)
    min_pass_rate: float = Field(default=1.0, ge=0, le=1)


@router.get("", url_name="api_suites", response=answers({200: None}),
            summary="List the suites")
def list_suites(request: HttpRequest) -> JsonResponse:
    suites = [{"name": s.name, "description": s.description, "cases": s.cases.count(),
               "url": f"/api/suites/{s.name}"} for s in Suite.objects.all()]
    return JsonResponse({"suites": suites})


@router.post("", url_name="api_suite_create", response=answers({201: None}, 400, 409),
             summary="Create a suite (the suite file's shape)")
def create_suite(request: HttpRequest, body: SuiteBody) -> JsonResponse:
    if Suite.objects.filter(name=body.name).exists():
        raise ApiError(409, "conflict", f"A suite named {body.name!r} already exists",
                       field="name")
    suite_file = _suite_file(body.model_dump())
    suite = save_suite_file(suite_file, user=request.user)
    return JsonResponse(suite_file_data(suite_file_of(suite)), status=201)


@router.get("/{name}", url_name="api_suite", response=answers({200: None}, 404),
            summary="A suite as its file")
def get_suite(request: HttpRequest, name: str) -> JsonResponse:
    return JsonResponse(suite_file_data(suite_file_of(_suite(name))))


@router.post("/{name}/cases", url_name="api_suite_case_create",
             response=answers({201: None}, 400, 404, 409), summary="Add a case to a suite")
def create_case(request: HttpRequest, name: str, body: CaseBody) -> JsonResponse:
    suite = _suite(name)
    try:
        case = case_create(suite=suite, data=body.model_dump())
    except CaseError as exc:
        status, code = (409, "conflict") if exc.conflict else (400, "invalid_field")
        raise ApiError(status, code, str(exc), field=exc.field) from exc
    return JsonResponse({"suite": suite.name, "name": case.name, "id": case.pk}, status=201)


@router.post("/{name}/runs", url_name="api_suite_run_create",
             response=answers({201: Created}, 400, 404),
             summary="Run the suite on endpoints (each case repeated)")
def start_suite_run(request: HttpRequest, name: str, body: SuiteRunBody) -> JsonResponse:
    suite = _suite(name)
    try:
        suite_run = suite_run_start(suite=suite, config=body.model_dump(), user=request.user)
    except SuiteConfigError as exc:
        raise ApiError(400, "invalid_field", str(exc), field=exc.field) from exc
    enqueue_suite_run(suite_run)
    return JsonResponse({"id": str(suite_run.pk), "status": suite_run.status,
                         "url": f"/suite-runs/{suite_run.pk}/"}, status=201)


@runs_router.get("/{suite_run_id}", url_name="api_suite_run",
                 response=answers({200: None}, 404), summary="A suite run's matrix")
def get_suite_run(request: HttpRequest, suite_run_id: str) -> JsonResponse:
    pk = _uuid(suite_run_id)
    suite_run = SuiteRun.objects.filter(pk=pk).select_related("suite").first() if pk else None
    user: Any = request.user
    if suite_run is None or not (user.is_staff or suite_run.created_by_id == user.pk):
        raise ApiError(404, "not_found", f"No suite run {suite_run_id}")
    return JsonResponse(matrix_json(suite_matrix(suite_run)))


def matrix_json(matrix: SuiteMatrix) -> dict[str, Any]:
    run = matrix.suite_run
    return {
        "id": str(run.pk), "suite": run.suite.name, "status": run.status,
        "error": run.error_message or None, "config": run.config,
        "passed": matrix.passed if not run.is_active else None,
        "cases": matrix.case_names, "endpoints": matrix.endpoint_names,
        "cells": [{"case": c.case_name, "endpoint": c.endpoint_name, "repeat": c.repeat,
                   "evaluated": c.evaluated, "passed": c.passed, "pass_rate": c.pass_rate,
                   "flaky": c.flaky, "meets_bar": c.meets_bar,
                   "mean_tokens": c.mean_tokens, "mean_latency_ms": c.mean_latency_ms,
                   "mean_cost_usd": str(c.mean_cost_usd) if c.mean_cost_usd is not None
                   else None}
                  for c in matrix.cells.values()],
    }


def _suite(name: str) -> Suite:
    suite = Suite.objects.filter(name=name).first()
    if suite is None:
        raise ApiError(404, "not_found", f"No suite named {name!r}")
    return suite


def _suite_file(data: dict[str, Any]) -> SuiteFile:
    try:
        return SuiteFile.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, "invalid_field", describe_errors(exc, data)) from exc


def _uuid(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None

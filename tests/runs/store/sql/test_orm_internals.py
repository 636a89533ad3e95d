"""The parts of Django's ORM the write path's SQL rests on (store/sql/prepared.py compiles a
queryset once and runs it again; store/sql/rowsql.py prepares values as the model's fields
do). A Django upgrade that changes one of them fails here, naming what changed and which
module to check, before any read or write goes wrong."""

from __future__ import annotations

import django
import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model
from django.db.models.query import ValuesIterable, ValuesListIterable

from tools_app.models import Run, RunEvent

pytestmark = [pytest.mark.django_db, pytest.mark.both]

UPGRADE = (f"Django {django.get_version()} changed {{what}}, which "
           "tools_app/runs/store/sql/{module} relies on: check that module against this version")


def changed(what: str, module: str) -> str:
    return UPGRADE.format(what=what, module=module)


def test_values_querysets_say_which_rows_they_build() -> None:
    by_dict = RunEvent.objects.filter(run_id=None).values("seq", "kind")
    by_tuple = RunEvent.objects.filter(run_id=None).values_list("seq", flat=False)
    assert getattr(by_dict, "_iterable_class", None) is ValuesIterable, changed(
        "QuerySet._iterable_class for values()", "prepared.py")
    assert getattr(by_tuple, "_iterable_class", None) is ValuesListIterable, changed(
        "QuerySet._iterable_class for values_list()", "prepared.py")
    query = by_dict.query
    for name in ("selected", "extra_select", "values_select", "annotation_select"):
        assert hasattr(query, name), changed(f"Query.{name}", "prepared.py")


def test_a_compiled_query_gives_its_sql_params_and_selected_columns() -> None:
    connection = connections[DEFAULT_DB_ALIAS]
    query = RunEvent.objects.filter(seq__gt=7).values("seq", "payload").query
    compiler = query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    assert isinstance(sql, str), changed("SQLCompiler.as_sql()", "prepared.py")
    assert 7 in params, changed("SQLCompiler.as_sql()'s parameters", "prepared.py")
    assert compiler.col_count == 2, changed("SQLCompiler.col_count", "prepared.py")
    expressions = [selected[0] for selected in compiler.select[:compiler.col_count]]
    for expression in expressions:
        assert callable(getattr(expression, "get_db_converters", None)), changed(
            "Expression.get_db_converters", "prepared.py")
        assert isinstance(connection.ops.get_db_converters(expression), list), changed(
            "DatabaseOperations.get_db_converters", "prepared.py")


def test_the_composite_column_type_prepared_refuses_is_importable() -> None:
    from django.db.models import expressions

    assert hasattr(expressions, "ColPairs"), changed("expressions.ColPairs", "prepared.py")


def test_a_field_prepares_a_value_for_saving_as_rowsql_calls_it() -> None:
    connection = connections[DEFAULT_DB_ALIAS]
    field = Run._meta.get_field("title")
    assert field.get_db_prep_save("a title", connection) == "a title", changed(
        "Field.get_db_prep_save", "rowsql.py")
    names = [f.attname for f in Run._meta.concrete_fields]
    assert {"id", "title"} <= set(names), changed("Options.concrete_fields", "rowsql.py")


def test_an_instance_marked_saved_by_hand_behaves_as_saved() -> None:
    run = Run(title="inserted by rowsql", snapshot={})
    assert run._state.adding, changed("Model._state.adding", "rowsql.py")
    run.save()
    loaded = Run.objects.get(pk=run.pk)
    assert loaded._state.adding is False, changed("Model._state.adding", "rowsql.py")
    assert loaded._state.db == DEFAULT_DB_ALIAS, changed("Model._state.db", "rowsql.py")
    assert Run.save is Model.save, changed("Run.save (rowsql inserts it by hand)", "rowsql.py")

"""Full-text search of runs and tool calls (the `q` filter), with each database's own
index, filled from the rows already stored: SQLite FTS5 tables kept in sync by
triggers, PostgreSQL generated tsvector columns with GIN indexes. The SQL is
`tools_app.audit.search_index`'s (also used to repair SQLite's triggers after a later
table rebuild); see tools_app/audit/search.py for what a query matches."""

from django.db import migrations


def create(apps, schema_editor):
    from tools_app.audit.search_index import create_search_index

    create_search_index(schema_editor.connection)


def drop(apps, schema_editor):
    from tools_app.audit.search_index import drop_search_index

    drop_search_index(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [("tools_app", "0010_timeline_raw_stream")]

    operations = [migrations.RunPython(create, drop, elidable=False)]

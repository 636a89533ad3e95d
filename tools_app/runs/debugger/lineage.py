"""A run's lineage in words: how it was made (a rerun, a replay, a fork or a splice of
another run; imported from a run file; a try-it run of one tool), as badges and lines
for the run page and the runs list.

Read from the snapshot's sections as stored (plain dicts, as `snapshot.model.listed`
reads them), never the loaded model: the list shows badges for a page of runs, and a
parent's children are read in one query of just the sections that say what they are.

Where each mark comes from (runs/snapshot/model.py): every run made from another has a
`rerun` section (its parent's id, the mode, `fork_round` for a fork or a splice, the
replay options of a replaying rerun) and the parent in `Run.parent`; a splice also has a
`splice` section naming the same parent (a fork of a spliced run copies its parent's
`splice`, which names the grandparent); an imported run has `imported` and a try-it run
`tryit`, both kept by its reruns (the conversation is still that file's, or that
tool's), so those two marks add to a rerun's own.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from django.db.models import F, QuerySet
from django.utils import timezone

from tools_app.models import Run, RunStatus

# A kind's badge label, in the order the badges show.
KINDS = {"rerun": "rerun", "replay": "replay", "fork": "fork", "splice": "splice",
         "import": "import", "tryit": "try-it"}
# How each kind of run made from another names itself in a line ("Rerun of ...").
MADE_WORDS = {"rerun": "Rerun", "replay": "Replay", "fork": "Fork", "splice": "Splice"}
# A rerun's modes, as the run page's buttons name them.
MODE_WORDS = {"as_it_was": "as it was", "current": "current configuration"}
DIVERGENCE_WORDS = {"stop": "stops where it diverges",
                    "live": "goes on live where it diverges"}
# The most children a parent lists, newest first.
CHILDREN_SHOWN = 50


class Badge(NamedTuple):
    kind: str  # a KINDS key (CSS class and data-lineage attribute)
    label: str
    title: str  # the badge's tooltip: what the mark means for this run


def _section(data: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    value = data.get(name)
    return value if isinstance(value, Mapping) else None


def made_from_parent(sections: Mapping[str, Any]) -> str | None:
    """How a run was made from another (rerun, replay, fork, splice), from its stored
    sections; None for a run not made from another."""
    rerun = _section(sections, "rerun")
    if rerun is None:
        return None
    if rerun.get("fork_round") is not None:
        splice = _section(sections, "splice")
        if splice is not None and splice.get("of") == rerun.get("of"):
            return "splice"
        return "fork"
    if replays(_section(rerun, "replay")):
        return "replay"
    return "rerun"


def replays(options: Mapping[str, Any] | None) -> bool:
    """Whether a rerun's replay options answer anything from the recording."""
    return options is not None and (options.get("model", "live") != "live"
                                    or options.get("tools", "live") != "live")


def kinds(stored: Any) -> list[str]:
    """The lineage kinds of a stored snapshot (KINDS keys, in KINDS' order)."""
    data = stored if isinstance(stored, Mapping) else {}
    found = {made_from_parent(data)}
    if _section(data, "imported") is not None:
        found.add("import")
    if _section(data, "tryit") is not None:
        found.add("tryit")
    if _section(data, "rerun") is None and replays(_section(data, "replay")):
        found.add("replay")  # a recording replayed outside a rerun
    return [kind for kind in KINDS if kind in found]


def badges(stored: Any) -> list[Badge]:
    """The lineage badges of a stored snapshot (a `Run.snapshot`): none for a run
    started from the playground or the API."""
    data = stored if isinstance(stored, Mapping) else {}
    made = made_from_parent(data)
    return [Badge(kind, KINDS[kind], _badge_title(kind, data, inherited=made is not None))
            for kind in kinds(data)]


def _badge_title(kind: str, data: Mapping[str, Any], *, inherited: bool) -> str:
    rerun = _section(data, "rerun") or {}
    mode = MODE_WORDS.get(str(rerun.get("mode")), "as it was")
    if kind == "rerun":
        return f"A rerun of another run ({mode})"
    if kind == "replay":
        options = _section(rerun, "replay") or _section(data, "replay") or {}
        return f"A rerun answering from a recording: {replay_words(options)}"
    if kind == "fork":
        return f"A fork of another run from its round {rerun.get('fork_round')}"
    if kind == "splice":
        return "Another run's conversation with a re-executed result spliced in"
    if kind == "import":
        imported = _section(data, "imported") or {}
        source = ("recorded by the proxy" if imported.get("otlp") and imported.get("via") == "proxy"
                  else "received over OpenTelemetry (OTLP)" if imported.get("otlp")
                  else "imported from a run file")
        return f"A rerun of a run {source}" if inherited else source[0].upper() + source[1:]
    return ("A rerun of a try-it run (one call of a tool)" if inherited
            else "A try-it run: one call of a tool from its page")


def replay_words(options: Mapping[str, Any]) -> str:
    """"model recorded, tools live, stops where it diverges"."""
    model, tools = options.get("model", "live"), options.get("tools", "live")
    divergence = DIVERGENCE_WORDS.get(str(options.get("on_divergence")), "")
    return ", ".join(filter(None, [f"model {model}", f"tools {tools}", divergence]))


def status_note(status: str, errors: int) -> str:
    """What a run's status leaves out: "with 2 errors" when it succeeded although tool
    calls failed (the model was told of them), else ""."""
    if status != RunStatus.SUCCEEDED or not errors:
        return ""
    return f"with {errors} error{'s' if errors != 1 else ''}"


def status_words(status: str, errors: int) -> str:
    """"Succeeded with 2 errors", "Failed", ..."""
    words = str(RunStatus(status).label) if status in RunStatus.values else status
    note = status_note(status, errors)
    return f"{words} {note}" if note else words


def _made_words(made: str, rerun: Mapping[str, Any],
                splice: Mapping[str, Any] | None) -> list[str]:
    """What a line about a run made from another says after its kind."""
    if made == "splice" and splice is not None:
        return [f"round {splice.get('round')}'s call {splice.get('tool')}"]
    words = [MODE_WORDS.get(str(rerun.get("mode")), "as it was")]
    if made == "fork":
        words.insert(0, f"from round {rerun.get('fork_round')}")
    if made == "replay":
        words.append("replay " + replay_words(_section(rerun, "replay") or {}))
    return words


class Origin(NamedTuple):
    """How this run was made from its parent, for the line under the run's header:
    "Splice of <parent> · round 1's call get_weather"."""

    kind: str  # a MADE_WORDS key
    words: str  # "Splice", "Rerun"...
    details: list[str]
    parent: Run | None  # None when the parent is no longer stored


class Child(NamedTuple):
    """One run made from this one: "Rerun · as it was · succeeded · 18:56:49"."""

    pk: Any
    kind: str
    text: str
    status: str
    badges: list[Badge]


class Lineage(NamedTuple):
    origin: Origin | None
    children: list[Child]
    more_children: int  # made from this run but not listed (beyond CHILDREN_SHOWN)

    def children_mark(self) -> str:
        return children_mark(self.children, self.more_children)


def run_lineage(run: Run, visible: QuerySet[Run]) -> Lineage:
    """Where `run` came from and the runs made from it that are in `visible` (the runs
    the viewer may see): one query for the parent, one for the children's sections."""
    return Lineage(origin_of(run), *children_of(run, visible))


def children_mark(children: list[Child], more: int) -> str:
    """A digest of what the list of a run's children says (each line, how many more):
    the run page keeps it, and its live socket sends the list again when it differs
    (live/fragments.py `lineage_update`)."""
    lines = [f"{child.pk}\t{child.text}" for child in children] + [str(more)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def origin_of(run: Run) -> Origin | None:
    data = run.snapshot if isinstance(run.snapshot, Mapping) else {}
    made = made_from_parent(data)
    if made is None:
        return None
    rerun = _section(data, "rerun") or {}
    details = _made_words(made, rerun, _section(data, "splice"))
    if rerun.get("mode") == "current":
        when = timezone.localtime(run.created_at).strftime("%Y-%m-%d %H:%M")
        details = [f"with the configuration of {when}" if d == MODE_WORDS["current"] else d
                   for d in details]
    if made == "replay":  # the page says the replay options on their own line
        details = [d for d in details if not d.startswith("replay ")]
    return Origin(made, MADE_WORDS[made], details, run.parent)


# The parts of a child's snapshot its line needs, read by the database as JSON paths:
# not its conversation, nor a replay's recording.
CHILD_SECTIONS = {"rerun": F("snapshot__rerun"), "splice_of": F("snapshot__splice__of"),
                  "splice_round": F("snapshot__splice__round"),
                  "splice_tool": F("snapshot__splice__tool"),
                  "imported": F("snapshot__imported"), "tryit": F("snapshot__tryit__tool")}


def children_of(run: Run, visible: QuerySet[Run]) -> tuple[list[Child], int]:
    """The runs made from `run` that are in `visible`, newest first (at most
    CHILDREN_SHOWN), and how many more there are: one query (two past CHILDREN_SHOWN).
    Of `run` it reads only the primary key, title and creation time."""
    made_from = visible.filter(parent=run)
    rows = list(made_from.order_by("-created_at", "-pk").values(
        "pk", "title", "status", "errors_count", "created_at", **CHILD_SECTIONS,
    )[:CHILDREN_SHOWN + 1])
    more = 0
    if len(rows) > CHILDREN_SHOWN:
        more = made_from.count() - CHILDREN_SHOWN
        rows = rows[:CHILDREN_SHOWN]
    return [_child(row, run) for row in rows], more


def _child(row: Mapping[str, Any], parent: Run) -> Child:
    sections = _child_sections(row)
    made = made_from_parent(sections) or "rerun"
    rerun = _section(sections, "rerun") or {}
    parts = [MADE_WORDS[made], *_made_words(made, rerun, _section(sections, "splice"))]
    if row["title"] and row["title"] != parent.title:  # a fork's own request
        title = row["title"]
        parts.append(f"“{title if len(title) <= 60 else title[:59] + '…'}”")
    parts += [status_words(row["status"], row["errors_count"]).lower(),
              _when(row["created_at"], parent.created_at)]
    return Child(row["pk"], made, " · ".join(parts), row["status"], badges(sections))


def _child_sections(row: Mapping[str, Any]) -> dict[str, Any]:
    """The stored sections a child's kinds are read from, rebuilt from its row."""
    sections: dict[str, Any] = {"rerun": row["rerun"]}
    if row["splice_of"] is not None:
        sections["splice"] = {"of": row["splice_of"], "round": row["splice_round"],
                              "tool": row["splice_tool"]}
    if isinstance(row["imported"], Mapping):
        sections["imported"] = row["imported"]
    if row["tryit"] is not None:
        sections["tryit"] = {"tool": row["tryit"]}
    return sections


def _when(moment: datetime.datetime, parent_moment: datetime.datetime) -> str:
    """The time of a child made the same day as its parent, else date and time."""
    local, parent_local = timezone.localtime(moment), timezone.localtime(parent_moment)
    if local.date() == parent_local.date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M:%S")

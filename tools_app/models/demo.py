"""What `manage.py seed_audit` created: the marks `seed_audit --clear` removes by."""

from __future__ import annotations

from django.db import models


class DemoKind(models.TextChoices):
    USER = "user", "User"
    ENDPOINT = "endpoint", "Endpoint"
    POLICY = "policy", "Policy"
    TOOL = "tool", "Tool"
    # A seed's runs: `key` is the seed, `count` how many runs it wrote (their ids
    # derive from both, so no row per run is needed).
    RUNS = "runs", "Runs of a seed"


class DemoRecord(models.Model):
    """One thing the demo seed created (the primary key of a user, endpoint, policy or
    tool it made; never one that existed before), or one seed's set of runs. Anything
    without a mark is someone's own data and is never removed by `--clear`."""

    kind = models.CharField(max_length=16, choices=DemoKind.choices)
    key = models.CharField(max_length=64)
    count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "key"],
                                               name="demorecord_unique")]

    def __str__(self) -> str:
        return f"demo {self.kind} {self.key}"

"""Validators shared by the models and the forms that fill them."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

tool_name_validator = RegexValidator(
    r"^[a-zA-Z0-9_-]{1,64}$",
    "Tool names must be 1-64 characters from a-z, A-Z, 0-9, '_' and '-' "
    "(providers reject others).",
)
env_var_validator = RegexValidator(
    r"^[A-Z_][A-Z0-9_]*$",
    "Give the NAME of an environment variable (like OPENAI_API_KEY), never the key itself.",
)


def proxy_url_validator(value: str) -> None:
    """A proxy as `http(s)://host:port`, or `env:NAME` to read it from the worker's
    environment. Credentials never go in the stored URL: they would show in the admin,
    the run snapshots and exports; a proxy that needs them is given as env:NAME."""
    if value.startswith("env:"):
        env_var_validator(value[4:])
        return
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("Give the proxy as http://host:port or https://host:port "
                              "(or env:NAME to read it from the environment).")
    if parts.username or parts.password:
        raise ValidationError("Do not store proxy credentials here: put the whole proxy URL "
                              "in an environment variable and give env:NAME.")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValidationError("A proxy URL has only a scheme, a host and a port.")

"""What a run's request parameters may hold, checked in one place for every way a run
starts with parameters someone typed (the API, the playground, a fork).

The limits per provider (custom keys, ranges) are the engine's
(engine/providers/request_limits.py); this adds who may change the endpoint's model:
staff only, since the endpoint's model is what its key's owner chose to pay for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tools_app.engine import ChatRequestParameters
from tools_app.engine.providers.request_limits import request_problems


class ParameterError(ValueError):
    """Parameters a run cannot use; `problems` maps each path under `parameters`
    ("custom.model", "max_output_tokens") to what is wrong, the message names them all."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        super().__init__("; ".join(f"parameters.{path}: {problem}"
                                   for path, problem in self.problems.items()))


def check_parameters(parameters: ChatRequestParameters, *, endpoint_kind: str,
                     endpoint_model: str, user: Any) -> None:
    """Raise ParameterError unless the parameters suit an endpoint of `endpoint_kind`
    whose model is `endpoint_model`, started by `user`."""
    problems = request_problems(endpoint_kind, parameters)
    wanted = parameters.model_name
    if wanted is not None and wanted != endpoint_model and not getattr(user, "is_staff", False):
        problems["model_name"] = (f"only staff may run another model than the endpoint's "
                                  f"({endpoint_model or 'none set'})")
    if problems:
        raise ParameterError(problems)


def default_parameter_problems(endpoint_kind: str, value: Mapping[str, Any]) -> list[str]:
    """What is wrong with an endpoint's default parameters (the admin's form), one line
    each: the same limits as a run's, the model aside (the endpoint's editors are staff)."""
    try:
        parameters = ChatRequestParameters.model_validate(value)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
                for error in exc.errors(include_url=False, include_input=False)]
    return [f"{path}: {problem}"
            for path, problem in request_problems(endpoint_kind, parameters).items()]

"""The engine is framework-free: it never imports Django or Channels."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
import tools_app.engine as engine
names = [m.name for m in pkgutil.walk_packages(engine.__path__, engine.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print("IMPORTED", *names)
print("LOADED", *sorted(sys.modules))
"""


def test_importing_every_engine_module_loads_no_framework() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    lines = dict(line.split(" ", 1) for line in completed.stdout.splitlines())
    imported = lines["IMPORTED"].split()
    loaded = lines["LOADED"].split()
    assert {"tools_app.engine.loop.service", "tools_app.engine.providers.scripted"} <= set(imported)
    assert "tools_app.engine.loop.service" in loaded
    frameworks = [m for m in loaded if m.startswith(("django", "channels", "daphne"))]
    assert frameworks == []


def test_the_import_linter_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    completed = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    for contract in ("Layers: imports point down only",
                     "No import cycles between sibling modules or packages, at any depth",
                     "The engine and the fake provider server never import Django or the app",
                     "The engine imports no third party but pydantic, httpx, aiohttp, "
                     "jsonschema"):
        assert f"{contract} KEPT" in output
    assert "0 broken" in output

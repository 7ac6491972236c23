"""The seams, checked by importing for real in fresh interpreters: the core loads
without Textual, and the probe loads without anything else of gpudoctor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def core_modules() -> list[str]:
    """Every module of gpudoctor but the TUI's (and the entry points: __main__ and the
    probe's boot file, which run when imported)."""
    names = []
    for path in sorted((ROOT / "gpudoctor").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "tui" in parts or "boot" in parts or parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_core_modules_do_not_load_textual_or_torch() -> None:
    modules = core_modules()
    assert "gpudoctor.app.trial" in modules and "gpudoctor.cli.run" in modules
    for module in modules:
        loaded = python(
            f"import sys, {module}; print([m for m in ('textual', 'torch') if m in sys.modules])"
        )
        assert loaded == "[]", module


def test_headless_run_never_loads_textual(tmp_path: Path) -> None:
    code = (
        "import sys; from gpudoctor.cli import main; "
        f"rc = main(['--store', {str(tmp_path / 's.db')!r}, 'run', '--headless', '--', 'true']); "
        "print(rc, 'textual' in sys.modules, 'torch' in sys.modules)"
    )
    assert python(code).splitlines()[-1] == "0 False False"


def test_probe_loads_alone_through_its_boot_folder(tmp_path: Path) -> None:
    """The job's Python may not have gpudoctor installed: the probe needs none of it."""
    boot = ROOT / "gpudoctor" / "probe" / "boot"
    code = "import sys; print(sorted(m for m in sys.modules if 'gpudoctor' in m))"
    env = {
        "PYTHONPATH": str(boot),
        "GPUDOCTOR_SOCKET": str(tmp_path / "none.sock"),
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env, cwd=tmp_path).stdout  # fmt: skip
    modules = eval(out)  # noqa: S307 - our own printed list
    assert "_gpudoctor_probe" in modules
    assert not [m for m in modules if m.startswith("gpudoctor")]

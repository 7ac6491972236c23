"""How torch is imported, each way upstream code does it (every Hugging Face script asks
`importlib.util.find_spec("torch")` first; transformers before torch): the probe sees
torch every time, the script's own count is the doctor's, and what the script is told
is what it is told without the probe (issue 39). These check what the doctor counts
and the job prints, never a speed: they run beside the main group (scripts/test.sh)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import PY, doctor, env_without_probe, run_job

pytestmark = pytest.mark.timeout(240)

LOOP = """
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    for i in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    print("steps", STEPS, round(loss.item(), 6))
"""

# How the script comes by torch: each must leave the probe seeing it.
IMPORTS = {
    "find_spec_first": """
        import importlib.util
        assert importlib.util.find_spec("torch") is not None
        import torch
    """,
    "find_spec_twice": """
        import importlib.util
        importlib.util.find_spec("torch"); importlib.util.find_spec("torch")
        import torch
    """,
    "import_module": """
        import importlib
        torch = importlib.import_module("torch")
    """,
    "from_import": """
        from torch import nn
        import torch
    """,
    "lazy_loader": """
        import importlib.util, sys
        spec = importlib.util.find_spec("torch")
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["torch"] = module
        loader.exec_module(module)
        import torch
    """,
    "in_a_thread": """
        import threading
        t = threading.Thread(target=lambda: __import__("torch")); t.start(); t.join()
        import torch
    """,
}


def script(tmp_path: Path, name: str, head: str, body: str = LOOP, steps: int = 60) -> Path:
    path = tmp_path / f"{name}.py"
    text = textwrap.dedent(head) + textwrap.dedent(body).replace("STEPS", str(steps))
    path.write_text(text)
    return path


@pytest.mark.parametrize("form", sorted(IMPORTS))
def test_torch_is_seen_however_it_is_imported(tmp_path: Path, form: str) -> None:
    path = script(tmp_path, form, IMPORTS[form])
    proc, report = run_job(tmp_path, path, doctor_args=("--no-stacks",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "steps 60" in proc.stdout
    assert report["steps"]["count"] == 60, report.get("notes", report)
    assert report["steps"]["split"], "the steps were measured, not only counted"


def test_find_spec_answers_the_caller_as_without_the_probe(tmp_path: Path) -> None:
    """The spec a caller gets is the one the import system would give: same origin,
    loader class and search locations; and torch then imports from it."""
    path = tmp_path / "spec.py"
    path.write_text(
        textwrap.dedent("""
        import importlib.util, json
        spec = importlib.util.find_spec("torch")
        print(json.dumps([spec.name, spec.origin, type(spec.loader).__name__,
                          list(spec.submodule_search_locations or [])]))
        import torch
        print(type(torch.nn.Linear(2, 2)).__name__)
        """)
    )
    plain = subprocess.run(
        [PY, str(path)], capture_output=True, text=True, env=env_without_probe(), timeout=120
    )
    proc = doctor("run", "--headless", "--no-stacks", "--", PY, str(path))
    assert proc.returncode == 0 and plain.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == plain.stdout


def test_transformers_imported_before_torch(tmp_path: Path) -> None:
    """transformers asks find_spec("torch") as it loads: a plain loop on a small model
    built from a config is still counted, and its steps measured."""
    path = script(
        tmp_path,
        "hf_first",
        """
        import transformers
        import torch
        config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=97,
                                         n_positions=32)
        """,
        """
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(config)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(0, 97, (4, 16))
        for i in range(STEPS):
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            opt.step()
            opt.zero_grad()
        print("steps", STEPS)
        """,
        steps=40,
    )
    proc, report = run_job(tmp_path, path, doctor_args=("--no-stacks",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert report["steps"]["count"] == 40
    assert report["steps"]["split"]["forward"] > 0

"""Patterns of upstream training code that the doctor miscounted or did not see (issue
39), each as a small script of our own (how torch is imported: test_torch_imports.py):
an evaluation before the first step, a closure optimizer, a hand-written update. Each runs under
`gpudoctor run --headless --report`: the count is the script's own, and nothing that
is not input work is called input."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, env_without_probe, finding_ids, run_job

pytestmark = pytest.mark.timeout(240)

EVAL_FIRST = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 64), torch.randn(256, 1)

    def estimate_loss():
        model.eval()
        with torch.no_grad():
            losses = [torch.nn.functional.mse_loss(model(x), y).item() for _ in range(10)]
        model.train()
        return sum(losses) / len(losses)

    for i in range(200):
        if i % 20 == 0:
            print("step", i, "loss", round(estimate_loss(), 4))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("steps", 200)
"""

LBFGS = """
    import time, torch
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=20)
    x, y = torch.randn(64, 16), torch.randn(64, 1)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        time.sleep(0.02)
        return loss

    for i in range(3):
        opt.step(closure)
    print("steps", 3)
"""

HAND_WRITTEN_UPDATE = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    x, y = torch.randn(256, 64), torch.randn(256, 1)
    total = 0.0
    for i in range(300):
        loss = torch.nn.functional.mse_loss(model(x), y)
        model.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.01)
        total += loss.item()
    print("steps", 300)
"""

# The issue's own pattern: the update outside any `no_grad` block, on `.data`
# (pytorch/examples' word_language_model and regression), with clipping and a `.item()`
# after it; big enough a share of the step (~15% on this machine) that the old clock
# called it input (`input-bound`, 13% data wait, where the loop has no input code).
HAND_WRITTEN_DATA_UPDATE = """
    import torch
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(512, 512), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers)
    x, y = torch.randn(8, 512), torch.randn(8, 512)
    for i in range(400):
        model.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.01)
        total = loss.item()
    print("steps", 400, round(total, 6))
"""


# pytorch/examples' reinforce.py: the policy called once an action with gradients on,
# one backward and one optimizer step an episode. The first episode's forwards came
# before any backward: they were taken for an evaluation before the first step (17 of
# its 18 forwards, "evaluation_forwards": 17), where they are the first step's own.
ROLLOUT = """
    import torch
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    for episode in range(40):
        state, log_probs = torch.zeros(4), []
        for t in range(10 + (episode * 7) % 25):  # the environment's steps
            probs = torch.softmax(policy(state.unsqueeze(0)), dim=1)
            action = torch.distributions.Categorical(probs).sample()
            log_probs.append(torch.log(probs[0, action]))
            state = torch.tanh(state + 0.1 * (action.item() * 2 - 1) + 0.05 * t)
        loss = -torch.cat(log_probs).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("steps", 40)
"""


# Lightning's PPO example (examples/fabric/reinforcement_learning): each update collects
# a rollout under `no_grad` with the agent in training mode, then runs minibatch steps
# over it. The first rollout, before any backward, read as 256 evaluation forwards.
ROLLOUT_NO_GRAD = """
    import torch
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for update in range(10):
        with torch.no_grad():  # the rollout: an action a call, the next state from it
            state, states = torch.zeros(1, 4), []
            for t in range(64):
                action = torch.softmax(policy(state), dim=1).argmax()
                states.append(state)
                state = torch.tanh(state + 0.1 * action - 0.05)
        batch = torch.cat(states)
        for epoch in range(4):  # the update: 4 optimizer steps over the rollout
            loss = policy(batch).logsumexp(dim=1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("steps", 40)
"""


# cleanrl's ppo_continuous_action.py: the optimizer made first, then each iteration a
# rollout of 2,048 calls under no_grad in training mode (more than the probe holds back
# before a first backward), then 10 epochs of minibatch steps: it read 3,009 steps for
# its 960, the first rollout's 2,049 calls taken for inference's steps.
LONG_ROLLOUT = """
    import torch
    torch.manual_seed(0)
    agent = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(agent.parameters(), lr=3e-4)
    obs = torch.zeros(2500, 3)
    for iteration in range(2):
        with torch.no_grad():
            state = torch.randn(1, 3)
            for t in range(2500):  # the rollout: a call an environment step
                obs[t] = state
                state = torch.tanh(state + 0.01 * agent(state))
        for epoch in range(5):
            for mb in obs.split(625):
                loss = agent(mb).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    print("steps", 2 * 5 * 4)
"""


@pytest.mark.parametrize(
    ("name", "body", "count"),
    [
        pytest.param("eval_first", EVAL_FIRST, 200, id="eval_first"),
        pytest.param("lbfgs", LBFGS, 3, id="lbfgs"),
        pytest.param("hand_update", HAND_WRITTEN_UPDATE, 300, id="hand_update"),
        pytest.param("hand_data_update", HAND_WRITTEN_DATA_UPDATE, 400, id="hand_data_update"),
        pytest.param("rollout", ROLLOUT, 40, id="rollout"),
        pytest.param("rollout_no_grad", ROLLOUT_NO_GRAD, 40, id="rollout_no_grad"),
        pytest.param("rollout_long", LONG_ROLLOUT, 40, id="rollout_long"),
    ],
)
def test_the_count_is_the_scripts_own_and_nothing_else_is_input(
    tmp_path: Path, name: str, body: str, count: int
) -> None:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    proc, report = run_job(tmp_path, path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"steps {count}" in proc.stdout
    assert report["steps"]["count"] == count
    assert "input-bound" not in finding_ids(report)
    notes = json.dumps(report.get("notes", []))
    assert "never reached the doctor" not in notes
    if name == "eval_first":  # 10 forwards before the first step, and 9 times after
        assert report["facts"]["evaluation_forwards"] >= 10
    if name.startswith("rollout"):  # every forward trains: none is an evaluation's
        assert report["facts"]["evaluation_forwards"] == 0
        assert report["ledger"]["evaluation_s"] == 0


def test_batches_in_a_mapping_that_is_not_a_dict_have_their_size(tmp_path: Path) -> None:
    """Hugging Face's padding collators (DataCollatorWithPadding, the language-modeling
    ones) hand the loop a BatchEncoding, a UserDict: run_glue_no_trainer.py's steps had
    no batch size and its report no samples a second."""
    path = tmp_path / "user_dict.py"
    path.write_text(
        textwrap.dedent(
            """
            import collections, torch
            class Encoding(collections.UserDict):  # as transformers' BatchEncoding
                pass
            torch.manual_seed(0)
            data = torch.randn(640, 16)
            loader = torch.utils.data.DataLoader(
                data, batch_size=16, collate_fn=lambda rows: Encoding(x=torch.stack(rows)))
            model = torch.nn.Linear(16, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for epoch in range(2):
                for batch in loader:
                    loss = model(batch["x"]).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            print("steps", 80)
            """
        )
    )
    proc, report = run_job(tmp_path, path)
    assert proc.returncode == 0 and "steps 80" in proc.stdout, proc.stderr[-2000:]
    assert report["steps"]["count"] == 80
    assert report["steps"]["batch_size"] == 16 and report["steps"]["samples_per_s"] > 0


def test_a_script_that_never_imports_torch_is_said_so(tmp_path: Path) -> None:
    """Its parsed options reach the doctor, torch never does: not 'imported torch but
    ran no training step'."""
    path = tmp_path / "no_torch.py"
    path.write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--n', type=int, "
        "default=3)\nargs = p.parse_args()\nprint(sum(range(args.n)))\n"
    )
    proc, report = run_job(tmp_path, path, "--n", "4", doctor_args=("--no-stacks",))
    assert proc.returncode == 0 and proc.stdout == "6\n"
    notes = " ".join(report["notes"])
    assert "saw no torch at work" in notes and "ran no training step" not in notes


def test_a_script_that_imports_torch_and_trains_nothing_is_not_told_it_never_did(
    tmp_path: Path,
) -> None:
    """A script that only computes with tensors (no model, loader or optimizer) sends the
    doctor nothing, as a DataLoader worker does not: the note names that case too rather
    than saying flatly that torch was never imported."""
    path = tmp_path / "tensors_only.py"
    path.write_text("import time\nimport torch\nprint(torch.ones(3).sum().item())\ntime.sleep(1)\n")
    proc, report = run_job(tmp_path, path, doctor_args=("--no-stacks",))
    assert proc.returncode == 0 and proc.stdout == "3.0\n"
    notes = " ".join(report["notes"])
    assert "made no model, loader or optimizer" in notes, notes


def test_input_code_before_a_hand_written_update_is_still_input(tmp_path: Path) -> None:
    """regression/main.py's shape: each batch built in Python (the input: a quarter to a
    half of the step here), the update by hand on `.data` after backward. The update is
    not data wait; the input still is, and is found. Its output is the same plain."""
    path = tmp_path / "built_batches.py"
    path.write_text(
        textwrap.dedent("""
        import random, torch
        random.seed(0); torch.manual_seed(0)
        model = torch.nn.Linear(64, 1)

        def get_batch():
            rows = [[random.random() for _ in range(64)] for _ in range(32)]
            x = torch.tensor(rows)
            return x, x.sum(dim=1, keepdim=True)

        for i in range(400):
            x, y = get_batch()
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            for p in model.parameters():
                p.data.add_(-0.01 * p.grad)
        print("steps", 400, round(loss.item(), 6))
        """)
    )
    proc, report = _plain_and_doctored(tmp_path, path)
    assert report["steps"]["count"] == 400
    assert "input-bound" in finding_ids(report), report["steps"]["split"]


def _plain_and_doctored(
    tmp_path: Path, path: Path, *job_args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The script run plain, then under the doctor: both succeed with the same output;
    the doctored run and its report."""
    plain = subprocess.run(
        [PY, str(path), *job_args], capture_output=True, text=True, env=env_without_probe()
    )
    assert plain.returncode == 0, plain.stderr[-2000:]
    proc, report = run_job(tmp_path, path, *job_args, doctor_args=("--no-stacks",))
    assert proc.returncode == 0 and proc.stdout == plain.stdout
    return proc, report


# Gradient accumulation with an evaluation every few steps over a DataLoader of its own
# (slow to read, as a validation set on disk is): the shape of Hugging Face's
# `*_no_trainer.py` examples (Accelerate's `accumulate`) and of a hand-written loop.
ACCUMULATE_AND_EVALUATE = """
    import time, torch
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    class SlowValidation(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.001)
            return torch.full((128,), float(i)), torch.tensor(i % 2)

    torch.manual_seed(0)
    x = torch.randn(960, 128)
    y = (x.sum(1) > 0).long()
    train = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    valid = DataLoader(SlowValidation(), batch_size=16)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(), torch.nn.Linear(1024, 2),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ACCUMULATE = 4

    def evaluate():
        model.eval()
        with torch.no_grad():
            right = sum((model(v).argmax(1) == t).sum().item() for v, t in valid)
        model.train()
        return right

    SETUP

    steps = 0
    for i, (xb, yb) in enumerate(train):
        STEP
        if steps and steps % 5 == 0 and just_stepped:
            print("step", steps, "valid", evaluate())
    print("steps", steps)
"""

PLAIN_ACCUMULATION = (
    "",
    """
        loss = torch.nn.functional.cross_entropy(model(xb), yb) / ACCUMULATE
        loss.backward()
        just_stepped = (i + 1) % ACCUMULATE == 0
        if just_stepped:
            opt.step()
            opt.zero_grad()
            steps += 1
    """,
)

ACCELERATE_ACCUMULATION = (
    """
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATE, cpu=True)
    model, opt, train, valid = accelerator.prepare(model, opt, train, valid)
    """,
    """
        with accelerator.accumulate(model):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        just_stepped = accelerator.sync_gradients
        if just_stepped:
            steps += 1
    """,
)


# A loader that reads a batch ahead (Accelerate's, Lightning's) fetches an epoch's
# first step's batches one more and its last step's one fewer: 40 and 24 samples where
# the others take 32. A report's samples a step are those of the steps measured in
# detail (15 or more here), so one such step measured without its twin moves the mean
# by up to 8/15 of a sample: 31.48 against 32 in a suite run beside a busy process.
READ_AHEAD_REL = 0.04


@pytest.mark.parametrize(
    ("setup", "step", "rel"),
    [
        pytest.param(*PLAIN_ACCUMULATION, 0.002, id="plain"),
        pytest.param(*ACCELERATE_ACCUMULATION, READ_AHEAD_REL, id="accelerate"),
    ],
)
def test_accumulated_steps_take_all_their_batches_and_evaluation_is_not_data_wait(
    tmp_path: Path, setup: str, step: str, rel: float
) -> None:
    """30 optimizer steps of 4 micro-batches of 8, and an evaluation every 5 steps over a
    validation loader that takes ~64 ms to read. A step is the optimizer's (the script's
    own count), its samples are its 4 batches' 32 (samples/s 4x what one batch gives),
    and the validation loader's reads are evaluation time, not the next step's data wait
    (they were: `input-bound` on a job whose training input is a tensor in memory)."""
    body = textwrap.dedent(ACCUMULATE_AND_EVALUATE)
    body = body.replace("SETUP", textwrap.dedent(setup).strip())
    body = body.replace("STEP", textwrap.indent(textwrap.dedent(step).strip(), " " * 4).strip())
    path = tmp_path / "accumulate.py"
    path.write_text(body)
    proc, report = _plain_and_doctored(tmp_path, path)
    assert "steps 30" in proc.stdout and report["steps"]["count"] == 30
    s = report["steps"]
    assert s["batch_size"] == 32
    assert s["samples_per_s"] == pytest.approx(32 * s["steps_per_s"], rel=rel)
    # the training loader's own wait (four batches of 8 indexed and collated a step) is
    # ~9% of a 5.3 ms step on this machine, a low finding; the validation's reads, which
    # the old clock counted as data wait, would make it medium or high
    assert s["data_wait_fraction"] < 0.2, s
    assert "input-bound" not in finding_ids(report, "medium", "high")
    # the evaluations the probe saw in detail (the first 20 steps are all measured so):
    # their reads are the ledger's evaluation, at least 3 of them at ~64 ms each
    assert report["ledger"]["evaluation_s"] >= 0.15, report["ledger"]


HF_TRAINER_ACCUMULATION = """
    import hashlib, tempfile
    import torch
    from transformers import (BertConfig, BertForSequenceClassification, PrinterCallback,
                              Trainer, TrainingArguments)
    from transformers.utils import logging

    logging.set_verbosity_error()

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n, seed):
            g = torch.Generator().manual_seed(seed)
            self.ids = torch.randint(5, 100, (n, 12), generator=g)

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": (self.ids[i, 0] > 50).long()}

    torch.manual_seed(3)
    config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model = BertForSequenceClassification(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=20, per_device_train_batch_size=8,
            gradient_accumulation_steps=4, eval_strategy="steps", eval_steps=5,
            per_device_eval_batch_size=16, report_to=[], logging_strategy="no",
            save_strategy="no", disable_tqdm=True, use_cpu=True, seed=3,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(200, 0),
                          eval_dataset=Tokens(96, 1))
        trainer.remove_callback(PrinterCallback)
        result = trainer.train()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    print("steps", result.global_step, hashlib.sha256(weights.numpy().tobytes()).hexdigest())
"""


def test_a_hugging_face_trainer_with_accumulation_and_evaluations(tmp_path: Path) -> None:
    """Trainer, 4 micro-batches of 8 a step, an evaluation every 5 steps, 200 samples an
    epoch (6 steps of 4 batches and one of 1). Accelerate's loader reads a batch ahead,
    so a step's batches are fetched partly in the step before and an epoch's last step
    fetches none. The count is Trainer's global_step; samples a step are the epoch's
    200 over its 7 steps (about 28.6); samples/s is known (it was not: a step measured
    with no batch made it None for the rest of the run); the evaluations are not input."""
    path = tmp_path / "trainer.py"
    path.write_text(textwrap.dedent(HF_TRAINER_ACCUMULATION))
    proc, report = _plain_and_doctored(tmp_path, path)
    assert proc.stdout.startswith("steps 20 ") and report["steps"]["count"] == 20
    s = report["steps"]
    assert s["batch_size"] == 32  # the median step's: 4 batches of 8
    assert s["samples_per_s"] is not None
    assert 24 <= s["samples_per_s"] / s["steps_per_s"] <= 33, s
    # Trainer's collation of the training batches is ~4% of a 10 ms step here, at the
    # edge of a low finding; the evaluations' reads counted as data wait would be more
    assert s["data_wait_fraction"] < 0.2, s
    assert "input-bound" not in finding_ids(report, "medium", "high")


LIGHTNING_ACCUMULATION = """
    import logging, time
    import lightning.pytorch as pl
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    class SlowValidation(Dataset):
        def __len__(self):
            return 48

        def __getitem__(self, i):
            time.sleep(0.001)
            return torch.full((16,), i / 48), torch.tensor([0.5])

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 1))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            return nn.functional.mse_loss(self(batch[0]), batch[1])

        def validation_step(self, batch, i):
            self.log("val", nn.functional.mse_loss(self(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)

    pl.seed_everything(0, verbose=False)
    x = torch.randn(640, 16)
    trainer = pl.Trainer(
        max_epochs=2, accumulate_grad_batches=4, val_check_interval=20, logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        accelerator="cpu",
    )
    model = Net()
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8,
                                  shuffle=True), DataLoader(SlowValidation(), batch_size=16))
    print("steps", trainer.global_step, [round(p.sum().item(), 6) for p in model.parameters()])
"""


def test_lightning_accumulation_with_validation_every_20_batches(tmp_path: Path) -> None:
    """Lightning's accumulate_grad_batches=4 and a validation every 20 batches (its
    sanity check too), over a validation set slow to read. The old clock called it
    input-bound (72% data wait: the validation's reads) with a quarter of its samples/s."""
    path = tmp_path / "lightning_accumulate.py"
    path.write_text(textwrap.dedent(LIGHTNING_ACCUMULATION))
    proc, report = _plain_and_doctored(tmp_path, path)
    assert proc.stdout.startswith("steps 40 ") and report["steps"]["count"] == 40
    s = report["steps"]
    assert s["batch_size"] == 32
    assert s["samples_per_s"] == pytest.approx(32 * s["steps_per_s"], rel=READ_AHEAD_REL)
    # the training loader's own wait is its data wait: four batches through Lightning's
    # fetcher are 14-27% of a 2.4 ms step (more on a busy machine: collating is CPU
    # work), a low or medium finding (its validations' time in the steps' hid it
    # before, and made their split 89% "other"); the validations' reads, 72% before
    assert s["data_wait_fraction"] < 0.4, s
    assert "input-bound" not in finding_ids(report, "high")
    assert s["split"]["other"] < 0.6, s


# A validation set slow to read (as one on disk is): n samples of 32 features, each 0.5 ms.
# Spliced into the scripts below that evaluate between steps.
SLOW_VALIDATION = """
    class SlowValidation(Dataset):
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            time.sleep(0.0005)
            return torch.full((32,), float(i % 7)), i % 2
"""


# Short steps (~0.3 ms: most are only counted, one in a hundred or more measured in
# detail) and an evaluation every 250 of them over a loader slow to read, a final test
# over a larger one, then a save: the shape of most scripts that train a small model.
# The script times its own parts into a file of its own (its output stays the same).
EVALUATE_BETWEEN_SHORT_STEPS = (
    """
    import json, sys, time, torch
    from torch.utils.data import DataLoader, Dataset, TensorDataset
"""
    + SLOW_VALIDATION
    + """
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(2048, 32)
    train = DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=8, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ema = torch.optim.swa_utils.AveragedModel(  # an average of the weights, as timm keeps
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))

    def evaluate(n):
        model.eval()
        with torch.no_grad():
            right = [sum((m(v).argmax(1) == t).sum().item()
                         for v, t in DataLoader(SlowValidation(n), batch_size=16))
                     for m in (model, ema)]  # the model, then its average (timm's order)
        model.train()
        return right

    steps, own = 0, {"evaluation": 0.0}
    own["start"] = time.perf_counter()
    for epoch in range(6):
        for xb, yb in train:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            ema.update_parameters(model)
            steps += 1
            if steps % 250 == 0:
                t0 = time.perf_counter()
                print("step", steps, "valid", evaluate(240))
                own["evaluation"] += time.perf_counter() - t0
    own["last_step"] = time.perf_counter()
    print("steps", steps, "test", evaluate(720))
    own["test"] = time.perf_counter() - own["last_step"]
    state = {"model": model.state_dict(), "big": torch.zeros(8 << 20)}
    t0 = time.perf_counter()
    torch.save(state, sys.argv[1])
    own["save"] = time.perf_counter() - t0
    json.dump(own, open(sys.argv[2], "w"))
"""
)


def test_evaluations_between_counted_steps_are_timed_whole_and_are_not_training(
    tmp_path: Path,
) -> None:
    """The wall-time ledger of a job with evaluations between short steps, against the
    script's own timing. Its evaluations fall on steps that are only counted: the ledger
    had their forwards only (0.03 s of 1.9 s), and the rest was counted as training.
    Now each evaluation is timed from the step before it to the next step's first
    forward (the probe measures that step in detail from its first evaluation forward),
    or to its last forward after the last step, with the average
    of the weights it validates after the model (timm's EMA: a model never trained,
    whose calls were the next step's forward), the final test after the last step is
    not taken out of training's span, and neither is the save."""
    path = tmp_path / "evaluate.py"
    path.write_text(textwrap.dedent(EVALUATE_BETWEEN_SHORT_STEPS))
    saved, own_file = tmp_path / "model.pt", tmp_path / "own.json"
    proc, report = _plain_and_doctored(tmp_path, path, str(saved), str(own_file))
    own = json.loads(own_file.read_text())
    assert "steps 1536 " in proc.stdout and report["steps"]["count"] == 1536
    ledger = report["ledger"]
    # 6 evaluations and the test: the probe's evaluation ends at each one's last forward
    # (the script's timer a little later: the last `.item()`, `model.train()`)
    evaluation = own["evaluation"] + own["test"]
    assert ledger["evaluation_s"] == pytest.approx(evaluation, rel=0.1, abs=0.03), (ledger, own)
    training = own["last_step"] - own["start"] - own["evaluation"]
    assert ledger["training_s"] == pytest.approx(training, rel=0.1, abs=0.05), (ledger, own)
    assert ledger["checkpoint_s"] == pytest.approx(own["save"], rel=0.2, abs=0.02), (ledger, own)
    # an evaluation is no step's time: the steps it falls in, measured in detail, keep
    # their split (the evaluations' 1.9 s in their wall made it all "other")
    split = report["steps"]["split"]
    # (forward 9% beside a busy process in a fresh clone's suite; ~0 when all was "other")
    assert split["other"] < 0.5 and split["forward"] > 0.05, report["steps"]


# The mixed-precision recipe of torch's AMP tutorial, Trainer's fp16 and Lightning's
# "16-mixed": autocast to float16 and a GradScaler, whose first steps overflow (the
# scale starts at 2**16 and halves at each) and are skipped: `optimizer.step()` is not
# called, and the loop counts them all the same. Here on the CPU (float16 autocast).
FP16_SCALER = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(32, 64) * 30, torch.randint(0, 10, (32,))
    skipped = 0
    for step in range(200):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        skipped += scaler.get_scale() < scale
    print("steps", step + 1, "skipped", skipped, round(loss.item(), 4))
"""


def test_steps_the_grad_scaler_skipped_are_steps(tmp_path: Path) -> None:
    """The steps whose optimizer step the GradScaler skipped (non-finite gradients) were
    merged into the next one as if they were micro-batches of gradient accumulation:
    196 steps of the script's 200."""
    path = tmp_path / "fp16.py"
    path.write_text(textwrap.dedent(FP16_SCALER))
    proc, report = _plain_and_doctored(tmp_path, path)
    skipped = int(proc.stdout.split()[3])
    assert proc.stdout.startswith("steps 200 ") and skipped > 0, proc.stdout
    assert report["steps"]["count"] == 200


# Trainer's evaluation of a DDP job calls the model unwrapped (`model.module`), a model
# the loop never calls itself with gradients on; one rank here (gloo, world size 1).
DDP_EVALUATED_UNWRAPPED = (
    """
    import json, sys, tempfile, time, torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset, TensorDataset
"""
    + SLOW_VALIDATION
    + """
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0,
                            world_size=1)
    x = torch.randn(1024, 32)
    train = DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=8, shuffle=True)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def evaluate(inner):
        inner.eval()
        with torch.no_grad():
            right = sum((inner(v).argmax(1) == t).sum().item()
                        for v, t in DataLoader(SlowValidation(160), batch_size=16))
        inner.train()
        return right

    steps, own = 0, 0.0
    for epoch in range(3):
        for xb, yb in train:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            steps += 1
            if steps % 128 == 0:
                t0 = time.perf_counter()
                print("step", steps, "valid", evaluate(model.module))
                own += time.perf_counter() - t0
    print("steps", steps)
    json.dump({"evaluation": own}, open(sys.argv[1], "w"))
    dist.destroy_process_group()
"""
)


def test_a_ddp_model_evaluated_unwrapped_is_evaluation(tmp_path: Path) -> None:
    """The model DDP wraps is the trained model's too: its calls with gradients off are
    evaluations (its class stays patched when it is no root of its own). They were not
    seen at all: the ledger had no evaluation, its time was the next step's."""
    path, own_file = tmp_path / "ddp_eval.py", tmp_path / "own.json"
    path.write_text(textwrap.dedent(DDP_EVALUATED_UNWRAPPED))
    proc, report = run_job(tmp_path, path, str(own_file), doctor_args=("--no-stacks",))
    assert "steps 384" in proc.stdout and report["steps"]["count"] == 384, proc.stderr[-2000:]
    own = json.loads(own_file.read_text())["evaluation"]
    evaluation = report["ledger"]["evaluation_s"]
    assert evaluation == pytest.approx(own, rel=0.1, abs=0.03), (report["ledger"], own)


# Pseudo-labels (FixMatch's shape), a rollout: the trained model called with gradients
# off in every step, in training mode, before the step's own forward.
PSEUDO_LABELS = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(512, 32)
    loader = DataLoader(TensorDataset(x), batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for epoch in range(20):
        for (xb,) in loader:
            with torch.no_grad():
                pseudo = model(xb + 0.01 * torch.randn_like(xb)).argmax(1)
            loss = torch.nn.functional.cross_entropy(model(xb), pseudo)
            loss.backward()
            opt.step()
            opt.zero_grad()
            steps += 1
    print("steps", steps, round(loss.item(), 4))
"""


def test_a_call_with_gradients_off_in_training_mode_is_the_steps(tmp_path: Path) -> None:
    """The pseudo-labels' call is the step's work, not an evaluation: the step keeps its
    batch (its samples were taken out: samples/s read nothing) and its data wait, and
    the ledger has no evaluation (it had a tenth of the training time: 0.025 of 0.22 s)."""
    path = tmp_path / "pseudo.py"
    path.write_text(textwrap.dedent(PSEUDO_LABELS))
    proc, report = run_job(tmp_path, path, doctor_args=("--no-stacks",))
    assert proc.stdout.startswith("steps 640 ") and report["steps"]["count"] == 640
    s = report["steps"]
    assert s["batch_size"] == 16
    assert s["samples_per_s"] == pytest.approx(16 * s["steps_per_s"], rel=0.002)
    assert report["ledger"]["evaluation_s"] == 0, report["ledger"]


# Hogwild as pytorch/examples' mnist_hogwild writes it: workers started with 'spawn'
# train the model in shared memory; the parent then tests it, batch by batch, with
# more batches than a worker has steps.
HOGWILD_THEN_TEST = """
    import torch
    import torch.multiprocessing as mp

    def train(rank, model):
        torch.manual_seed(rank)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(30):
            opt.zero_grad()
            model(torch.randn(8, 16)).pow(2).mean().backward()
            opt.step()
        print("worker done", rank, 30, flush=True)

    if __name__ == "__main__":
        mp.set_start_method("spawn", force=True)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        model.share_memory()
        procs = [mp.Process(target=train, args=(r, model)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        model.eval()
        with torch.no_grad():
            total = sum(model(torch.randn(4, 16)).sum().item() for _ in range(120))
        print("tested 120 batches", [p.exitcode for p in procs])
"""


def test_a_parent_that_tests_what_its_workers_trained_is_not_a_stepping_process(
    tmp_path: Path,
) -> None:
    """Its 120 forwards, without a backward, while the workers train: evaluation of their
    model, not 120 steps of the job's (they were, and being the most, the report's)."""
    path = tmp_path / "hogwild.py"
    path.write_text(textwrap.dedent(HOGWILD_THEN_TEST))
    proc, report = run_job(tmp_path, path, doctor_args=("--no-stacks",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tested 120 batches [0, 0]" in proc.stdout
    probe = report["probe"]
    assert sorted(probe["steps_by_process"].values()) == [30, 30], probe
    assert len(probe["processes"]) == 3 and proc.stdout.count("worker done") == 2
    assert report["steps"]["count"] == 30
    # each worker's steps are updates of their own: the summary adds them up
    assert ", 30 steps in the process with the most, 60 in all 2 processes that train" in (
        proc.stderr
    )


def test_processes_that_only_infer_keep_their_steps_unless_another_trains() -> None:
    """Two inference processes (a forward each step): both step. Once a third trains,
    theirs are its evaluation or rollouts; a process not yet said keeps its steps."""
    from gpudoctor.timeline import Timeline

    t = Timeline(command=["python"], started_unix=0.0, start_mono_ns=0)
    for pid, mode, n in ((1, "forward", 50), (2, "dataloader", 40), (4, None, 5)):
        t.step_counts[pid] = n
        t.facts[pid] = {} if mode is None else {"step_mode": mode}
    assert t.counted_steps() == {1: 50, 2: 40, 4: 5} and t.main_pid() == 1
    t.step_counts[3] = 20
    t.facts[3] = {"step_mode": "optimizer"}
    assert t.counted_steps() == {3: 20, 4: 5} and t.main_pid() == 3
    assert t.total_steps() == 20


# timm's train.py (2026): the loop trains a task module that holds the model, its average
# and its loss (`task(input, target)`), and validates the model alone, then the average
# (`task.get_eval_model()`, in eval mode under `torch.inference_mode()`), every epoch,
# over a loader of its own.
TASK_TRAINED_MODEL_VALIDATED = (
    """
    import json, sys, time, torch
    from torch.utils.data import DataLoader, Dataset, TensorDataset
"""
    + SLOW_VALIDATION
    + """
    class Task(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.criterion = torch.nn.CrossEntropyLoss()

        def forward(self, x, y):
            return self.criterion(self.model(x), y)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(1024, 32)
    train = DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=8, shuffle=True)
    task = Task(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)))
    # its average of the weights, held by the task beside the model (timm's setup_ema)
    task.ema = torch.optim.swa_utils.AveragedModel(
        task.model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))
    opt = torch.optim.SGD(task.model.parameters(), lr=0.01)
    own, steps = {"evaluation": 0.0}, 0
    for epoch in range(6):
        task.train()
        for xb, yb in train:
            loss = task(xb, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            task.ema.update_parameters(task.model)
            steps += 1
        t0 = time.perf_counter()
        for eval_model in (task.model, task.ema):  # the model, then its average
            eval_model.eval()
            with torch.inference_mode():
                right = sum((eval_model(v).argmax(1) == t).sum().item()
                            for v, t in DataLoader(SlowValidation(240), batch_size=16))
        own["evaluation"] += time.perf_counter() - t0
        print("epoch", epoch, "steps", steps, "right", right)
    json.dump(own, open(sys.argv[1], "w"))
"""
)


def test_a_model_validated_alone_after_training_inside_a_task_module_is_evaluation(
    tmp_path: Path,
) -> None:
    """The validations' forwards were of a module never called with gradients on (the
    task was): not evaluation. The ledger had none, and each validation was in the
    next step's wall (pytorch-image-models' train.py: evaluation 0.0 s of 12.8)."""
    path = tmp_path / "task.py"
    path.write_text(textwrap.dedent(TASK_TRAINED_MODEL_VALIDATED))
    own_file = tmp_path / "own.json"
    proc, report = _plain_and_doctored(tmp_path, path, str(own_file))
    own = json.loads(own_file.read_text())
    assert "epoch 5 steps 768 " in proc.stdout and report["steps"]["count"] == 768
    ledger = report["ledger"]
    assert ledger["evaluation_s"] == pytest.approx(own["evaluation"], rel=0.15, abs=0.03), (
        ledger,
        own,
    )
    split = report["steps"]["split"]
    assert split["other"] < 0.5 and split["forward"] > 0.1, report["steps"]

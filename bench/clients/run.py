"""Upstream training scripts, plain and under the doctor (issue 39): their output and
exit codes compared, the doctor's step count against the script's own, and the
findings listed for a person to check against what the code really does.

The scripts are other projects' code: this runner never holds or commits it. Bring the
repositories in first (any clone of them will do), then name the folder that holds them:

    python bench/clients/run.py --repos /tmp/up [--only nanoGPT,makemore] [--out FILE]

It needs, beside the project's .venv: `pip install matplotlib datasets evaluate
tensorboard lightning` (pytorch/examples' time sequence example plots, makemore logs to
tensorboard, Hugging Face's example loads its text through datasets). Hugging Face's
run_clm.py is not in the snapshot the search tool can bring (the repository is over its
size): put examples/pytorch/language-modeling/run_clm.py at REPOS/transformers/, and
run_clm_no_trainer.py beside it (the newest stored is a fork's, evalstate/transformers
2143f93a, check_min_version 4.57.0.dev0). run_clm.py and run_classification.py as of
upstream's 3a275d3581 ("[style] Rework ruff rules", January 2026), from any fork that
holds that commit (macorisd/transformers-qwen3 does; its newest run_clm.py is its own).
Their evaluations load the accuracy metric: a clone of huggingface/evaluate at
REPOS/evaluate, and scikit-learn beside transformers. cleanrl's PPO wants the versions
it pins (gymnasium 0.29.1, so numpy < 2) and tyro: a Python of its own for it
(`--only cleanrl --python` that one).
Lightning's examples/pytorch/basics/transformer.py goes at
REPOS/lightning/examples/pytorch/basics/ (it needs `pip install lightning`), taken from
the release of the lightning installed (`git show 2.6.5:examples/...` for 2.6.x: another
version of it calls the demo model with one argument, which 2.6.x does not take). Data they
would download is made here from text that ships with the repositories
(ng-video-lecture's input.txt, the examples' wikitext-2 valid and test files), or made
up in the shapes and file formats the scripts read (Cora's graph, MNIST, a folder of
JPEGs), in a work folder outside the repositories.

The examples that need torchvision (mnist, mnist_hogwild, imagenet) run only with a
`--python` that has it; the CPU torch this project pins has no torchvision that loads
beside it, so on this machine: a venv with `pip install torch==2.14.1
torchvision==0.29.1` (a CUDA build, run on the CPU) and `pip install -e .` of this
project. The others are skipped, said on stderr.

run_clm.py runs twice: as one process, and on two ranks under torchrun (gloo on the
CPU), where only its metrics' lines are compared (the ranks' other lines interleave, and
which rank prepares the cached dataset first, and says so, differs between any two runs).

Each client prints a row: project, script, command, steps theirs/ours, findings, the
wall ratio (doctored/plain), and whether the output was the same (times in the output
normalised: `12.3ms`, `time 1.2 s` and the like differ between any two runs).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")

# times, rates and dates in a script's output: they differ between any two runs
_TIMES = re.compile(
    r"(\d+(\.\d+)?(e[+-]?\d+)?\s*(ms|s|sec|seconds|it/s|s/it|samples/s|steps/s|%)\b)|"
    r"(time:?\s*\d+(\.\d+)?)|(\d\d:\d\d:\d\d)|(\d\d/\d\d/\d\d\d\d)|(mfu -?\d+(\.\d+)?)|"
    r"((ms|s)/\w+\s+\d+(\.\d+)?)|(iter_dt \d+(\.\d+)?)|(\d+:\d\d:\d\d([,.]\d+)?)|"
    r"((runtime|per_second)['\"]?\s*[:=]\s*['\"]?[\d:.]+(e[+-]?\d+)?)|(\d+(\.\d+)?\s*[A-Za-z]+/s\b)|"
    # AverageMeters' columns (seconds, rates): pytorch/examples' imagenet, timm's train.py
    r"((Time|Data):?\s+\d+\.\d+s?,?(\s+\d+\.\d+/s)?\s+\(\s*\d+\.\d+s?,?(\s+\d+\.\d+/s)?\))|"
    r"(\d{8}-\d{6})"  # a run folder's date and time (timm's output/train/<date-time>-...)
)


# a progress bar's frame (tqdm): how many frames a run draws, and at which counts,
# depends on its speed
# (spaces only around it: a frame's text joined to the line before it made the line a
# log call wrote right after a frame, and only there, differ from the other run's)
_BAR = re.compile(r"[ \t]*\d+%\|[^|\n]*\|[ \t]*\d+/\d+[ \t]*\[[^\]\n]*\]")


def normalise(text: str) -> str:
    # a nested bar (the Trainer's evaluation under its training bar) moves the cursor up
    # once per frame it draws: how many, depends on its speed too
    text = text.replace("\x1b[A", "")
    text = re.sub(r"<t>[,.]\d+", "<t>", _TIMES.sub("<t>", _BAR.sub("", text)))
    lines = [line for line in text.splitlines() if line.strip()]
    # a bar's frames gone, its title is left once per frame: once is enough
    return "\n".join(line for i, line in enumerate(lines) if not i or line != lines[i - 1])


@dataclass
class Client:
    project: str
    script: str  # within the repositories' folder
    argv: list[str]  # after `python SCRIPT`
    own_count: Callable[[str, Path], int]  # the script's own steps, from its stdout
    setup: Callable[[Path, Path], None] = lambda repos, work: None
    env: dict[str, str] = field(default_factory=dict)
    # False: two plain runs print different things (a seed of its own each run)
    deterministic: bool = True
    # where the script prints its own count: "stdout", or "both" (progress bars)
    counts_on: str = "stdout"
    # modules the Python that runs it must have (torchvision: see the docstring)
    needs: tuple[str, ...] = ()
    # what runs the script: after the Python, before the script (torchrun's module)
    launcher: tuple[str, ...] = ()
    # a regex: only the lines it finds are compared, plain against doctored (ranks
    # racing: which one prepares a cached dataset and says so, and where each one's
    # lines land among the other's, differ between any two runs)
    compared: str = ""


# -- data the scripts would download, made from text the repositories ship -------------


def _shakespeare_char(repos: Path, work: Path) -> None:
    """nanoGPT's data/shakespeare_char (prepare.py downloads the text): the same files
    made from ng-video-lecture's copy of it."""
    import numpy as np

    text = (repos / "ng-video-lecture" / "input.txt").read_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    folder = work / "data" / "shakespeare_char"
    folder.mkdir(parents=True, exist_ok=True)
    ids[:n].tofile(folder / "train.bin")
    ids[n:].tofile(folder / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    shutil.copy(repos / "nanoGPT" / "configurator.py", work / "configurator.py")
    (work / "config").mkdir(exist_ok=True)
    shutil.copy(
        repos / "nanoGPT" / "config" / "train_shakespeare_char.py",
        work / "config" / "train_shakespeare_char.py",
    )
    shutil.copy(repos / "nanoGPT" / "model.py", work / "model.py")


WIKITEXT_LINES = 1200  # of valid.txt, as the training file: one epoch in seconds on CPU


def _wikitext(repos: Path, work: Path) -> None:
    """word_language_model's data/wikitext-2: train.txt is over the size the snapshot
    keeps; a piece of valid.txt stands in for it."""
    source = repos / "examples" / "word_language_model"
    folder = work / "data" / "wikitext-2"
    folder.mkdir(parents=True, exist_ok=True)
    valid = (source / "data" / "wikitext-2" / "valid.txt").read_text().splitlines(True)
    test = (source / "data" / "wikitext-2" / "test.txt").read_text().splitlines(True)
    (folder / "train.txt").write_text("".join(valid[:WIKITEXT_LINES]))
    (folder / "valid.txt").write_text("".join(test[:300]))
    (folder / "test.txt").write_text("".join(test[300:600]))
    for name in ("data.py", "model.py"):
        shutil.copy(source / name, work / name)


def _wikitext_batches(stdout: str, work: Path) -> int:
    """word_language_model's batches in one epoch (its loop: range(0, len - 1, bptt) of
    the training tokens batched in 20 columns; its log prints len // bptt)."""
    lines = (work / "data" / "wikitext-2" / "train.txt").read_text().splitlines()
    tokens = sum(len(line.split()) + 1 for line in lines)
    rows = tokens // 20
    return len(range(0, rows - 1, 35))


def _sine_waves(repos: Path, work: Path) -> None:
    subprocess.run(
        [PY, str(repos / "examples" / "time_sequence_prediction" / "generate_sine_wave.py")],
        cwd=work,
        check=True,
    )


def _names(repos: Path, work: Path) -> None:
    shutil.copy(repos / "makemore" / "names.txt", work / "names.txt")


def _lecture(repos: Path, work: Path) -> None:
    shutil.copy(repos / "ng-video-lecture" / "input.txt", work / "input.txt")


def _hf_text(repos: Path, work: Path) -> None:
    """A local tokenizer (byte-level BPE trained on the text) and the text as files:
    the example would otherwise fetch both from the Hub."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, PreTrainedTokenizerFast

    text = (repos / "ng-video-lecture" / "input.txt").read_text().splitlines(True)
    (work / "train.txt").write_text("".join(text[:4000]))
    (work / "valid.txt").write_text("".join(text[4000:4400]))
    bpe = ByteLevelBPETokenizer()
    bpe.train([str(work / "train.txt")], vocab_size=500, special_tokens=["<|endoftext|>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    fast.save_pretrained(str(work / "tok"))
    # the model's size for the scripts without --config_overrides (run_clm_no_trainer.py)
    GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=500).save_pretrained(
        str(work / "gpt2-tiny")
    )


def _hf_text_metric(repos: Path, work: Path) -> None:
    """The text as _hf_text makes it, and the accuracy metric its evaluation loads
    (`evaluate.load("accuracy")` reads ./accuracy/accuracy.py before the Hub): taken
    from a clone of huggingface/evaluate at REPOS/evaluate."""
    _hf_text(repos, work)
    (work / "accuracy").mkdir()
    shutil.copy(repos / "evaluate" / "metrics" / "accuracy" / "accuracy.py", work / "accuracy")


def _hf_classes(repos: Path, work: Path) -> None:
    """A sentence-classification task run_classification.py fine-tunes on: the lecture's
    lines as CSV, labelled by whether the line asks something; a tiny BERT with random
    weights and a word-piece tokenizer trained on the text, saved where
    `--model_name_or_path` reads them (the example would fetch a pretrained one from
    the Hub); the accuracy metric as _hf_text_metric brings it."""
    import csv

    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    lines = [t.strip() for t in (repos / "ng-video-lecture" / "input.txt").read_text().splitlines()]
    lines = [t for t in lines if t]
    for name, part in (("train", lines[:2000]), ("valid", lines[2000:2400])):
        with open(work / f"{name}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["sentence", "label"])
            w.writerows((t, int("?" in t)) for t in part)
    (work / "text.txt").write_text("\n".join(lines[:2400]))
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train([str(work / "text.txt")], vocab_size=500)
    (work / "tiny-bert").mkdir()
    wp.save_model(str(work / "tiny-bert"))
    BertTokenizerFast(str(work / "tiny-bert" / "vocab.txt")).save_pretrained(
        str(work / "tiny-bert")
    )
    config = BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=2)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(str(work / "tiny-bert"))
    (work / "accuracy").mkdir()
    shutil.copy(repos / "evaluate" / "metrics" / "accuracy" / "accuracy.py", work / "accuracy")


def _cora(repos: Path, work: Path) -> None:
    """The Cora citation graph the graph examples download (2,708 papers, 1,433 word
    features, 7 classes, 5,429 citations), made up with its shapes and file formats:
    ./cora/cora.content and cora.cites, the archive gcn/main.py fetches (cora.tgz), and
    a `requests` that hands it that archive (no network here)."""
    import tarfile

    import numpy as np

    rng = np.random.default_rng(0)
    papers, words = 2708, 1433
    classes = ["Case_Based", "Genetic_Algorithms", "Neural_Networks", "Theory",
               "Probabilistic_Methods", "Reinforcement_Learning", "Rule_Learning"]  # fmt: skip
    ids = rng.choice(10**6, papers, replace=False)
    rows = []
    for i in range(papers):
        features = "\t".join(map(str, (rng.random(words) < 0.013).astype(int)))
        rows.append(f"{ids[i]}\t{features}\t{classes[rng.integers(len(classes))]}\n")
    cites = [f"{a}\t{b}\n" for a, b in (rng.choice(ids, 2, replace=False) for _ in range(5429))]
    folder = work / "cora"
    folder.mkdir(exist_ok=True)
    (folder / "cora.content").write_text("".join(rows))
    (folder / "cora.cites").write_text("".join(cites))
    with tarfile.open(work / "cora.tgz", "w:gz") as tgz:
        tgz.add(folder, arcname="cora")
    stub = work / "stub"
    stub.mkdir(exist_ok=True)
    (stub / "requests.py").write_text(
        "import contextlib, io, os\n\n"
        "@contextlib.contextmanager\n"
        "def get(url, stream=True):  # the archive this work folder holds\n"
        "    class Response:\n"
        "        raw = io.BytesIO(open(os.path.join(os.path.dirname(__file__), '..',"
        " 'cora.tgz'), 'rb').read())\n"
        "    yield Response()\n"
    )


MNIST_TRAIN, MNIST_TEST = 6000, 1000  # images (60,000 and 10,000 in the real set)


def _mnist(repos: Path, work: Path) -> None:
    """MNIST as torchvision reads it from ../data/MNIST/raw (the examples' root),
    made up: 28x28 noise with a bright bar whose row says the label, fewer images."""
    import struct

    import numpy as np

    rng = np.random.default_rng(0)
    raw = work.parent / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", MNIST_TRAIN), ("t10k", MNIST_TEST)):
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        images = (rng.random((n, 28, 28)) * 60).astype(np.uint8)
        for i, label in enumerate(labels):
            images[i, 4 + 2 * label : 6 + 2 * label, 4:24] = 255
        with open(raw / f"{prefix}-images-idx3-ubyte", "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        with open(raw / f"{prefix}-labels-idx1-ubyte", "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels.tobytes())


IMAGES_PER_CLASS = {"train": 16, "val": 4}  # of 10 classes, 128x96 JPEGs


def _image_folders(repos: Path, work: Path) -> None:
    """An ImageNet-style folder (imgs/train/<class>/*.jpg, imgs/val/...), made up."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in IMAGES_PER_CLASS.items():
        for c in range(10):
            folder = work / "imgs" / split / f"class{c:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = (rng.random((96, 128, 3)) * 80).astype(np.uint8)
                pixels[:, 10 * c : 10 * c + 12] = 230
                Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)


LIGHTNING_SAMPLES = 4500  # WikiText2 samples of 35 tokens: the example holds out 4000


def _lightning_text(repos: Path, work: Path) -> None:
    """Lightning's WikiText2 demo data set (it downloads word_language_model's
    train.txt to ./data/wikitext-2.txt unless the file is there): lines of the
    examples' valid and test files, enough for LIGHTNING_SAMPLES samples, so that the
    example's split leaves it 500 to train on (25 batches an epoch)."""
    source = repos / "examples" / "word_language_model" / "data" / "wikitext-2"
    lines = (source / "valid.txt").read_text().splitlines(True)
    lines += (source / "test.txt").read_text().splitlines(True)
    kept, tokens = [], 0
    for line in lines:
        if tokens >= (LIGHTNING_SAMPLES + 1) * 35:
            break
        kept.append(line)
        tokens += len(line.split()) + 1
    (work / "data").mkdir(exist_ok=True)
    (work / "data" / "wikitext-2.txt").write_text("".join(kept))


def _lightning_steps(out: str, work: Path) -> int:
    """Training batches the Trainer ran, from its progress bar's last frame of each
    epoch: tqdm's ("Epoch 19: 100%|...| 25/25", on stderr) or, where `rich` is
    installed, rich's ("Epoch 19/19 ━━━━ 25/25", on stdout)."""
    tqdm = re.findall(r"Epoch (\d+): 100%\|[^|\n]*\|\s*(\d+)/(\d+)", out)
    rich = re.findall(r"Epoch (\d+)/\d+ \S+ (\d+)/(\d+)", out)
    epochs = {int(e): int(n) for e, n, total in tqdm if n == total}
    # rich leaves only the last epoch's bar when its output is not a terminal: each
    # epoch ran that many batches (the example's loader is the same every epoch)
    for e, n, total in rich[-1:]:
        epochs.update(dict.fromkeys(range(int(e) + 1), int(n)) if n == total else {})
    return sum(epochs.values())


def _count_lines(pattern: str) -> Callable[[str, Path], int]:
    rx = re.compile(pattern, re.M)
    return lambda out, work: len(rx.findall(out))


def _last_number(pattern: str, add: int = 0) -> Callable[[str, Path], int]:
    rx = re.compile(pattern)
    return lambda out, work: int(rx.findall(out)[-1]) + add


def _fixed(n: int) -> Callable[[str, Path], int]:
    return lambda out, work: n


# Hugging Face's causal language model example, a tiny GPT-2 on the CPU
# the text both Hugging Face scripts read, as _hf_text makes it (its tokenizer: "tok")
HF_TEXT = [
    "--train_file", "train.txt", "--validation_file", "valid.txt", "--block_size", "32",
    "--per_device_train_batch_size", "8",
]  # fmt: skip
RUN_CLM = [
    "--model_type",
    "gpt2",
    "--tokenizer_name",
    "tok",
    "--config_overrides",
    "n_layer=1,n_embd=32,n_head=2,n_positions=64,vocab_size=500",
    *HF_TEXT,
    "--max_steps",
    "60",
    "--do_train",
    "--logging_steps",
    "20",
    "--save_strategy",
    "no",
    "--output_dir",
    "out",
    "--report_to",
    "none",
    "--seed",
    "0",
    "--use_cpu",
    "--dataloader_num_workers",
    "0",
    "--include_num_input_tokens_seen",
    "True",
    "--hub_token",
    "hf_notarealtoken0123456789abcd",
]  # fmt: skip
NANOGPT_ITERS = 60
CLIENTS = [
    Client(
        "pytorch/examples",
        "examples/regression/main.py",
        [],
        _last_number(r"after (\d+) batches"),
        deterministic=False,  # its target polynomial is drawn anew each run
    ),
    Client(
        "pytorch/examples",
        "examples/time_sequence_prediction/train.py",
        ["--steps", "3"],
        _count_lines(r"^STEP: "),
        setup=_sine_waves,
        # its torch.load of numpy data predates torch 2.6's weights_only default
        env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"},
    ),
    Client(
        "pytorch/examples",
        "examples/word_language_model/main.py",
        ["--epochs", "1", "--emsize", "64", "--nhid", "64", "--log-interval", "50"],
        _wikitext_batches,
        setup=_wikitext,
    ),
    Client(
        "pytorch/examples",
        "examples/word_language_model/main.py",
        [
            "--epochs",
            "1",
            "--model",
            "Transformer",
            "--emsize",
            "64",
            "--nhid",
            "64",
            "--log-interval",
            "50",
            "--lr",
            "5",
        ],
        _wikitext_batches,
        setup=_wikitext,
    ),
    Client(
        "karpathy/nanoGPT",
        "nanoGPT/train.py",
        [
            "config/train_shakespeare_char.py",
            "--device=cpu",
            "--compile=False",
            f"--max_iters={NANOGPT_ITERS}",
            "--eval_interval=20",
            "--eval_iters=20",
            "--log_interval=10",
            "--batch_size=8",
            "--block_size=64",
            "--n_layer=2",
            "--n_head=2",
            "--n_embd=64",
            "--dtype=float32",
            "--gradient_accumulation_steps=2",
            "--always_save_checkpoint=True",
        ],  # fmt: skip
        _fixed(NANOGPT_ITERS + 1),  # iterations 0..max_iters, each one optimizer step
        setup=_shakespeare_char,
    ),
    Client(
        "karpathy/minGPT",
        "minGPT/projects/adder/adder.py",
        ["--trainer.max_iters=600", "--trainer.num_workers=0", "--system.work_dir=out"],
        _fixed(600),
        env={"PYTHONPATH": "{repos}/minGPT"},
    ),
    Client(
        "karpathy/minGPT",
        "minGPT/projects/chargpt/chargpt.py",
        [
            "--trainer.max_iters=200",
            "--trainer.num_workers=0",
            "--model.model_type=gpt-nano",
            "--data.block_size=64",
            "--trainer.batch_size=16",
            "--system.work_dir=out",
        ],  # fmt: skip
        _fixed(200),
        setup=_lecture,
        env={"PYTHONPATH": "{repos}/minGPT"},
    ),
    Client(
        "karpathy/makemore",
        "makemore/makemore.py",
        [
            "-i",
            "names.txt",
            "-o",
            "out",
            "--max-steps",
            "600",
            "--device",
            "cpu",
            "--type",
            "transformer",
            "--n-layer",
            "2",
            "--n-embd",
            "32",
            "--n-embd2",
            "32",
            "--seed",
            "3",
        ],
        _fixed(600),
        setup=_names,
    ),
    Client(
        "karpathy/ng-video-lecture",
        "ng-video-lecture/bigram.py",
        [],
        _fixed(3000),  # max_iters = 3000, one optimizer step each
        setup=_lecture,
    ),
    Client(
        "pytorch/examples",
        "examples/gat/main.py",
        ["--epochs", "30", "--val-every", "5", "--hidden-dim", "16", "--num-heads", "2"],
        _fixed(30),  # an epoch is one full-graph step
        setup=_cora,
        env={"PYTHONPATH": "{work}/stub"},  # it imports requests (unused: the data is there)
    ),
    Client(
        "pytorch/examples",
        "examples/gcn/main.py",
        [],  # 200 epochs, one full-graph step each, train and val evaluated in each
        _fixed(200),
        setup=_cora,
        env={"PYTHONPATH": "{work}/stub"},
    ),
    Client(
        "pytorch/examples",
        "examples/mnist/main.py",
        ["--epochs", "2", "--no-accel"],
        _fixed(2 * -(-MNIST_TRAIN // 64)),  # batches of 64, the last one short
        setup=_mnist,
        needs=("torchvision",),
    ),
    Client(
        "pytorch/examples",
        "examples/mnist_hogwild/main.py",
        ["--epochs", "1"],  # two processes, each an epoch of its own shuffle
        _fixed(-(-MNIST_TRAIN // 64)),  # each worker's (the report's: one process's)
        setup=_mnist,
        needs=("torchvision",),
        deterministic=False,  # the workers update one model at once, racing
    ),
    Client(
        "pytorch/examples",
        "examples/imagenet/main.py",
        [
            "imgs",
            "-a",
            "mobilenet_v3_small",
            "-b",
            "16",
            "--epochs",
            "2",
            "-j",
            "2",
            "--no-accel",
            "-p",
            "2",
            "--seed",
            "0",
        ],  # fmt: skip
        _fixed(2 * 10 * IMAGES_PER_CLASS["train"] // 16),
        setup=_image_folders,
        needs=("torchvision",),
    ),
    Client(  # REINFORCE on CartPole: a forward an action, one backward an episode
        "pytorch/examples",
        "examples/reinforcement_learning/reinforce.py",
        ["--log-interval", "1"],  # runs until solved: 732 episodes with its seed
        _last_number(r"Episode (\d+)\t"),
    ),
    Client(  # actor-critic: the same, with a value head beside the policy
        "pytorch/examples",
        "examples/reinforcement_learning/actor_critic.py",
        ["--log-interval", "1"],
        _last_number(r"Episode (\d+)\t"),
    ),
    Client(  # PPO with Fabric: a rollout under no_grad, then 10 epochs of 4 minibatch steps
        "Lightning-AI/pytorch-lightning",
        "lightning/examples/fabric/reinforcement_learning/train_fabric.py",
        ["--total-timesteps", "4096"],
        # 4096 / (2 envs x 128 steps) = 16 updates, each 10 epochs of 256 / 64 minibatches
        # (it prints nothing of its own: the count is its arguments')
        _fixed(16 * 10 * 4),
        needs=("lightning", "gymnasium", "torchmetrics"),
    ),
    Client(  # cleanrl's PPO: the optimizer made, then each iteration a rollout of 2,048
        # calls under no_grad, then 10 epochs of 32 minibatch steps; a line "SPS: N" each
        # iteration (it needs gymnasium 0.29.1, which wants numpy < 2, and tyro)
        "vwxyzjn/cleanrl",
        "cleanrl/cleanrl/ppo_continuous_action.py",
        ["--env-id", "Pendulum-v1", "--total-timesteps", "6144", "--seed", "1"],
        lambda out, work: 10 * 32 * len(re.findall(r"^SPS:", out, re.M)),
        needs=("tyro", "gymnasium"),
        # its returns, episode by episode (its steps a second differ between any two runs)
        compared=r"global_step=\d+, episodic_return=\[[^\]]*\]",
    ),
    Client(  # a GAN: the discriminator's optimizer step, then the generator's, each batch
        "pytorch/examples",
        "examples/dcgan/main.py",
        [
            "--dataset",
            "fake",
            "--niter",
            "1",
            "--batchSize",
            "16",
            "--imageSize",
            "64",
            "--ngf",
            "8",
            "--ndf",
            "8",
            "--nz",
            "16",
            "--workers",
            "2",
            "--manualSeed",
            "0",
            "--outf",
            "out",
        ],  # fmt: skip
        _count_lines(r"^\[\d+/\d+\]\[\d+/\d+\] Loss_D"),  # a line each iteration
        needs=("torchvision",),
    ),
    Client(
        "huggingface/pytorch-image-models",
        "timm/train.py",
        [
            "--data-dir",
            "imgs",
            "--val-split",
            "val",
            "--model",
            "mobilenetv3_small_050",
            "--num-classes",
            "10",
            "-b",
            "16",
            "--epochs",
            "8",
            "--img-size",
            "96",
            "--workers",
            "2",
            "--device",
            "cpu",
            "--no-prefetcher",
            "--log-interval",
            "2",
            "--model-ema",
            "--seed",
            "0",
            "--output",
            "out",
            "--warmup-epochs",
            "0",
        ],  # fmt: skip
        _fixed(8 * 10 * IMAGES_PER_CLASS["train"] // 16),  # drop_last: 10 batches an epoch
        setup=_image_folders,
        needs=("torchvision",),
    ),
    Client(
        "huggingface/transformers",
        "transformers/run_clm.py",
        RUN_CLM,
        _fixed(60),  # --max_steps; its evaluation needs a metric from the Hub: left out
        setup=_hf_text,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    ),
    Client(  # the same, on two ranks: torchrun, gloo on the CPU
        "huggingface/transformers",
        "transformers/run_clm.py",
        RUN_CLM,
        _fixed(60),  # each rank's (the report's: a rank's steps)
        setup=_hf_text,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        launcher=("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"),
        # the Trainer's metrics (rank 0 logs them): losses, gradient norms, tokens seen
        compared=r"\{'(loss|train_)[^}]*\}|\*\*\*\*\* train metrics.*|  \w+ += .*",
    ),
    Client(  # the Trainer with 4 batches accumulated a step and an evaluation every 10
        "huggingface/transformers",
        "transformers/run_clm.py",
        [
            *["40" if w == "60" else w for w in RUN_CLM],  # --max_steps 40
            "--gradient_accumulation_steps",
            "4",
            "--do_eval",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "10",
            "--per_device_eval_batch_size",
            "8",
        ],
        _fixed(40),  # --max_steps counts the optimizer's steps, not the batches (160)
        setup=_hf_text_metric,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    ),
    Client(  # the Trainer fine-tuning a classifier, an evaluation after each epoch
        "huggingface/transformers",
        "transformers/run_classification.py",
        [
            "--model_name_or_path",
            "tiny-bert",
            "--train_file",
            "train.csv",
            "--validation_file",
            "valid.csv",
            "--do_train",
            "--do_eval",
            "--max_seq_length",
            "32",
            "--per_device_train_batch_size",
            "16",
            "--num_train_epochs",
            "2",
            "--eval_strategy",
            "epoch",
            "--save_strategy",
            "no",
            "--logging_steps",
            "25",
            "--output_dir",
            "out",
            "--report_to",
            "none",
            "--seed",
            "0",
            "--use_cpu",
        ],  # fmt: skip
        _last_number(r"Total optimization steps = (\d+)"),  # 2 epochs of 125 batches
        counts_on="both",
        setup=_hf_classes,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    ),
    Client(  # its own loop, Accelerate without accumulate(): `optimizer.step()` at batch 0,
        # 4, 8, ... of each epoch (`step % 4 == 0`), an evaluation after each epoch
        "huggingface/transformers",
        "transformers/run_glue_no_trainer.py",
        [
            "--model_name_or_path",
            "tiny-bert",
            "--train_file",
            "train.csv",
            "--validation_file",
            "valid.csv",
            "--max_length",
            "32",
            "--per_device_train_batch_size",
            "16",
            "--num_train_epochs",
            "2",
            "--gradient_accumulation_steps",
            "4",
            "--seed",
            "0",
            "--output_dir",
            "out",
        ],  # fmt: skip
        _last_number(r"\| *(\d+)/\d+ \["),  # its progress bar: completed_steps
        counts_on="both",
        setup=_hf_classes,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    ),
    Client(  # its own loop with Accelerate: 4 batches accumulated an optimizer step
        "huggingface/transformers",
        "transformers/run_clm_no_trainer.py",
        [
            "--config_name",
            "gpt2-tiny",
            "--tokenizer_name",
            "tok",
            *HF_TEXT,
            "--gradient_accumulation_steps",
            "4",
            "--max_train_steps",
            "40",
            "--num_train_epochs",
            "2",
            "--seed",
            "0",
            "--output_dir",
            "out",
            "--checkpointing_steps",
            "epoch",
        ],  # fmt: skip
        _last_number(r"\| *(\d+)/40 \["),  # its progress bar: completed_steps
        setup=_hf_text,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        counts_on="both",
    ),
    Client(
        "Lightning-AI/pytorch-lightning",
        "lightning/examples/pytorch/basics/transformer.py",
        [],  # 20 epochs, a validation pass after each, a test pass at the end
        _lightning_steps,
        setup=_lightning_text,
        counts_on="both",
    ),
    Client(  # its own loop with Fabric, on two ranks: Fabric's launcher (torchrun inside)
        "Lightning-AI/pytorch-lightning",
        "lightning/examples/fabric/language_model/train.py",
        [],  # 20 epochs, a validation after each
        # each rank's: 20 epochs of its half of the 500 samples in batches of 20
        _fixed(20 * -(-(LIGHTNING_SAMPLES - 4000) // 2 // 20)),
        setup=_lightning_text,
        launcher=(
            "-m",
            "lightning.fabric.cli",
            "--accelerator=cpu",
            "--devices=2",
            "--strategy=ddp",
        ),  # fmt: skip
    ),
]


# --device cuda: the options that keep a script on the CPU, and what puts it on the GPU
# (scripts not named here pick the GPU by themselves when there is one, or stay on the
# CPU whatever there is: regression and time_sequence_prediction)
_ON_GPU = {"--device=cpu": ["--device=cuda"], "--use_cpu": []}
_ON_GPU_AFTER = {"word_language_model": ["--accel"], "dcgan": ["--accel"]}


def on_device(c: Client, device: str) -> list[str]:
    """The client's options for a run on DEVICE ("cpu" as written, or "cuda")."""
    if device == "cpu":
        return c.argv
    argv: list[str] = []
    for i, word in enumerate(c.argv):
        if word == "cpu" and i and c.argv[i - 1] == "--device":
            argv.append(device)
        else:
            argv.extend(_ON_GPU.get(word, [word]))
    for name, extra in _ON_GPU_AFTER.items():
        if name in c.script:
            argv.extend(extra)
    return argv


def run_one(
    c: Client, repos: Path, store: Path, keep: Path, device: str = "cpu"
) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="client-", dir=keep))
    c.setup(repos, work)
    script = repos / c.script
    env = {**os.environ, **{k: v.format(repos=repos, work=work) for k, v in c.env.items()}}
    if "PYTHONPATH" in c.env and os.environ.get("PYTHONPATH"):  # the doctor's own stays
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    env.pop("GPUDOCTOR_SOCKET", None)
    argv = [PY, *c.launcher, str(script), *on_device(c, device)]

    def fresh() -> Path:
        out = work / "run"
        shutil.rmtree(out, ignore_errors=True)
        for leftover in ("out", "out-shakespeare-char", "lightning_logs"):
            shutil.rmtree(work / leftover, ignore_errors=True)
        out.mkdir()
        return out

    # each run starts from the same nothing: its own caches (Hugging Face datasets')
    env["HF_DATASETS_CACHE"] = str(fresh() / "hf-datasets")
    t0 = time.monotonic()
    plain = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    plain_s = time.monotonic() - t0
    env["HF_DATASETS_CACHE"] = str(fresh() / "hf-datasets")
    report = work / "report.json"
    doctor = [PY, "-m", "gpudoctor", "--store", str(store), "run", "--headless",
              "--report", str(report), "--", *argv]  # fmt: skip
    t0 = time.monotonic()
    doc = subprocess.run(doctor, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    doc_s = time.monotonic() - t0
    # the doctor's own lines go to its stderr beside the job's: its status lines, and
    # its summary once the job has ended; the job's are the rest
    # (a status line can land in the middle of a job's line that a progress bar left open)
    status = re.compile(r"\[gpudoctor\s+[^\]]*\][^\[\n]*")
    lines = [status.sub("", line) for line in doc.stderr.splitlines()]
    lines = [line for line in lines if line.strip() or not line]
    ends = [i for i, line in enumerate(lines) if line.startswith("gpudoctor: session")]
    job_err = "\n".join(lines[: ends[-1]] if ends else lines)
    # the script's own count in the run the doctor watched (a script that draws its own
    # random seed stops at another step each run)
    own = doc.stdout if c.counts_on == "stdout" else doc.stdout + "\n" + job_err
    theirs = c.own_count(own, work) if doc.returncode == 0 else -1
    for name, text in (("plain.out", plain.stdout), ("plain.err", plain.stderr),
                       ("doctor.out", doc.stdout), ("doctor.err", job_err)):  # fmt: skip
        (work / name).write_text(text)
    data = json.loads(report.read_text()) if report.exists() else {}
    findings = [f"{f['id']} ({f['severity']})" for f in data.get("findings", [])]
    shown = data.get("command", [])
    return {
        "project": c.project,
        "script": c.script.split("/", 1)[1],
        "command": " ".join([*_launcher_words(c), Path(c.script).name, *on_device(c, device)]),
        "exit": f"{plain.returncode}/{doc.returncode}",
        "stdout_same": (
            _kept(c, plain.stdout) == _kept(c, doc.stdout) if c.deterministic else "n/a"
        ),
        # several ranks write to one stderr: which one's line comes first is a race
        "stderr_same": _in_order(c, _kept(c, plain.stderr)) == _in_order(c, _kept(c, job_err)),
        # what was compared, when not all of it (compared: ranks' lines interleave)
        "compared": "the lines of its metrics" if c.compared else "",
        "steps_theirs": theirs,
        "steps_ours": (data.get("steps") or {}).get("count"),
        "findings": findings,
        "wall_ratio": round(doc_s / plain_s, 2) if plain_s else None,
        # what the report masked as secrets: the options whose values it hid
        "masked": [shown[i - 1] for i, word in enumerate(shown) if i and "***" in word],
        "ledger": data.get("ledger"),
        "work": str(work),
    }


def _kept(c: Client, text: str) -> str:
    """The output as compared: normalised, and only what `compared` finds, if set."""
    text = normalise(text)
    if not c.compared:
        return text
    return "\n".join(m.group(0) for m in re.finditer(c.compared, text))


def _in_order(c: Client, text: str) -> list[str]:
    """The lines, in their order, or sorted for a launcher's ranks (their order a race)."""
    lines = text.strip().splitlines()
    return sorted(lines) if c.launcher else lines


def _launcher_words(c: Client) -> list[str]:
    """The launcher as a person types it: `torchrun --nproc_per_node 2`, `fabric run`."""
    words = list(c.launcher)
    if words[:2] == ["-m", "torch.distributed.run"]:
        words[:2] = ["torchrun"]
    if words[:2] == ["-m", "lightning.fabric.cli"]:  # its `fabric run` command
        words[:2] = ["fabric", "run"]
    return words


@functools.cache
def _has(module: str) -> bool:
    """Whether the Python that runs the jobs imports the module (asked once: each of
    the clients that need torchvision asked it again, a torchvision import each)."""
    return subprocess.run([PY, "-c", f"import {module}"], capture_output=True).returncode == 0


def table(rows: list[dict[str, object]]) -> str:
    head = ("| project | script | command | exit plain/doctor | output same | steps theirs/ours "
            "| findings | wall ratio |\n|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    lines = []
    for r in rows:
        same = r["stdout_same"] if r["stdout_same"] == "n/a" else (
            f"yes ({r['compared']})" if r.get("compared") and r["stdout_same"] else
            "yes" if r["stdout_same"] and r["stderr_same"] else
            f"stdout {'yes' if r['stdout_same'] else 'NO'}, stderr {'yes' if r['stderr_same'] else 'NO'}"
        )  # fmt: skip
        lines.append(
            f"| {r['project']} | {r['script']} | `{r['command']}` | {r['exit']} | {same} "
            f"| {r['steps_theirs']}/{r['steps_ours']} | {', '.join(r['findings']) or 'none'} "  # type: ignore[arg-type]
            f"| {r['wall_ratio']} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> None:
    global PY
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, required=True)
    parser.add_argument("--only", default="", help="projects or scripts, comma-separated")
    parser.add_argument("--out", type=Path, help="the rows as JSON lines")
    parser.add_argument("--table", type=Path, help="the rows as a Markdown table")
    parser.add_argument("--python", help="the Python that runs job and doctor")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    PY = args.python or PY
    keep = Path(tempfile.mkdtemp(prefix="gpudoctor-clients-"))
    store = keep / "store.db"
    wanted = [w for w in args.only.split(",") if w]
    rows = []
    for c in CLIENTS:
        if wanted and not any(w in c.project or w in c.script for w in wanted):
            continue
        missing = [m for m in c.needs if not _has(m)]
        if missing:
            print(f"skipped {c.script}: {PY} has no {', '.join(missing)}", file=sys.stderr)
            continue
        row = run_one(c, args.repos.resolve(), store, keep, args.device)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.table:
        args.table.write_text(table(rows))
    sys.exit(0 if all(r["steps_theirs"] == r["steps_ours"] for r in rows) else 1)


if __name__ == "__main__":
    main()

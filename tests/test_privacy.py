"""Private by default on a shared server (issue 21): what the doctor writes is its
owner's only, secrets stay out of what it shows, stale run folders go."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import PY, ROOT, SAMPLES, setpriv_as, shared_folder

from gpudoctor import run_folders
from gpudoctor.app.sessions import open_log
from gpudoctor.jobs.watched import ProbeFolder, Target
from gpudoctor.redact import MASK, redact_argv, redact_text
from gpudoctor.snapshot import take
from gpudoctor.sources.stacks import AttachError
from gpudoctor.store import Store
from gpudoctor.terminal import TerminalView, plain
from gpudoctor.timeline import Timeline

pytestmark = pytest.mark.timeout(240)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def home() -> Iterator[Path]:
    """A home folder others may enter (as on a real server), the default store in it."""
    folder = shared_folder("gpudoctor-home-", 0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def as_user(home: Path, *args: str) -> subprocess.Popen[str]:
    """`gpudoctor ARGS` with umask 022 and this home (its default store), output piped."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPUDOCTOR_STORE", "XDG_DATA_HOME")}
    env["HOME"] = str(home)
    return subprocess.Popen(
        ["sh", "-c", 'umask 022; exec "$@"', "sh", PY, "-m", "gpudoctor", *args], env=env,
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def nobody_can_read(path: Path) -> bool:
    """Whether another user (nobody, through setpriv as the watch tests do) can read it."""
    run = subprocess.run([*setpriv_as("nobody"), "cat", str(path)], capture_output=True)
    return run.returncode == 0


def test_the_store_its_wal_and_the_logs_are_the_owners_only_whatever_the_umask(
    home: Path,
) -> None:
    assert os.geteuid() == 0, "switches to another user with setpriv: run as root (CI does)"
    doctor = as_user(home, "run", "--headless", "--", PY, "-c", "import time; time.sleep(4)")
    folder = home / ".local" / "share" / "gpudoctor"
    store = folder / "sessions.db"
    deadline = time.monotonic() + 30
    while not Path(f"{store}-wal").exists():  # mid-run: the WAL is there
        assert time.monotonic() < deadline and doctor.poll() is None, doctor.communicate()
        time.sleep(0.05)
    assert mode(Path(f"{store}-wal")) == 0o600 and mode(Path(f"{store}-shm")) == 0o600
    _, err = doctor.communicate(timeout=60)
    assert doctor.returncode == 0, err
    assert mode(folder) == 0o700 and mode(store) == 0o600
    # the output log of a TUI run: opened by the same function, under the same umask
    old = os.umask(0o022)
    opened = Store(store)
    try:
        log = open_log(opened, "job")
        log.file.write(b"x" * 100)
        log.file.flush()
        log.max_bytes = 10
        assert log.rotate_if_full()
    finally:
        os.umask(old)
        opened.close()
    log.close()
    assert mode(folder / "logs") == 0o700
    assert mode(log.path) == 0o600 and mode(log.previous) == 0o600
    # another user: not the store, not the logs (and the check itself works: a file
    # made readable in the same home is read)
    for private in (store, log.path, log.previous):
        os.chmod(private.parent, 0o755)  # even with the folder open, the file is closed
        assert not nobody_can_read(private), private
    control = home / "open.txt"
    control.write_text("open")
    os.chmod(control, 0o644)
    assert nobody_can_read(control)


def test_an_open_store_is_tightened_at_home_and_only_warned_about_where_chosen(
    home: Path, tmp_path: Path
) -> None:
    folder = home / ".local" / "share" / "gpudoctor"
    doctor = as_user(home, "history")
    doctor.communicate(timeout=60)
    store = folder / "sessions.db"
    os.chmod(folder, 0o755)
    os.chmod(store, 0o644)
    doctor = as_user(home, "history")
    _, err = doctor.communicate(timeout=60)
    said = [line for line in err.splitlines() if line.startswith("gpudoctor:")]
    assert len(said) == 1 and "now 600" in said[0] and "now owner-only (700)" in said[0], err
    assert mode(store) == 0o600 and mode(folder) == 0o700
    # a store the user put in a shared place on purpose: kept, one warning
    shared = tmp_path / "team.db"
    Store(shared).close()
    os.chmod(shared, 0o644)
    doctor = as_user(home, "--store", str(shared), "history")
    _, err = doctor.communicate(timeout=60)
    assert err.count("can be read by other users (mode 644); kept as you chose it") == 1, err
    assert mode(shared) == 0o644


SECRETS = [
    # (what the user typed or printed, what must never show)
    (["python", "t.py", "--wandb-key", "w4ndb-s3cret"], "w4ndb-s3cret"),
    (["python", "t.py", "--hf-token=hf_abcdefghijklmnopqrstuvwxyz0123"], "hf_abcdefghij"),
    (["env", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI", "python", "t.py"], "wJalrXUtnFEMI"),
    (["python", "t.py", "--password", "hunter2"], "hunter2"),
    (["python", "t.py", "--db", "postgres://me:pa55w0rd@db.local/x"], "pa55w0rd"),
    (["python", "t.py", "--data", "https://b.s3.amazonaws.com/x.tar?X-Amz-Signature=beef42"],
     "beef42"),
    (["python", "t.py", "--url", "https://acct.blob.core.windows.net/c?sv=2022&sig=AbC%2Fd"],
     "AbC%2Fd"),
    (["python", "t.py", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"], "ghp_abcdefghij"),
    (["python", "t.py", "--openai", "sk-abcdefghijklmnopqrstuvwx"], "sk-abcdefghij"),
    (["python", "t.py", "--aws", "AKIAIOSFODNN7EXAMPLE"], "AKIAIOSFODNN7EXAMPLE"),
    (["python", "t.py", "--slack", "xoxb-123456789012-abcdef"], "xoxb-123456789012"),
    (["python", "t.py", "--client-credential", "c1c2c3"], "c1c2c3"),
    (["python", "t.py", "--auth=Basic-abc"], "Basic-abc"),
    # judged by meaning (issue 39): the name ends in the secret's word
    (["python", "t.py", "--token", "t0k-123"], "t0k-123"),
    (["python", "t.py", "--hub_token", "t0k-456"], "t0k-456"),
    (["env", "WANDB_API_KEY=0123abcd", "python", "t.py"], "0123abcd"),
    (["python", "t.py", "--apikey", "k3y-789"], "k3y-789"),
]  # fmt: skip
TEXT = [
    ("config: {'api_key': 'abc123', 'lr': 0.1}", "abc123"),
    ('{"hf_token": "tok-9876", "epochs": 3}', "tok-9876"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstu started", "sk-proj-abcdef"),
    ("password: hunter2", "hunter2"),
    ("Authorization header eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl", "eyJhbGci"),
    ("fetching https://u:p4ss@host/data.tar", "p4ss"),
    # a harmless word before it must not take the secret as its own value
    ("KeyError: 'loop bug --api-key=abc123secret'", "abc123secret"),
    ("python /runs/keyed.py --api-key s3cr3t-v4lue --lr 3", "s3cr3t-v4lue"),
    ("bug --token=t0k3n-value", "t0k3n-value"),
]
KEPT = [
    # not secrets, though their names hold the words: left as they are
    (["python", "t.py", "--tokenizer", "bert-base-uncased", "--max-tokens", "512"],
     "bert-base-uncased"),
    (["python", "t.py", "--author", "me", "--lr", "0.1"], "0.1"),
    # Hugging Face scripts' options that mention tokens or keys and are no secrets
    (["python", "t.py", "--include-tokens-per-second", "true", "--max_new_tokens", "20"],
     "true"),
    (["python", "t.py", "--num_key_value_heads", "4", "--key-name", "input_ids"], "input_ids"),
    (["python", "t.py", "--tokenizer_name", "gpt2", "--token-file", "/etc/x"], "gpt2"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "secret"), SECRETS)
def test_a_secret_on_the_command_line_is_masked(argv: list[str], secret: str) -> None:
    shown = " ".join(redact_argv(argv))
    assert secret not in shown and MASK in shown, shown
    assert shown.split()[0] == argv[0] and len(shown.split()) == len(argv)  # word for word


@pytest.mark.parametrize(("text", "secret"), TEXT)
def test_a_secret_in_printed_text_is_masked(text: str, secret: str) -> None:
    shown = redact_text(text)
    assert secret not in shown and MASK in shown, shown


@pytest.mark.parametrize(("argv", "kept"), KEPT)
def test_words_that_only_look_secret_are_kept(argv: list[str], kept: str) -> None:
    assert redact_argv(argv) == argv and kept in " ".join(argv)


JOB = """
    import argparse, sys, torch
    p = argparse.ArgumentParser()
    p.add_argument("--api-key", required=True)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    if args.api_key != "s3cr3t-v4lue":
        sys.exit("wrong key")  # a rerun that lost the secret fails here
    print(f"config: {{'api_key': '{args.api_key}', 'token': 'hf_abcdefghijklmnopqrstuvwxyz0'}}")
    data = torch.utils.data.DataLoader(torch.randn(4096, 8), batch_size=16,
                                       num_workers=args.num_workers)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, x in enumerate(data):
        loss = model(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
        if step + 1 == args.steps:
            break
"""


def test_a_run_with_secrets_shows_none_and_its_rerun_still_has_them(tmp_path: Path) -> None:
    script = tmp_path / "keyed.py"
    script.write_text(textwrap.dedent(JOB))
    command = [PY, str(script), "--api-key", "s3cr3t-v4lue"]
    report = tmp_path / "r.json"
    run = subprocess.run(
        [PY, "-m", "gpudoctor", "run", "--headless", "--report", str(report), "--", *command],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    shown = [report.read_text(), run.stderr]
    shown.append(subprocess.run([PY, "-m", "gpudoctor", "report", "last"], capture_output=True,
                                text=True, check=True).stdout)  # fmt: skip
    shown.append(subprocess.run([PY, "-m", "gpudoctor", "history"], capture_output=True,
                                text=True, check=True).stdout)  # fmt: skip
    for text in shown:
        assert "s3cr3t-v4lue" not in text, text
    assert "--api-key ***" in shown[2]  # the Markdown report shows where it was masked
    assert json.loads(report.read_text())["command"][-2:] == ["--api-key", MASK]
    assert any("are shown as ***" in n for n in json.loads(report.read_text())["notes"])
    # the screens: the snapshot the TUI draws, its command and the job's output
    store = Path(os.environ["GPUDOCTOR_STORE"])
    with sqlite3.connect(store) as db:
        (raw,) = db.execute("SELECT command FROM sessions ORDER BY id DESC").fetchone()
    assert json.loads(raw) == command  # the store keeps it raw, owner-only
    log = tmp_path / "out.log"
    log.write_text(run.stdout)
    snapshot = take(Timeline(command, time.time(), time.monotonic_ns()), None, TerminalView(log))
    screen = " ".join(snapshot.command) + "\n".join(plain(line) for line in snapshot.output_tail)
    assert "s3cr3t-v4lue" not in screen and "hf_abcdefghij" not in screen
    assert "config: {'api_key': '***', 'token': '***'}" in screen
    # the rerun: a trial runs the raw command (the job exits 1 with a masked key)
    trial = subprocess.run(
        [PY, "-m", "gpudoctor", "trial", "--apply", "more-workers", "--repeat", "1",
         "--steps", "20", "--report", str(tmp_path / "t.json"), "--", *command],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert trial.returncode == 0, trial.stderr[-2000:]
    result = json.loads((tmp_path / "t.json").read_text())
    assert result["trial"]["verdict"] != "crashed"
    assert "s3cr3t-v4lue" not in (tmp_path / "t.json").read_text() + trial.stderr + trial.stdout


def ours(command: list[str]) -> list[psutil.Process]:
    """The running processes of this command line (its --seed is this test's pid)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if process.info["cmdline"] == command:
            found.append(process)
    return found


def test_a_killed_doctors_run_folder_is_removed_by_the_next(tmp_path: Path) -> None:
    job = [PY, str(SAMPLES / "healthy.py"), "--steps", "100000", "--seed", str(os.getpid())]
    doctor = subprocess.Popen(
        [PY, "-m", "gpudoctor", "run", "--headless", "--", *job],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = Path(tempfile.gettempdir())
    try:
        deadline = time.monotonic() + 60
        while not list(base.glob(f"gpudoctor-run-{doctor.pid}-*")):
            assert time.monotonic() < deadline, "the run folder never appeared"
            time.sleep(0.05)
        (folder,) = base.glob(f"gpudoctor-run-{doctor.pid}-*")
        assert mode(folder) == 0o700
        # the folder is made before the job is started: killed once the job runs
        while not ours(job):
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        doctor.send_signal(signal.SIGKILL)
        doctor.wait()
        assert folder.exists()  # a killed doctor cannot clean up after itself
        again = subprocess.run(
            [PY, "-m", "gpudoctor", "run", "--headless", "--", PY, "-c", "pass"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert again.returncode == 0
        assert not folder.exists()
    finally:
        if doctor.poll() is None:
            doctor.kill()
        for process in ours(job):  # the job goes on by design: not beyond this test
            process.kill()
    # a live doctor's folder (this process's pid, started before it) is left alone
    mine = Path(tempfile.mkdtemp(prefix=f"gpudoctor-run-{os.getpid()}-"))
    try:
        assert mine not in run_folders.clean_stale() and mine.exists()
    finally:
        mine.rmdir()


def test_a_folder_for_another_users_job_is_made_where_that_user_can_reach_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root injecting into a user's job makes its folder the job's own, but the job must
    also pass through the folders above it: a temp directory only root may enter (a
    private TMPDIR, or /tmp on some CI machines) left the job unable to read the
    probe's boot script, and the doctor said the job never reached a safe point."""
    assert os.geteuid() == 0, "switches to another user with setpriv: run as root (CI does)"
    private = Path(tempfile.mkdtemp(prefix="gd-"))  # 0700; short: a socket goes in it
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    theirs = subprocess.Popen([*setpriv_as("nobody"), "sleep", "60"])
    try:
        nobody = psutil.Process(theirs.pid)
        deadline = time.monotonic() + 10
        while nobody.uids().real == 0:  # until setpriv has switched
            assert time.monotonic() < deadline
            time.sleep(0.01)
        uid, gid = nobody.uids().real, nobody.gids().real
        mine = Path(run_folders.make("run"))  # root's own job: where it always was
        assert mine.parent == private
        folder = Path(run_folders.make("run", reachable_by=theirs.pid))
        assert folder.parent != private
        assert run_folders.searchable(folder.parent, uid, {gid})
        assert not run_folders.searchable(private, uid, {gid})
        os.chown(folder, uid, -1)  # as ProbeFolder.inject makes it theirs
        reach = subprocess.run([*setpriv_as("nobody"), "touch", str(folder / "boot.py")])
        assert reach.returncode == 0
        shutil.rmtree(folder)
        mine.rmdir()
        # nowhere they can reach: the injection says so in one line, and does nothing
        monkeypatch.setattr(run_folders, "_FOR_OTHERS", ())
        target = Target(theirs.pid, ["sleep", "60"], "/", python=False)
        probe = ProbeFolder(target)
        try:
            with pytest.raises(AttachError) as refused:
                probe.inject(target, "gdb")
            assert os.stat(probe.folder).st_uid == 0  # not given to them
        finally:
            probe.close()
        said = str(refused.value)
        assert "user nobody cannot reach the doctor's folder" in said and "TMPDIR" in said
        assert "\n" not in said and theirs.poll() is None
    finally:
        theirs.kill()
        theirs.wait()
        shutil.rmtree(private, ignore_errors=True)


def test_a_live_doctors_folder_is_kept_after_the_clock_is_set_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock moves when it is set (NTP stepping it, a virtual machine resumed).
    A live doctor's folder then reads as last changed long before its doctor started,
    and was taken for a dead doctor's by the next doctor to start: its job's probe
    socket and counter pages went with it, and that job ran on with 0 steps counted.
    Which doctor a folder is for is told by when it started in ticks since boot."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = Path(run_folders.make("run"))
    an_hour_ago = time.time() - 3600  # as it reads once the clock was set an hour on
    os.utime(live, (an_hour_ago, an_hour_ago))
    # when this process started, in ticks since boot (proc(5): /proc/PID/stat's 22nd field)
    ticks = int(Path(f"/proc/{os.getpid()}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])
    # this pid, another start: a dead doctor's folder whose pid was given again
    reused = tmp_path / f"gpudoctor-run-{os.getpid()}-t{ticks - 1}-k2v9x0aq"
    reused.mkdir()
    # an older doctor's name, without its start: told as before, by the folder's time
    older = tmp_path / f"gpudoctor-stacks-{os.getpid()}-p1wq7c3z"
    older.mkdir()
    assert run_folders.clean_stale(tmp_path) == [reused]
    assert live.exists() and older.exists() and not reused.exists()
    assert f"-{os.getpid()}-t{ticks}-" in live.name

"""The counter page (gpudoctor/probe/page.py written by the probe, sources/pages.py read
by the doctor): exact counts that survive the process that wrote them."""

from __future__ import annotations

import os
from pathlib import Path

from gpudoctor.probe import protocol
from gpudoctor.probe.page import LAST_END, ROWS_SENT, STEPS, CounterPage
from gpudoctor.sources.pages import read_pages


def test_what_the_probe_writes_the_doctor_reads(tmp_path: Path) -> None:
    page = CounterPage(str(tmp_path))
    page.values[STEPS] = 3  # counted before the page was mapped: carried over
    page.open()
    page.values[STEPS] += 4
    page.values[LAST_END] = 123_456
    page.values[ROWS_SENT] = 5
    counts = read_pages(str(tmp_path))[os.getpid()]
    assert (counts.steps, counts.last_end_ns, counts.rows_sent) == (7, 123_456, 5)
    assert (
        oct((tmp_path / f"{protocol.PAGE_PREFIX}{os.getpid()}").stat().st_mode & 0o777) == "0o600"
    )


def test_a_forked_child_counts_in_a_page_of_its_own_and_it_outlives_it(tmp_path: Path) -> None:
    page = CounterPage(str(tmp_path))
    page.open()
    page.values[STEPS] = 10
    pid = os.fork()
    if pid == 0:  # the child: as the probe's at-fork handler does, then a hard exit
        page.after_fork()
        page.open()
        page.values[STEPS] = 20
        os._exit(0)
    os.waitpid(pid, 0)
    pages = read_pages(str(tmp_path))
    assert pages[os.getpid()].steps == 10  # the child never wrote into its parent's page
    assert pages[pid].steps == 20  # and its count is there after it is gone


def test_what_is_not_a_page_is_left_out(tmp_path: Path) -> None:
    (tmp_path / f"{protocol.PAGE_PREFIX}1").write_bytes(b"\0" * protocol.PAGE_BYTES)  # no magic
    (tmp_path / f"{protocol.PAGE_PREFIX}2").write_bytes(b"short")
    (tmp_path / "probe.sock").write_bytes(b"")
    assert read_pages(str(tmp_path)) == {}
    assert read_pages(str(tmp_path / "gone")) == {}


def test_launched_jobs_get_the_probe_s_boot_folder() -> None:
    from gpudoctor.jobs.launched import BOOT_DIR, probe_env

    assert (BOOT_DIR / "sitecustomize.py").is_file()
    assert probe_env("/x.sock", {"PYTHONPATH": "/a"})["PYTHONPATH"] == f"{BOOT_DIR}:/a"


def test_a_count_the_probe_s_messages_already_carried_is_still_recorded(tmp_path: Path) -> None:
    """`history` reads a dead doctor's count from its page records: a page whose count a
    probe message brought first (a starved doctor drains before it reads the pages) is
    recorded all the same, and once per count."""
    from gpudoctor.jobs import LaunchedJob
    from gpudoctor.store import Store

    store = Store(tmp_path / "s.db")
    job = LaunchedJob(["python", "train.py"], store)
    try:
        job.session_id = store.create_session(job.timeline, str(tmp_path), os.getpid())
        page = CounterPage(job._dir)
        page.open()
        page.values[STEPS] = 160
        job.timeline.ingest_probe({"pid": os.getpid(), "counts": {"steps": 160}})
        job._read_pages()
        job._read_pages()
        store.commit()
        assert store.counted_steps(job.session_id) == 160
        assert len(store.records_of(job.session_id, "page")) == 1
    finally:
        page.close()
        job.close()
        store.close()

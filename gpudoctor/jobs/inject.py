"""Loading the probe into a Python process that is already running (`watch --inject`).

The route, by the target's Python:
- CPython 3.14 and later: `sys.remote_exec` (PEP 768), run by the target's own
  interpreter: the target runs the boot script at its next safe point by itself.
- CPython 3.10 to 3.13 on x86-64: the doctor's own ptrace call (jobs/ptrace.py). It
  stops the job's main thread alone for a few milliseconds, calls `mmap` there for a
  page holding the command that runs the boot script, and `Py_AddPendingCall` with
  `PyRun_SimpleString` and that page; puts the thread back exactly as it was (a system
  call it was inside is restarted) and lets it go. The main thread runs the command at
  its next safe point (between two bytecodes, the GIL held, not inside a signal
  handler), as its own pending call: nothing is stopped then. The boot script gives the
  page back. No debugger is needed (gdb 13's `call` broke a job on CPUs with AMX state:
  jobs/ptrace.py says how).
- CPython 3.10 to 3.13 elsewhere (aarch64): gdb in batch mode, the way memray attaches.
  It stops the process, reads only libc's and libpython's symbol tables, asks the
  interpreter for a pending call of a harmless function and lets the process run on; at
  the breakpoint on that function the boot script runs (`PyRun_SimpleString`), and gdb
  detaches; a signal inside the call unwinds it (gdb's unwindonsignal).
- Where gdb is missing there, lldb in batch mode, the same way: the boot script runs in
  the breakpoint's own commands, so a wait cut short (no safe point in time) detaches
  without running it.
- `GPUDOCTOR_INJECT_ROUTE` (ROUTES) names another route where the one chosen does not
  work on a machine.

The boot script loads the probe under its private name from this installation (once:
a second attach reuses it) and calls its `attach` (probe/injected.py), then writes what
became of it into the doctor's folder. It binds no name in the job's `__main__` and
prints nothing.

Where no route exists, `InjectError` says what is missing and how to allow it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

from gpudoctor import probe
from gpudoctor.i18n import _
from gpudoctor.jobs import ptrace
from gpudoctor.sources.contention import Owed

PROBE_DIR = Path(probe.__file__).resolve().parent
BOOT_NAME = "inject.py"
RESULT_NAME = "inject.result"
# How long gdb may wait for the main thread's next safe point (a thread inside one long
# C call, a CUDA synchronisation, reaches none until it returns), and for the script.
SAFE_POINT_WAIT_S = 20.0
# sys.remote_exec returns at once: the target runs the script at its next safe point.
RESULT_WAIT_S = 20.0
# A job starved of CPU (a busy machine: its main thread runnable but waiting for a core)
# gets its RESULT_WAIT_S all the same: the time it waited for a core is added, up to this
# long in all. Beside the suite a starved job took over 20 s to reach and run the script.
RESULT_WAIT_MAX_S = 120.0
# the longest a debugger (gdb, lldb) is waited for: SAFE_POINT_WAIT_S, then interrupted
DEBUGGER_WAIT_S = SAFE_POINT_WAIT_S + 10.0
CAP_SYS_PTRACE = 19
# Signals the job may get while gdb holds it (a child ending, a timer, a user's SIGUSR1):
# handed to it as they come, never a stop. One that stopped the boot script's call would
# have gdb unwind the call midway, leaving the interpreter as the script left it.
# The import system's own modules: a frame of theirs below the boot script means the job
# was paused inside an import. An import made there (the probe's) would take the same
# thread's module locks inside another acquire and break its bookkeeping (CPython 3.11's
# _ModuleLock.acquire then raised KeyError into the job's `import`: seen in CI), or find
# a module half made; the boot script imports nothing and says "importing".
IMPORTERS = (
    "importlib._bootstrap", "importlib._bootstrap_external",
    "_frozen_importlib", "_frozen_importlib_external",
)  # fmt: skip
# Nor inside a garbage collection, nor in code that C called with no program below it
# (its bottom frame is then not the program's: a script's or `-c`'s <module>, runpy's for
# `-m`). The pending call once ran in a weakref callback during a garbage collection of
# a torch.compile job, and the probe's thread start there crashed it (SIGSEGV, the
# compat suite, one injection in three).
BOTTOMS = ("<module>", "_run_module_as_main", "_run_code")
PASSED_SIGNALS = (
    "SIGCHLD", "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGWINCH", "SIGTERM", "SIGHUP",
    "SIGPROF", "SIGVTALRM", "SIGIO", "SIGURG", "SIGCONT", "SIGTTIN", "SIGTTOU", "SIGQUIT",
)  # fmt: skip
# Another route than the one chosen, where that one does not work on a machine
ENV_ROUTE = "GPUDOCTOR_INJECT_ROUTE"
ROUTES = ("remote_exec", "ptrace", "gdb", "lldb")
_VERSION = re.compile(r"(?:lib)?python(\d)\.(\d+)")

BOOT = """\
def _gpudoctor_not_now(sys):
    frame, bottom = sys._getframe(1), None
    while frame is not None:
        if frame.f_globals.get("__name__") in {importers!r}:
            return True  # inside an import
        frame, bottom = frame.f_back, frame
    # called from C with no program below: a garbage collector's weakref callback or
    # finaliser, an atexit function (the interpreter finalising)
    code = bottom.f_code if bottom is not None else None
    if code is not None and code.co_name not in {bottoms!r}:
        return True
    # inside a garbage collection (a finaliser called with the program below): a
    # collection asked for there is skipped, so the young generation's count of
    # collections stays as it was (outside one, it is a young collection as the
    # interpreter runs every few hundred allocations)
    gc = sys.modules.get("gc")
    if gc is None:  # built in; no import is under way (looked at above)
        import gc
    before = gc.get_stats()[0]["collections"]
    gc.collect(0)
    return gc.get_stats()[0]["collections"] == before


def _gpudoctor_boot(sys):
    if _gpudoctor_not_now(sys):
        return "importing"
    clock = sys.modules.get("time")
    if clock is not None and clock.time() > {deadline!r}:
        return "late"  # the doctor gave up waiting: nothing done
    import importlib.util

    module = sys.modules.get("_gpudoctor_probe")
    if module is not None and not hasattr(module, "attach"):
        return "launched"
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "_gpudoctor_probe", {init!r}, submodule_search_locations=[{folder!r}]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["_gpudoctor_probe"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["_gpudoctor_probe"]
            raise
    return module.attach({settings!r})


def _gpudoctor_free(sys, page):
    # the page the doctor wrote this script's command into (the ptrace route): the
    # command is compiled by now and never read again
    ctypes = sys.modules.get("ctypes")  # never imported for this: 4 KiB left otherwise
    if page and ctypes is not None:
        munmap = ctypes.CDLL(None).munmap
        munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        munmap(page, 4096)


try:
    import sys  # built in: no import machinery runs for it
except ImportError:  # the module table is not itself (the interpreter finalising)
    _gpudoctor_result = "importing"
else:
    try:
        _gpudoctor_result = _gpudoctor_boot(sys)
    except BaseException as exc:
        _gpudoctor_result = "error: %s: %s" % (type(exc).__name__, exc)
    try:
        _gpudoctor_free(sys, globals().get("_gpudoctor_page"))
    except BaseException:
        pass
try:
    with open({result!r}, "w") as f:
        f.write(_gpudoctor_result)
except BaseException:
    pass
"""

# In the job's main thread: the script run in a namespace of its own (the file too is
# opened and closed there: nothing is bound in `__main__`, no file left for the GC to
# warn about under -W error), whatever it raises kept from the job's stderr.
RUN_BOOT = (
    "try:\n"
    " exec(\"with open('{path}') as f: exec(compile(f.read(), '{path}', 'exec'), "
    "{{'__name__': '_gpudoctor_inject', '_gpudoctor_page': {page}}})\", {{}})\n"
    "except BaseException:\n"
    " pass\n"
)
PAGE = 4096  # the ptrace route's page for the command (munmap'd by the boot script)


def c_string(text: str) -> str:
    """`text` as the inside of a C string literal (gdb's script)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


GDB_SCRIPT = """\
set pagination off
set confirm off
set unwindonsignal on
handle {signals} nostop noprint pass
sharedlibrary libc
sharedlibrary libpython
call (int)Py_AddPendingCall((void*)&PyCallable_Check, (void*)0)
break PyCallable_Check if {first_argument} == 0
commands
  delete breakpoints
  call (int)PyRun_SimpleString("{run}")
  detach
  quit
end
continue
"""

# lldb's (14): the same steps as gdb's. The function addresses go through variables of
# its own (an argument `&PyCallable_Check` fails its IR rewrite without debug
# information), the breakpoint is on the function's first instruction (-K false: its
# prologue not skipped, the argument still in its register), and the boot script runs in
# the breakpoint's commands: an interrupted wait goes on to `process detach` alone.
# (Symbols are left unread until asked for by lldb's command line, before it attaches.)
LLDB_SCRIPT = """\
process handle -s false -n false -p true {signals}
expr -- void *$gpudoctor_check = (void *)PyCallable_Check
expr -- void *$gpudoctor_add = (void *)Py_AddPendingCall
expr -- void *$gpudoctor_run = (void *)PyRun_SimpleString
expr -- ((int (*)(void *, void *))$gpudoctor_add)($gpudoctor_check, (void *)0)
breakpoint set -n PyCallable_Check -K false -c '{first_argument} == 0'
breakpoint command add 1
breakpoint disable 1
expr -- ((int (*)(const char *))$gpudoctor_run)("{run}")
DONE
continue
process detach
"""


def main_thread_importing(py_spy: str | None, pid: int) -> bool | None:
    """Whether the job's main thread is inside an import now, read from outside without
    pausing it (py-spy's non-blocking dump); None where that cannot be told."""
    if py_spy is None:
        return None
    try:
        done = subprocess.run(
            [py_spy, "dump", "--pid", str(pid), "--nonblocking", "--json"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        threads = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    for thread in threads if isinstance(threads, list) else []:
        if thread.get("os_thread_id") == pid:  # the main thread's id is the process's
            frames = thread.get("frames") or []
            return any("importlib._bootstrap" in (f.get("filename") or "") for f in frames)
    return None


class InjectError(Exception):
    """The probe cannot be injected: one line saying what is missing and how to allow it.
    `again`: nothing is known to be in the way (gdb ran and detached, the script did not
    say): worth another try."""

    def __init__(self, message: str, again: bool = False) -> None:
        super().__init__(message)
        self.again = again


def python_version(pid: int) -> tuple[int, int] | None:
    """The target's Python (major, minor), from its libpython or its executable's name.

    Debian's and python.org's builds link libpython in, with no libpython of their own:
    their executable's name tells (`executable`)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                if "libpython" in line:
                    found = _VERSION.search(os.path.basename(line.split()[-1]))
                    if found:
                        return int(found[1]), int(found[2])
    except OSError:
        pass
    exe = executable(pid)
    found = _VERSION.search(os.path.basename(exe)) if exe is not None else None
    return (int(found[1]), int(found[2])) if found else None


def ptrace_refusal(pid: int) -> str | None:
    """Why the kernel would not let this process trace `pid`, when it can be told ahead
    (Yama's ptrace_scope); None when nothing here forbids it."""
    try:
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
    except (OSError, ValueError):
        return None
    if scope >= 3:
        return _(
            "kernel.yama.ptrace_scope is 3: no process may be traced on this machine until "
            "it restarts; run the job under gpudoctor run instead"
        )
    if scope == 2 and not has_cap_ptrace():
        return _(
            "kernel.yama.ptrace_scope is 2: only root may trace a process; run sudo gpudoctor "
            "watch --pid {pid} --inject"
        ).format(pid=pid)
    if scope == 1 and not has_cap_ptrace():
        return _(
            "kernel.yama.ptrace_scope is 1: only a parent may trace its child; allow it with "
            "sudo sysctl kernel.yama.ptrace_scope=0, or run sudo gpudoctor watch --pid {pid} "
            "--inject"
        ).format(pid=pid)
    return None


def has_cap_ptrace() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def check_route(pid: int) -> str:
    """The route for `pid` (ROUTES); InjectError when there is none."""
    version = python_version(pid)
    if version is None:
        raise InjectError(
            _("pid {pid} does not run a CPython gpudoctor can tell: nothing to inject into")
            .format(pid=pid)
        )  # fmt: skip
    if version < (3, 10):
        raise InjectError(
            _("pid {pid} runs Python {version}: injection needs 3.10 or later").format(
                pid=pid, version=f"{version[0]}.{version[1]}"
            )
        )
    chosen = os.environ.get(ENV_ROUTE, "").strip()
    if chosen:
        route = _named_route(chosen, version)
    elif version >= (3, 14):  # sys.remote_exec writes into the job as a debugger would
        route = "remote_exec"
    elif platform.machine() == "x86_64":
        route = "ptrace"
    elif shutil.which("gdb") is not None:
        route = "gdb"
    elif shutil.which("lldb") is not None:
        route = "lldb"
    else:
        raise InjectError(
            _(
                "gdb is not installed: injecting into Python {version} needs it, or lldb "
                "(apt-get install gdb; Python 3.14 needs none)"
            ).format(version=f"{version[0]}.{version[1]}")
        )
    refusal = ptrace_refusal(pid)
    if refusal is not None:
        raise InjectError(refusal)
    return route


def _named_route(route: str, version: tuple[int, int]) -> str:
    """The route GPUDOCTOR_INJECT_ROUTE names, when it can serve this Python here."""
    if route not in ROUTES:
        raise InjectError(
            _("{name}={route}: the routes are {routes}").format(
                name=ENV_ROUTE, route=route, routes=", ".join(ROUTES)
            )
        )
    if route == "remote_exec" and version < (3, 14):
        raise InjectError(
            _("{name}=remote_exec: sys.remote_exec is Python 3.14's").format(name=ENV_ROUTE)
        )
    if route == "ptrace" and platform.machine() != "x86_64":
        raise InjectError(
            _("{name}=ptrace: the doctor's own ptrace call is x86-64's").format(name=ENV_ROUTE)
        )
    if route in ("gdb", "lldb") and shutil.which(route) is None:
        raise InjectError(
            _("{name}={route}: {route} is not installed").format(name=ENV_ROUTE, route=route)
        )
    if route in ("gdb", "lldb") and platform.machine() == "x86_64" and amx_state():
        raise InjectError(
            _(
                "{name}={route}: a debugger's call breaks a job on this CPU (its AMX "
                "register state is larger than the debugger writes back); the route chosen "
                "without it needs no debugger"
            ).format(name=ENV_ROUTE, route=route)
        )
    return route


def amx_state() -> bool:
    """Whether this CPU has AMX tiles (Sapphire Rapids and later: an XSAVE area of about
    11 KiB), whose state gdb 13 wrote back short (jobs/ptrace.py says what that did)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


def inject(pid: int, folder: str, settings: dict[str, object], route: str) -> str:
    """Run the boot script in `pid` by `route`; what the probe said ("attached",
    "launched", "busy", "no-torch", "importing", "error: ..."), or InjectError."""
    result = os.path.join(folder, RESULT_NAME)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(result)
    boot = os.path.join(folder, BOOT_NAME)

    def write_boot(wait_s: float) -> None:
        """The boot script, which does nothing once `wait_s` from now have passed (the
        doctor no longer waits for it); replaced whole: the job reads it as it runs it."""
        text = BOOT.format(
            init=str(PROBE_DIR / "__init__.py"),
            folder=str(PROBE_DIR),
            settings={**settings, "route": route},
            result=result,
            deadline=time.time() + wait_s + 1.0,
            importers=set(IMPORTERS),
            bottoms=set(BOTTOMS),
        )
        Path(boot + ".new").write_text(text)
        os.replace(boot + ".new", boot)

    # A debugger runs the script while the doctor waits for the debugger (up to
    # DEBUGGER_WAIT_S); lldb took 21 s to get there on a starved machine (CI)
    write_boot(DEBUGGER_WAIT_S + RESULT_WAIT_S)
    if route == "remote_exec":
        _remote_exec(pid, boot)
    elif route == "ptrace":
        _by_ptrace(pid, boot)
    elif route == "lldb":
        _lldb(pid, boot)
    else:
        _gdb(pid, boot)
    if not os.path.exists(result):  # the job runs it later: its deadline is the doctor's
        write_boot(RESULT_WAIT_S)
    owed = Owed(RESULT_WAIT_S, RESULT_WAIT_MAX_S, [pid])
    written = owed.start + RESULT_WAIT_S  # the boot script's own deadline
    while True:
        now = time.monotonic()
        deadline = owed.deadline()
        if now >= deadline:
            break
        if deadline > written + 1.0:  # waited for a core meanwhile: the script's time too
            write_boot(deadline - now)
            written = deadline
        with contextlib.suppress(FileNotFoundError):
            text = Path(result).read_text()
            if text:
                return text
        if not running(pid):  # it ended (its interpreter finalising ran the script)
            raise InjectError(ended_before(pid))
        time.sleep(0.05)
    raise InjectError(_no_safe_point(pid, time.monotonic() - owed.start))


def wait_owed(process: subprocess.Popen[str], seconds: float, job: int) -> str | None:
    """What `process` printed once it ended within `seconds`, plus the time it or the
    job's main thread waited for a core meanwhile (up to RESULT_WAIT_MAX_S in all);
    None while it still runs then (what it printed so far is kept for the next call)."""
    owed = Owed(seconds, RESULT_WAIT_MAX_S, [process.pid, job])
    while (left := owed.left()) > 0:
        with contextlib.suppress(subprocess.TimeoutExpired):
            output, _unused = process.communicate(timeout=min(left, 1.0))
            return output
    return None


def running(pid: int) -> bool:
    """The process is there and not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def ended_before(pid: int) -> str:
    return _("pid {pid} ended before the probe could start: nothing was injected").format(pid=pid)


def _remote_exec(pid: int, boot: str) -> None:
    """`sys.remote_exec`, called by an interpreter of the job's own version: its
    executable (read from the memory map where /proc/PID/exe is hidden)."""
    exe = executable(pid)
    if exe is None:
        if not running(pid):
            raise InjectError(ended_before(pid))
        raise InjectError(_refused(pid, "ptrace: Operation not permitted"))
    code = f"import sys; sys.remote_exec({pid}, {boot!r})"
    try:
        done = subprocess.run(
            [exe, "-I", "-c", code], capture_output=True, text=True, timeout=SAFE_POINT_WAIT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InjectError(_refused(pid, str(exc))) from None
    if done.returncode != 0:
        raise InjectError(_refused(pid, done.stderr))


def executable(pid: int) -> str | None:
    """The path of `pid`'s executable: /proc/PID/exe, or the first mapping of its memory
    map, which can be read where /proc/PID/exe cannot (a job that made itself
    non-dumpable, for a doctor without CAP_SYS_PTRACE); None where neither can."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/exe")
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[-1].startswith("/"):
                return fields[-1]
    return None


def _by_ptrace(pid: int, boot: str) -> None:
    """The pending call asked for by the doctor itself (jobs/ptrace.py): the job's main
    thread is stopped for a few milliseconds, its other threads not at all."""
    python = {"Py_AddPendingCall", "PyRun_SimpleString"}
    try:
        found = ptrace.find_functions(pid, python, "libpython")
        if not python <= found.keys():  # a python built without libpython
            found.update(ptrace.find_functions(pid, python, os.readlink(f"/proc/{pid}/exe")))
        found.update(ptrace.find_functions(pid, {"mmap", "munmap"}, "libc.so"))
    except OSError as exc:  # its memory map unreadable: gone, or not ours to read
        if not running(pid):
            raise InjectError(ended_before(pid)) from None
        if exc.errno in (errno.EPERM, errno.EACCES):
            raise InjectError(_refused(pid, "ptrace: Operation not permitted")) from None
        raise InjectError(_refused(pid, str(exc))) from None
    if not python <= found.keys():
        raise InjectError(_no_c_api(pid))
    if not {"mmap", "munmap"} <= found.keys():
        raise InjectError(_("could not inject into pid {pid}: {why}").format(
            pid=pid, why=_("its C library (glibc's libc.so) was not found")
        ))  # fmt: skip
    try:
        with ptrace.seized(pid) as thread:
            # the command in a page of its own: the call is made later, by the job
            page = thread.call(found["mmap"], 0, PAGE, 3, 0x22, -1, 0)  # RW, private anon
            if page >= ptrace.MASK - PAGE:
                raise InjectError(_("could not inject into pid {pid}: {why}").format(
                    pid=pid, why=_("it could not map a page of memory")
                ))  # fmt: skip
            command = RUN_BOOT.format(path=boot, page=page).encode() + b"\0"
            if len(command) > PAGE:
                thread.call(found["munmap"], page, PAGE)
                raise InjectError(_("the doctor's folder has an unusual path: {path}").format(
                    path=boot
                ))  # fmt: skip
            thread.write(page, command)
            added = thread.call(found["Py_AddPendingCall"], found["PyRun_SimpleString"], page)
            if added & 0xFFFFFFFF:  # -1: its queue of pending calls is full
                thread.call(found["munmap"], page, PAGE)
                raise InjectError(_refused(pid, "Py_AddPendingCall: the queue is full"), again=True)
    except ptrace.PtraceError as exc:
        if exc.errno == errno.ESRCH and not running(pid):
            raise InjectError(ended_before(pid)) from None
        if exc.errno in (errno.EPERM, errno.EACCES):
            raise InjectError(_refused(pid, "ptrace: Operation not permitted")) from None
        raise InjectError(_refused(pid, str(exc))) from None
    except ptrace.Ended:
        raise InjectError(ended_before(pid)) from None
    except ptrace.CallFailed as exc:  # the thread was put back as it was
        raise InjectError(_refused(pid, str(exc)), again=True) from None


def _gdb(pid: int, boot: str) -> None:
    commands = _debugger_script(GDB_SCRIPT, boot, "inject.gdb")
    # no debug information read at all, no library's symbols but the two named
    argv = ["gdb", "-q", "-nx", "-batch", "--readnever", "-iex", "set auto-solib-add off"]
    argv += ["-iex", "set auto-load off"]
    output, timed_out = _debugger([*argv, "-p", str(pid), "-x", commands], pid)
    if re.search(r"^\$2 = ", output, re.MULTILINE):
        return  # the script ran (its call returned: gdb printed the value)
    exited = r"^\[Inferior \d+ \(process \d+\) exited"
    _not_run(pid, output, timed_out, exited, "signaled" in output)


def _lldb(pid: int, boot: str) -> None:
    commands = _debugger_script(LLDB_SCRIPT, boot, "inject.lldb")
    # no .lldbinit; a stop by a signal ends the batch by detaching (never its prompt)
    argv = ["lldb", "--batch", "--no-lldbinit", "-k", "process detach"]
    argv += ["-O", "settings set target.preload-symbols false"]
    output, timed_out = _debugger([*argv, "-p", str(pid), "-s", commands], pid)
    if re.search(r"^\(int\) \$1 = ", output, re.MULTILINE):
        return  # the script ran (its call returned: lldb printed the value)
    _not_run(pid, output, timed_out, r"^Process \d+ exited", "interrupted" in output)


def _debugger_script(template: str, boot: str, name: str) -> str:
    """A debugger's commands (GDB_SCRIPT, LLDB_SCRIPT) for running the boot script,
    written beside it as `name`: their path."""
    if not re.fullmatch(r"[\w./+-]+", boot):  # it goes into a C string in the script
        raise InjectError(_("the doctor's folder has an unusual path: {path}").format(path=boot))
    # the first argument's register at a function's first instruction
    register = "$x0" if platform.machine() in ("aarch64", "arm64") else "$rdi"
    script = template.format(
        first_argument=register,
        run=c_string(RUN_BOOT.format(path=boot, page=0)),
        signals=" ".join(PASSED_SIGNALS),
    )
    commands = os.path.join(os.path.dirname(boot), name)
    Path(commands).write_text(script)
    return commands


def _debugger(argv: list[str], pid: int) -> tuple[str, bool]:
    """A debugger's batch run on `pid`: what it printed, and whether it was interrupted
    for waiting past SAFE_POINT_WAIT_S for the safe point (the time it or the job waited
    for a core added: beside CI's suite a starved gdb reached the job after 30 s)."""
    debugger = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the doctor's Ctrl-C is not the debugger's
    )
    output = wait_owed(debugger, SAFE_POINT_WAIT_S, pid)
    if output is not None:
        return output, False
    # still waiting for the safe point: interrupted, the debugger detaches as it quits
    # (a pending call left behind is a harmless function the job calls once); never
    # killed, which would leave its breakpoint in the job
    debugger.send_signal(signal.SIGINT)
    output = wait_owed(debugger, DEBUGGER_WAIT_S - SAFE_POINT_WAIT_S, pid)
    if output is None:
        debugger.send_signal(signal.SIGINT)
        output, _unused = debugger.communicate()
    return output, True


def _not_run(pid: int, output: str, timed_out: bool, exited: str, unwound: bool) -> None:
    """The debugger ended without the script's value: why, as InjectError."""
    if re.search(exited, output, re.MULTILINE) or not running(pid):
        raise InjectError(ended_before(pid))
    if timed_out:
        raise InjectError(_no_safe_point(pid, SAFE_POINT_WAIT_S))
    said = _refused(pid, output)
    # detached without the script's value: the call was unwound (a signal inside it;
    # the debugger restores the thread as it was), seen once in a few hundred injections
    raise InjectError(said, again="could not inject" in said or unwound)


def _no_safe_point(pid: int, seconds: float) -> str:
    return _(
        "pid {pid} did not reach a point where Python code can run within {seconds:.0f} s "
        "(its main thread is inside one long call): nothing was injected"
    ).format(pid=pid, seconds=seconds)


def _refused(pid: int, output: str) -> str:
    """One line for why the tool could not run the script in `pid`."""
    if "Operation not permitted" in output or "ptrace" in output.lower():
        return _(
            "the kernel refused to let the doctor trace pid {pid} (ptrace: operation not "
            "permitted): "
            "a container needs --cap-add=SYS_PTRACE, a process that made itself "
            "non-dumpable can be traced only by root, and kernel.yama.ptrace_scope must "
            "allow it"
        ).format(pid=pid)
    if "No symbol" in output or "undeclared identifier" in output:  # gdb's, lldb's
        return _no_c_api(pid)
    if "Remote debugging is not enabled" in output:  # CPython 3.14's sys.remote_exec
        return _(
            "pid {pid}'s Python has remote debugging turned off (PYTHON_DISABLE_REMOTE_DEBUG "
            "was set, or -X disable-remote-debug given, when it started): start the job "
            "without it, or under gpudoctor run"
        ).format(pid=pid)
    last = next((s for s in reversed(output.strip().splitlines()) if s.strip()), "")
    return _("could not inject into pid {pid}: {why}").format(pid=pid, why=last.strip()[:200])


def _no_c_api(pid: int) -> str:
    return _(
        "pid {pid}'s Python exports no C API that the doctor can call (a static or "
        "stripped interpreter): run the job under gpudoctor run instead"
    ).format(pid=pid)


def settings_for(folder: str, socket_path: str, control: str) -> dict[str, object]:
    """What the probe is told: where to send, whom to watch for, where to look."""
    return {
        "socket": socket_path,
        "doctor_pid": os.getpid(),
        "control": control,
        "trace_dir": folder,
    }


__all__ = ["InjectError", "check_route", "inject", "settings_for"]

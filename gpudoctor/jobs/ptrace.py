"""Calling a C function in another process's main thread, by ptrace (x86-64 Linux).

The injection route for CPython 3.10-3.13 on x86-64 (jobs/inject.py). The doctor seizes
the job's main thread alone (its other threads run on), saves its general registers
and its whole extended register state in the kernel's own layout and size, calls the
function on a stack below the thread's own (past its red zone) with a return address of
0, takes the fault that return makes as the end of the call (the fault is never
delivered), puts every register back as it was and lets the thread go. A thread
stopped inside a system call gets it back too: its registers say which, and the kernel
restarts it as after any stop.

Why not gdb's `call`: gdb 13 (Debian 12, Ubuntu 22.04's 12) writes the extended state
back in a buffer of its own size, which the kernel refuses on a CPU whose XSAVE area is
larger (AMX: Sapphire Rapids, the CPUs of many H100 servers), leaving a thread that was
inside a system call returning -ERESTARTNOHAND to the program: the job's `time.sleep`
raised OSError 514 (seen on this project's CI machines).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PTRACE_CONT = 7
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_DETACH = 17
PTRACE_GETREGSET = 0x4204
PTRACE_SETREGSET = 0x4205
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
NT_PRFPREG = 2  # the FXSAVE area (x87 and SSE): where the kernel has no XSAVE regset
NT_X86_XSTATE = 0x202
XSTATE_MAX = 1 << 16  # the kernel says the real size (AMX: about 11 KiB)
WALL = 0x40000000  # __WALL: wait for a thread we trace that is not our child
RED_ZONE = 128  # System V x86-64: below the stack pointer, the function's own
SCRATCH = 1024  # and a margin below that
MASK = (1 << 64) - 1
STOP_WAIT_S = 2.0  # for the thread to stop once asked
_REGS = [
    "r15",
    "r14",
    "r13",
    "r12",
    "rbp",
    "rbx",
    "r11",
    "r10",
    "r9",
    "r8",
    "rax",
    "rcx",
    "rdx",
    "rsi",
    "rdi",
    "orig_rax",
    "rip",
    "cs",
    "eflags",
    "rsp",
    "ss",
    "fs_base",
    "gs_base",
    "ds",
    "es",
    "fs",
    "gs",
]
_ARGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")


class Regs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in _REGS]


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class PtraceError(Exception):
    """A ptrace request failed; `errno` says why (EPERM: not allowed)."""

    def __init__(self, what: str, errno: int) -> None:
        super().__init__(f"{what}: {os.strerror(errno)}")
        self.errno = errno


class Ended(Exception):
    """The process ended while the doctor held it."""


class CallFailed(Exception):
    """The called function did not return in time, or faulted: the thread was put back
    as it was."""


_libc = ctypes.CDLL(None, use_errno=True)
_ptrace = _libc.ptrace
_ptrace.restype = ctypes.c_long
_ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]


def _request(request: int, tid: int, addr: int | None, data: object, what: str) -> None:
    ctypes.set_errno(0)
    if _ptrace(request, tid, addr, data) == -1:
        errno = ctypes.get_errno()
        if errno:
            raise PtraceError(what, errno)


@dataclass
class Stop:
    signal: int  # the stop's signal (SIGTRAP for an interrupt)
    event: int  # PTRACE_EVENT_STOP for an interrupt or a group stop; 0 for a signal


class Thread:
    """A thread this process has seized and that is stopped now."""

    def __init__(self, tid: int) -> None:
        self.tid = tid

    def regs(self) -> Regs:
        regs = Regs()
        _request(PTRACE_GETREGS, self.tid, None, ctypes.byref(regs), "reading registers")
        return regs

    def set_regs(self, regs: Regs) -> None:
        _request(PTRACE_SETREGS, self.tid, None, ctypes.byref(regs), "writing registers")

    def extended(self) -> tuple[int, bytes]:
        """The vector and floating-point state: (its regset, its bytes)."""
        for note, size in ((NT_X86_XSTATE, XSTATE_MAX), (NT_PRFPREG, 512)):
            buf = ctypes.create_string_buffer(size)
            iov = _IoVec(ctypes.cast(buf, ctypes.c_void_p), size)
            try:
                _request(PTRACE_GETREGSET, self.tid, note, ctypes.byref(iov), "reading state")
            except PtraceError:
                continue
            return note, buf.raw[: iov.len]
        raise PtraceError("reading the vector registers", 5)  # EIO

    def set_extended(self, state: tuple[int, bytes]) -> None:
        note, data = state
        buf = ctypes.create_string_buffer(data, len(data))
        iov = _IoVec(ctypes.cast(buf, ctypes.c_void_p), len(data))
        _request(PTRACE_SETREGSET, self.tid, note, ctypes.byref(iov), "writing state")

    def write(self, address: int, data: bytes) -> None:
        fd = os.open(f"/proc/{self.tid}/mem", os.O_WRONLY)
        try:
            if os.pwrite(fd, data, address) != len(data):
                raise PtraceError("writing memory", 5)
        finally:
            os.close(fd)

    def call(self, function: int, *args: int, timeout_s: float = 2.0) -> int:
        """`function(*args)` (integers and pointers, six at most) in this thread; its
        return value (rax). The thread is left exactly as it was."""
        saved = self.regs()
        extended = self.extended()
        regs = Regs.from_buffer_copy(saved)
        sp = ((saved.rsp - RED_ZONE - SCRATCH) & ~0xF) - 8  # as after a `call`
        self.write(sp, struct.pack("<Q", 0))  # the return address: a fault at 0
        regs.rsp, regs.rip, regs.rax = sp, function, 0
        regs.orig_rax = MASK  # not inside a system call: no restart of it at `function`
        for name, value in zip(_ARGS, args, strict=False):
            setattr(regs, name, value & MASK)
        self.set_regs(regs)
        try:
            self._resume(0)
            return self._until_returned(time.monotonic() + timeout_s)
        finally:
            self.set_regs(saved)
            self.set_extended(extended)

    def _resume(self, sig: int) -> None:
        _request(PTRACE_CONT, self.tid, None, sig, "resuming")

    def _until_returned(self, deadline: float) -> int:
        while True:
            stop = wait_stop(self.tid, deadline)
            if stop is None:  # blocked (a lock the thread itself held): taken back
                _request(PTRACE_INTERRUPT, self.tid, None, None, "interrupting")
                self._stopped_after_interrupt()
                raise CallFailed("the call did not return")
            if stop.event == 0 and stop.signal == signal.SIGSEGV:
                regs = self.regs()
                if regs.rip == 0:
                    return int(regs.rax)
                raise CallFailed(f"the call faulted at {regs.rip:#x}")
            # the job's own signal (handed on to it) or a group stop: go on
            self._resume(stop.signal if stop.event == 0 else 0)

    def _stopped_after_interrupt(self) -> None:
        """Wait for the stop an interrupt asked for; a signal that comes first is
        handed on to the job at once (its handler runs as it would have), and the
        interrupt's stop follows."""
        deadline = time.monotonic() + STOP_WAIT_S
        while True:
            stop = wait_stop(self.tid, deadline)
            if stop is None:
                raise CallFailed("the thread did not stop")
            if stop.event == PTRACE_EVENT_STOP:
                return
            self._resume(stop.signal)


def wait_stop(tid: int, deadline: float) -> Stop | None:
    """The thread's next stop; None at the deadline; Ended when it is gone."""
    while True:
        try:
            got, status = os.waitpid(tid, os.WNOHANG | WALL)
        except ChildProcessError:
            raise Ended from None
        if got == tid:
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                raise Ended
            if os.WIFSTOPPED(status):
                return Stop(os.WSTOPSIG(status), status >> 16)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.0005)


@contextlib.contextmanager
def seized(pid: int) -> Iterator[Thread]:
    """The process's main thread, stopped (its other threads run on) until the block
    ends; then let go. Signals that come meanwhile are handed on to it as they come."""
    _request(PTRACE_SEIZE, pid, None, None, "seizing")
    thread = Thread(pid)
    try:
        _request(PTRACE_INTERRUPT, pid, None, None, "interrupting")
        thread._stopped_after_interrupt()
        yield thread
    finally:
        with contextlib.suppress(PtraceError):
            _request(PTRACE_DETACH, pid, None, 0, "letting go")


# -- where a function is, in another process ------------------------------------------

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
ET_EXEC, PT_LOAD, SHT_DYNSYM = 2, 1, 11


def dynamic_symbols(path: str, wanted: set[str]) -> tuple[dict[str, int], bool, int]:
    """The values of the `wanted` exported symbols of an ELF64 file, whether it is
    position-dependent (ET_EXEC), and its lowest loaded address."""
    found: dict[str, int] = {}
    with open(path, "rb") as f:
        head = f.read(_EHDR.size)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return found, False, 0  # not a 64-bit little-endian ELF
        fields = _EHDR.unpack(head)
        e_type, phoff, shoff = fields[1], fields[5], fields[6]
        phnum, shentsize, shnum = fields[10], fields[11], fields[12]
        f.seek(phoff)
        loads = [
            p[3]
            for p in (_PHDR.unpack(f.read(_PHDR.size)) for _ in range(phnum))
            if p[0] == PT_LOAD
        ]
        f.seek(shoff)
        sections = [_SHDR.unpack(f.read(shentsize)[: _SHDR.size]) for _ in range(shnum)]
        for s in sections:
            if s[1] != SHT_DYNSYM or s[6] >= len(sections):
                continue
            strtab = sections[s[6]]
            f.seek(strtab[4])
            names = f.read(strtab[5])
            f.seek(s[4])
            table = f.read(s[5])
            for offset in range(0, len(table) - _SYM.size + 1, _SYM.size):
                st_name, _info, _other, shndx, value, _size = _SYM.unpack_from(table, offset)
                if shndx == 0 or value == 0:
                    continue  # undefined here
                end = names.find(b"\0", st_name)
                name = names[st_name:end].decode("ascii", "replace")
                if name in wanted and name not in found:
                    found[name] = value
    return found, e_type == ET_EXEC, min(loads, default=0) & ~0xFFF


def mapped_files(pid: int) -> dict[str, int]:
    """Each file mapped into `pid` (as the process names it) and the address where its
    first page (offset 0) is mapped."""
    bases: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/") or int(parts[2], 16) != 0:
            continue
        bases.setdefault(parts[5], int(parts[0].split("-")[0], 16))
    return bases


def find_functions(pid: int, wanted: set[str], in_file: str) -> dict[str, int]:
    """Where `wanted` functions are in `pid`, from the mapped file whose name contains
    `in_file` ("libc.so", "libpython", or the executable's path); what is not found is
    left out."""
    found: dict[str, int] = {}
    for name, base in mapped_files(pid).items():
        if in_file not in name or name.endswith(" (deleted)"):
            continue
        path = f"/proc/{pid}/root{name}"  # the job's own files, in a container too
        try:
            values, fixed, low = dynamic_symbols(path, wanted - set(found))
        except (OSError, struct.error):
            continue
        for symbol, value in values.items():
            found[symbol] = value if fixed else base + value - low
    return found


__all__ = ["CallFailed", "Ended", "PtraceError", "Thread", "find_functions", "seized"]

"""The command a remedy's rerun runs: the same command, changed through the script's
own flag when the probe saw one that fits, else through the probe's in-process
overrides, else not at all (the change is an edit; `manual` says which).

Never through a shell: the argv built here is what runs, and what the user can paste.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.diagnosis.window import held_cores, loader_workers, threads_left
from gpudoctor.i18n import _
from gpudoctor.prescribe.how import MAX_WORKERS, script_flag, suggested_value, suggested_workers
from gpudoctor.probe import ENV_OVERRIDES

# In-process values for the probe's overrides (DataLoader keywords; the switches: _switch).
# prefetch_factor 4: twice DataLoader's default of 2 batches per worker.
PREFETCH_FACTOR = 4


@dataclass(frozen=True)
class Change:
    remedy: str
    via: str  # "flag" | "probe" | "manual"
    change: str  # what changed, as a user reads it: "--num-workers 0 -> 2"
    why: str = ""  # how the value was chosen

    @property
    def changes_numerics(self) -> bool:
        remedy = CATALOGUE.get(self.remedy)
        return remedy is not None and remedy.changes_numerics

    def as_dict(self) -> dict[str, Any]:
        return {
            "remedy": self.remedy,
            "via": self.via,
            "change": self.change,
            "why": self.why,
            "changes_numerics": self.changes_numerics,
        }


@dataclass(frozen=True)
class Treatment:
    argv: tuple[str, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    applied: tuple[Change, ...] = ()

    @property
    def env(self) -> dict[str, str]:
        return {ENV_OVERRIDES: json.dumps(self.overrides)} if self.overrides else {}

    def shown(self, under_doctor: bool = False) -> str:
        """The command line as it ran (the overrides, when any, as the env variable);
        `under_doctor`: as a user types it to run it that way again (the overrides act
        only with the probe inside the job)."""
        prefix = (
            f"{ENV_OVERRIDES}={shlex.quote(json.dumps(self.overrides))} " if self.overrides else ""
        )
        doctor = "gpudoctor run -- " if under_doctor else ""
        return prefix + doctor + shlex.join(self.argv)


class NotApplicable(Exception):
    """This remedy cannot be applied to this job on a rerun; the message says what to
    edit by hand instead."""


def plan(
    remedies: list[str], argv: list[str], facts: dict[str, Any], cores_allowed: int
) -> Treatment:
    """The treatment that applies each remedy in turn (NotApplicable for one that can
    only be applied by hand)."""
    out = Treatment(tuple(argv))
    for remedy_id in remedies:
        out = _apply(remedy_id, out, facts, cores_allowed)
    return out


def _apply(remedy_id: str, t: Treatment, facts: dict[str, Any], cores: int) -> Treatment:
    if remedy_id not in CATALOGUE:
        known = ", ".join(sorted(CATALOGUE))
        raise NotApplicable(
            _("unknown remedy {remedy!r} (known: {known})").format(remedy=remedy_id, known=known)
        )
    loaders = facts.get("dataloaders") or []
    loader = loaders[0] if loaders else {}
    needs_loader = remedy_id in ("more-workers", "pin-memory", "prefetch", "persistent-workers")
    if needs_loader and not loaders:
        raise NotApplicable(
            _("{remedy} changes a DataLoader, and this job uses none: by hand, {snippet}").format(
                remedy=remedy_id, snippet=CATALOGUE[remedy_id].snippet.splitlines()[0]
            )
        )
    why = _why(remedy_id, facts, cores, loader)
    found = script_flag(remedy_id, facts)
    if found is not None:
        flag, current = found
        option = _option(facts, flag)
        value = suggested_value(remedy_id, facts, cores, current)
        takes_value = bool(option.get("takes_value", True))
        if takes_value and value is None:
            value = current  # nothing to choose: only the flag's presence is known
        if remedy_id == "more-workers" and isinstance(current, int) and value <= current:
            raise NotApplicable(
                _("the job already runs {n} workers ({why})").format(n=current, why=why)
            )
        argv = _set_flag(list(t.argv), option.get("strings", [flag]), flag, value, takes_value)
        change = (
            f"{flag} {current!r} -> {value!r}"
            if takes_value
            else _("{flag} added").format(flag=flag)
        )
        change = change.replace("'", "")
        return Treatment(
            tuple(argv), t.overrides, (*t.applied, Change(remedy_id, "flag", change, why))
        )
    override = CATALOGUE[remedy_id].probe_override
    if override is not None:
        overrides = json.loads(json.dumps(t.overrides))
        if override.startswith("dataloader."):
            key = override.split(".", 1)[1]
            value = _loader_value(remedy_id, facts, cores)
            current = loader.get(key)
            if remedy_id == "more-workers" and isinstance(current, int) and value <= current:
                raise NotApplicable(
                    _("the DataLoader already has {n} workers ({why})").format(n=current, why=why)
                )
            overrides.setdefault("dataloader", {})[key] = value
            if key in ("prefetch_factor", "persistent_workers") and not loader.get("num_workers"):
                raise NotApplicable(
                    _("{key} needs DataLoader workers: apply more-workers too").format(key=key)
                )
            change = f"DataLoader {key}={current!r} -> {value!r}"
        else:
            key, value, change = _switch(remedy_id, override, facts, cores)
            overrides[key] = value
        return Treatment(t.argv, overrides, (*t.applied, Change(remedy_id, "probe", change, why)))
    raise NotApplicable(
        _(
            "{remedy} cannot be applied on a rerun of this job (no script flag for it, no "
            "in-process switch): by hand, {snippet}"
        ).format(remedy=remedy_id, snippet=CATALOGUE[remedy_id].snippet.splitlines()[0])
    )


# Ampere (compute capability 8.0) brought bfloat16 and TF32 to tensor cores (NVIDIA A100
# Tensor Core GPU Architecture whitepaper); float16 autocast would need a GradScaler,
# which the probe does not add.
BF16_CAPABILITY = (8, 0)


def _switch(
    remedy_id: str, override: str, facts: dict[str, Any], cores: int
) -> tuple[str, Any, str]:
    """A process-wide or per-model switch of the probe's: its key in the overrides, its
    value, and the change as words (NotApplicable when it cannot help this job)."""
    device = str(facts.get("device") or "cpu").split(":")[0]
    capability = tuple(facts.get("cuda_capability") or ())
    if override == "cudnn.benchmark":
        return (
            "cudnn_benchmark", True,
            f"torch.backends.cudnn.benchmark {facts.get('cudnn_benchmark')!r} -> True",
        )  # fmt: skip
    if override == "autocast":
        if facts.get("autocast_seen"):
            raise NotApplicable(_("the job already runs under autocast"))
        if device == "cuda" and capability and capability < BF16_CAPABILITY:
            raise NotApplicable(
                _(
                    "bfloat16 needs compute capability 8.0 (this GPU: {major}.{minor}), and "
                    "float16 needs a GradScaler in the training loop: by hand, {snippet}"
                ).format(
                    major=capability[0],
                    minor=capability[1],
                    snippet=CATALOGUE[remedy_id].snippet.splitlines()[0],
                )
            )
        return (
            "autocast", "bfloat16",
            _("the model's forward under torch.autocast({device!r}, dtype=torch.bfloat16)").format(
                device=device
            ),
        )  # fmt: skip
    if override == "compile":
        if facts.get("compiled"):
            raise NotApplicable(_("the model is compiled already"))
        return "compile", True, _("torch.compile of the model's forward (the module left as it is)")
    if override == "matmul_precision":
        if device != "cuda" or (capability and capability < BF16_CAPABILITY):
            raise NotApplicable(
                _(
                    "TF32 runs on NVIDIA GPUs of compute capability 8.0 and later; this job "
                    "computes on {device}"
                ).format(
                    device=device + (" " + ".".join(map(str, capability)) if capability else "")
                )
            )
        if (facts.get("flops") or {}).get("tf32_matmul"):
            raise NotApplicable(_("the job's float32 matmuls use TF32 already"))
        return "matmul_precision", "high", 'torch.set_float32_matmul_precision("high")'
    if override == "threads":
        threads = facts.get("intra_op_threads")
        workers = loader_workers(facts)
        held = held_cores(facts, cores)
        value = threads_left(facts, cores)
        if not isinstance(threads, int) or value >= threads:
            raise NotApplicable(
                _(
                    "the training process runs {threads} intra-op threads beside {workers} "
                    "loader workers on {cores} cores ({held} held by other processes): none "
                    "to give back"
                ).format(threads=threads, workers=workers, cores=cores, held=held)
            )
        return (
            "threads", value,
            _("torch.set_num_threads({value}) (it runs {threads} threads now)").format(
                value=value, threads=threads
            ),
        )  # fmt: skip
    raise NotApplicable(
        _("no in-process switch {override!r} for {remedy}").format(
            override=override, remedy=remedy_id
        )
    )


def with_batch_size(argv: list[str], facts: dict[str, Any], size: int) -> Treatment:
    """The command at another batch size (the batch-size finder's tries): through the
    script's batch-size flag when it has one, else the probe's DataLoader override."""
    found = script_flag("larger-batch", facts)
    if found is not None:
        flag = found[0]
        option = _option(facts, flag)
        strings = option.get("strings", [flag])
        return Treatment(tuple(_set_flag(list(argv), strings, flag, size, True)))
    return Treatment(tuple(argv), {"dataloader": {"batch_size": size}})


def _option(facts: dict[str, Any], flag: str) -> dict[str, Any]:
    """The script's option (as the probe recorded it) that has this flag among its names."""
    options = facts.get("script_options") or {}
    return next((o for o in options.values() if flag in o.get("strings", ())), {})


def _loader_value(remedy_id: str, facts: dict[str, Any], cores: int) -> Any:
    if remedy_id == "more-workers":
        return suggested_workers(facts, cores)
    if remedy_id == "prefetch":
        return PREFETCH_FACTOR
    return True  # pin-memory, persistent-workers


def _why(remedy_id: str, facts: dict[str, Any], cores: int, loader: dict[str, Any]) -> str:
    if remedy_id != "more-workers":
        return ""
    world = int(facts.get("world_size") or 1)
    n = suggested_workers(facts, cores)
    return _(
        "{cores} cores the job may use / world size {world} = {per_rank}, at least 2, at most "
        "{most}: {n}; the loader has {now} now"
    ).format(
        cores=cores, world=world, per_rank=cores // max(world, 1), most=MAX_WORKERS, n=n,
        now=loader.get("num_workers", _("unknown")),
    )  # fmt: skip


def _set_flag(
    argv: list[str], strings: list[str], flag: str, value: Any, takes_value: bool
) -> list[str]:
    """argv with the option set: its value replaced where it is given (`--x v` or
    `--x=v`, under any of its names), else the option appended."""
    out = list(argv)
    for i, arg in enumerate(out):
        for name in strings:
            if takes_value and arg == name and i + 1 < len(out):
                out[i + 1] = str(value)
                return out
            if takes_value and arg.startswith(name + "="):
                out[i] = f"{name}={value}"
                return out
            if not takes_value and arg == name:
                return out
    return [*out, flag, str(value)] if takes_value else [*out, flag]

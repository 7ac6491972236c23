"""How a remedy would be applied to this job: through the script's own flag when the
probe saw one that fits, else by an edit (shown with its snippet)."""

from __future__ import annotations

import re
from typing import Any

from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.diagnosis.window import threads_left

# Cap on suggested DataLoader workers per rank: past ~8 the returns fall off and each
# worker holds a copy of the dataset object (PyTorch DataLoader docs warn on memory).
MAX_WORKERS = 8


def script_flag(remedy_id: str, facts: dict[str, Any]) -> tuple[str, Any] | None:
    """The script's own option that applies this remedy, with its current value."""
    options: dict[str, Any] = facts.get("script_options") or {}
    remedy = CATALOGUE[remedy_id]
    for flag in remedy.flags:
        for option in options.values():
            if flag in option.get("strings", ()):
                return flag, option.get("value")
    return None


def ranks_here(facts: dict[str, Any]) -> int:
    """The job's ranks on this node: torchrun's LOCAL_WORLD_SIZE, else the world (one
    node), else one."""
    return max(1, int(facts.get("local_world_size") or facts.get("world_size") or 1))


def suggested_workers(facts: dict[str, Any], cores_allowed: int) -> int:
    """Workers per rank: the cores each rank may use, one at least, MAX_WORKERS at most."""
    return max(1, min(MAX_WORKERS, cores_allowed // ranks_here(facts)))


def suggested_value(remedy_id: str, facts: dict[str, Any], cores_allowed: int, current: Any) -> Any:
    if remedy_id == "more-workers":
        return suggested_workers(facts, cores_allowed)
    if remedy_id in ("larger-batch", "smaller-batch") and isinstance(current, int) and current > 0:
        return current * 2 if remedy_id == "larger-batch" else max(1, current // 2)
    if remedy_id == "prefetch":
        return 4
    return None


def fitted_snippet(remedy_id: str, facts: dict[str, Any], cores_allowed: int) -> str:
    """The remedy's snippet with this job's values: the workers the doctor suggests for
    the cores each rank may use, the job's own batch size (doubled or halved for the
    batch remedies), bfloat16 where the GPU has it (compute capability 8.0 and up)."""
    text = CATALOGUE[remedy_id].snippet
    loaders = facts.get("dataloaders") or []
    batch = loaders[0].get("batch_size") if loaders else None
    if "num_workers=" in text:
        text = re.sub(
            r"num_workers=\d+", f"num_workers={suggested_workers(facts, cores_allowed)}", text
        )
    if isinstance(batch, int) and batch > 0 and "batch_size=" in text:
        size = batch
        if remedy_id in ("larger-batch", "smaller-batch"):
            size = suggested_value(remedy_id, facts, cores_allowed, batch)
        text = re.sub(r"batch_size=\d+", f"batch_size={size}", text)
    roots = [str(d["root"]) for d in loaders if d.get("root")]
    if remedy_id == "local-ssd" and roots:  # where the job's dataset says it reads from
        text = text.replace("/path/to/your/dataset/", roots[0].rstrip("/") + "/")
    cc = facts.get("compute_capability")
    if remedy_id == "amp" and isinstance(cc, (list, tuple)) and cc and int(cc[0]) >= 8:
        text = text.replace("dtype=torch.float16", "dtype=torch.bfloat16")
    return text


def how(remedy_id: str, facts: dict[str, Any], cores_allowed: int, lang: str = "en") -> str:
    found = script_flag(remedy_id, facts)
    if remedy_id == "more-workers" and not facts.get("dataloaders"):
        found = None  # a workers flag does nothing for input code outside a DataLoader
    if found is not None:
        flag, current = found
        value = suggested_value(remedy_id, facts, cores_allowed, current)
        if isinstance(current, bool) or value is None:
            if lang == "zh":
                return f"脚本已有 {flag} 选项（当前 {current!r}）：运行时加上 {flag}。"
            return f"Your script has {flag} (now {current!r}): run it with {flag}."
        if lang == "zh":
            return f"脚本已有 {flag} 选项（当前 {current!r}）：改为 {flag} {value} 运行。"
        return f"Your script has {flag} (now {current!r}): run it with {flag} {value}."
    snippet = fitted_snippet(remedy_id, facts, cores_allowed).splitlines()[0]
    threads = facts.get("intra_op_threads")
    if remedy_id == "fewer-threads" and isinstance(threads, int):
        n = threads_left(facts, cores_allowed)
        if lang == "zh":
            return f"在训练脚本开头加上：torch.set_num_threads({n})（现为 {threads} 个线程）。"
        return f"At the top of the training script: torch.set_num_threads({n}) (it runs {threads} now)."
    if remedy_id == "more-workers":
        loaders = facts.get("dataloaders") or []
        n = suggested_workers(facts, cores_allowed)
        if loaders:
            now = loaders[0].get("num_workers")
            if lang == "zh":
                return f"修改 DataLoader：num_workers={now} 改为 num_workers={n}（可用 {cores_allowed} 核）。"
            return (
                f"Edit the DataLoader: num_workers={now} -> num_workers={n} "
                f"({cores_allowed} cores allowed)."
            )
        if lang == "zh":
            return f"改用 DataLoader 并设置 num_workers={n}：{snippet}"
        return f"Move the input code into a Dataset and use DataLoader(..., num_workers={n})."
    if lang == "zh":
        return f"手动修改：{snippet}"
    return f"By hand: {snippet}"

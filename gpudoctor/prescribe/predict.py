"""What a remedy is predicted to buy: a speedup range (low, high) with its basis, from
what was measured; `trial` and `fix` show it beside what the rerun measured.

- more-workers (a DataLoader's data wait): the step is its compute C and its wait for
  data L (the median step's split). Loading N batches at once overlaps the wait with
  the compute: the step becomes max(C, L x W / N) where W is the workers loading now
  (1 for none: the main process loads in line). High: all N new workers load at once
  (waits on storage overlap whatever the cores). Low: only as many as the cores left
  beside the training process (cores allowed less one) load at once (decoding that
  needs a core each), and each at 3/4 of the speed (the hand-off to the main process:
  pickling the batch, its queue).
- fewer-threads where the job's threads outnumber the cores it has: threads that wait
  on each other keep their cores busy waiting, so more than the finding's share can be
  won back (beside one busy process on 2 cores, healthy.py's step fell from 336 ms to
  53 ms, 5.8x, where the neighbour's share said 2.0x at most). At most the step at its
  speed of light (speed_of_light.py's "could take"), when the probe counted its FLOPs;
  at least nothing.
- Every other remedy of a finding: at most the finding's share of the step won back
  (its estimated gain g: 1 / (1 - g)), at least nothing (1.0). The trial says which.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from gpudoctor.diagnosis.speed_of_light import speed_of_light
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.prescribe.how import ranks_here, suggested_workers

HAND_OFF = 0.75  # a worker's speed against loading in line (see the docstring)


@dataclass(frozen=True)
class Prediction:
    low: float
    high: float
    basis: str
    known: bool = True  # False: nothing measured says what it buys (the trial will)

    @property
    def point(self) -> float:
        """Between the bounds (geometric mean): what `fix` ranks remedies by."""
        return float((self.low * self.high) ** 0.5)

    def words(self) -> str:
        if not self.known:
            return _("not estimated")
        if abs(self.high - self.low) < 0.005:
            return f"{self.low:.2f}x"
        return f"{self.low:.2f}x-{self.high:.2f}x"

    def as_dict(self) -> dict[str, float | str | None]:
        if not self.known:
            return {"low": None, "high": None, "basis": self.basis}
        return {"low": round(self.low, 3), "high": round(self.high, 3), "basis": self.basis}


def predict(remedy: str, finding: Finding | None, w: Window, cores_allowed: int) -> Prediction:
    """The prediction for one remedy of a finding (None: applied with no finding)."""
    # watched from outside, the step (from the loop's counters) and its wait are py-spy's
    # estimates and the workers are counted from the process tree: the same model, not
    # the finding's whole share (1 / (1 - 0.92) = 12x was read for a loader decoding on
    # 2 cores); with no step rate read, that share
    estimated = w.estimated and w.step_median_ms > 0
    if remedy == "more-workers" and w.uses_dataloader and (w.detailed_steps or estimated):
        return _more_workers(w, cores_allowed, suggested_workers(w.facts, cores_allowed))
    gain = finding.estimated_gain if finding is not None else None
    if not gain or gain <= 0:
        return Prediction(1.0, 1.0, _("no share of the step measured for it"), known=False)
    high = 1 / max(1e-6, 1 - min(gain, 0.99))
    if remedy == "fewer-threads" and w.own_threads_oversubscribe():
        sol = speed_of_light(w)
        if sol is not None and sol.could_take_ms and sol.step_ms / sol.could_take_ms > high:
            return Prediction(
                1.0, sol.step_ms / sol.could_take_ms,
                _(
                    "threads that wait on each other keep their cores busy: at most the step "
                    "at its speed of light ({could:.1f} ms of {step:.1f}); at least nothing"
                ).format(could=sol.could_take_ms, step=sol.step_ms),
            )  # fmt: skip
    return Prediction(
        1.0, high,
        _("at most the {finding}'s {gain:.0%} of the step won back; at least nothing").format(
            finding=finding.id if finding else _("finding"), gain=gain
        ),
    )  # fmt: skip


def _more_workers(w: Window, cores: int, workers: int) -> Prediction:
    # the step and its wait as input-bound's evidence quotes them (one figure each)
    step = w.step_median_ms or statistics.median(s.wall_ns for s in w.detailed_steps) / 1e6
    wait = step * w.data_wait_fraction
    compute = max(1e-6, step - wait)
    loaders = w.facts.get("dataloaders") or []
    first = loaders[0] if loaders and isinstance(loaders[0], dict) else {}
    raw = first.get("num_workers")
    current = raw if isinstance(raw, int) else 0
    now = max(1, current)  # none: the main process loads, one batch at a time
    ranks = ranks_here(w.facts)
    per_rank = cores / ranks
    high = step / max(compute, wait * now / workers)
    if per_rank < 2:  # no core beside each rank's own: workers take the training's
        low = min(high, HAND_OFF * per_rank / (1 + workers))
        return Prediction(
            low,
            high,
            _(
                "{cores} cores allowed for {ranks} ranks, {current} workers -> {workers} "
                "each: no core is free beside the ranks, so workers that need a core share "
                "the training's and can slow it (each rank's main process gets 1 of "
                "{share} shares while they load); at best the {wait:.1f} ms wait of a "
                "{step:.1f} ms step overlapped"
            ).format(
                cores=cores, ranks=ranks, current=current, workers=workers,
                share=1 + workers, wait=wait, step=step,
            ),
        )  # fmt: skip
    spare = max(1, int(per_rank) - 1)
    low = min(high, step / max(compute, wait * now / (min(workers, spare) * HAND_OFF)))
    slower = ""
    if low < 1.0:  # the low end is a slowdown: say how
        slower = (
            _(
                "; below 1x where {spare} loader at {speed:.0%} speed is slower than the "
                "main process loading in line now"
            )
            if not current
            else _(
                "; below 1x where {spare} loaders at {speed:.0%} speed are slower than "
                "the {now} workers now"
            )
        ).format(spare=min(workers, spare), speed=HAND_OFF, now=now)
    return Prediction(
        low,
        high,
        _(
            "{cores} cores allowed, {current} workers -> {workers}; a step is {compute:.1f} ms "
            "of work and {wait:.1f} ms waiting for data: the wait overlapped by {workers} "
            "loaders at most, by {spare} at {speed:.0%} speed if loading needs a core each"
        ).format(
            cores=cores,
            current=current,
            workers=workers,
            compute=compute,
            wait=wait,
            spare=min(workers, spare),
            speed=HAND_OFF,
        )
        + slower,
    )


def first_remedy(finding: Finding, w: Window, cores_allowed: int) -> Prediction | None:
    """What a finding's first remedy is predicted to buy; None without a remedy or
    when nothing measured says (the report and the screens show this one)."""
    if not finding.remedies:
        return None
    p = predict(finding.remedies[0], finding, w, cores_allowed)
    return p if p.known else None

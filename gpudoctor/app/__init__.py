"""The application layer: what the doctor does, once, for every face. The command
line parses, calls one of these and prints the result; the TUI calls the same ones
and draws them. Each returns a frozen result and says how long work goes through a
Progress (progress.py); what cannot be done is a NotPossible (errors.py) in one line.

- run.py: `launch` a job under the doctor, `watch` one from outside (`check_watch`
  first), `follow` it with the one loop, `conclude` it (report, store, exit code)
- trial.py: `trial` (A/B with a remedy applied), `compare` (two recorded runs)
- tune.py: `tune_batch_size`
- sessions.py: recorded sessions by id or `last`, the jobs' log files

The faces import the module they need (`from gpudoctor.app import run`): this package
front imports none of them, so a command loads only what it uses.
"""

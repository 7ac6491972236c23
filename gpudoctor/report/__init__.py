"""The report of one run: its values (values.py), how it is built from a timeline
(build.py: the diagnosis, so a command imports it when it needs it) and how it reads as
text and Markdown (render.py)."""

from gpudoctor.report.values import SCHEMA, Report, to_json

__all__ = ["SCHEMA", "Report", "to_json"]

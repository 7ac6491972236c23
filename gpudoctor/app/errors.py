"""What the application layer cannot do, said in one line for the user (the command
line prints it and exits 2; a launch that fails carries its own exit code instead:
jobs.LaunchError)."""

from __future__ import annotations


class NotPossible(Exception):
    """The request cannot be carried out as asked; the message says why and what to do."""

"""gpudoctor: a terminal performance doctor for PyTorch training jobs."""

__version__ = "0.1.0"

"""Diagnosis: pure rules over a window of one run. No Textual, psutil, NVML, sockets."""

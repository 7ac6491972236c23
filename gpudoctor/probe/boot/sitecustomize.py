# gpudoctor boot: loaded by Python at start-up because `gpudoctor run` put this folder
# first on PYTHONPATH. It loads the probe under a private module name (so the job's
# own environment needs no gpudoctor), then chains to any other sitecustomize.
import contextlib


def _gpudoctor_boot():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    with contextlib.suppress(Exception):
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if os.environ.get("GPUDOCTOR_SOCKET"):
        try:
            probe_dir = os.path.dirname(here)
            spec = importlib.util.spec_from_file_location(
                "_gpudoctor_probe",
                os.path.join(probe_dir, "__init__.py"),
                submodule_search_locations=[probe_dir],
            )
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                sys.modules["_gpudoctor_probe"] = module
                spec.loader.exec_module(module)
                module.start()
        except Exception as exc:
            sys.stderr.write(f"gpudoctor probe: disabled ({type(exc).__name__}: {exc})\n")
    # Chain to the sitecustomize this one shadows, as Python would have loaded it.
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
        if spec is not None and spec.loader is not None and spec.origin != __file__:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n")
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")


_gpudoctor_boot()
del _gpudoctor_boot

"""A stand-in for `sgl_kernel`, SGLang's CUDA kernel package, for the releases whose
modules import it at load (0.5.12's scheduler): put this folder on PYTHONPATH
(`FOLDER`). It gives any submodule and any name, and nothing in it computes: the stand-in
scheduler runs no kernel. Only for the harness (the release matrix, its tests)."""

from pathlib import Path

FOLDER = str(Path(__file__).resolve().parent)

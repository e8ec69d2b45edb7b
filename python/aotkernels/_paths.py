"""Where the package's data lives: installed wheel, or a source checkout's build."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
KERNELS_DIR = PACKAGE_DIR / "kernels"


def matrix_path() -> Path:
    """The arch_matrix.toml the package was built from (the checkout's when run from source)."""
    installed = PACKAGE_DIR / "arch_matrix.toml"
    if installed.is_file():
        return installed
    return PACKAGE_DIR.parents[1] / "arch_matrix.toml"

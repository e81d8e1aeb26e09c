"""Fills `benchmarks/device/wheels/` (ignored by git) with the wheels the
device check carries to a GPU machine that has no network.

    python benchmarks/device/wheels.py          # downloads (needs PyPI)
    python benchmarks/device/wheels.py --list   # prints the pip command

The H200 image (Python 3.12, torch 2.11, Triton 3.6, transformers, pytest,
hypothesis, ...) lacks `gguf` (GGUF reading: the GGML tests and the model
tests quantise with it) and `ninetoothed` (the slot-9 backend). Both are
pure-Python wheels whose own requirements the image has (numpy, pyyaml,
requests, tqdm, sympy, triton). The test stack travels too, in the versions
CI uses, in case the image's is missing or older: `run.py` installs a wheel
only where the machine lacks that distribution (``pip install --no-index
--no-deps``). All of them together are about 2 MiB, far under the 64 MiB a
device call may carry.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "wheels"

# One pinned version of each distribution (two versions of one stop the
# install). Requirements not listed are on the image.
WHEELS = (
    "gguf==0.19.0",
    "ninetoothed==0.26.0",
    "pytest==9.2.0",
    "pluggy==1.7.0",
    "iniconfig==2.3.1",
    "packaging==26.4",
    "hypothesis==6.170.27",
    "sortedcontainers==2.4.0",
)

# The device machine's interpreter and platform (pure-Python wheels match
# any of them; the flags make pip refuse anything built for this machine).
TARGET = [
    "--only-binary=:all:",
    "--no-deps",
    "--implementation",
    "cp",
    "--python-version",
    "3.12",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
]


def command() -> list[str]:
    return [sys.executable, "-m", "pip", "download", *TARGET, "-d", str(FOLDER)] + [
        *WHEELS
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the command only")
    arguments = parser.parse_args()
    if arguments.list:
        print(" ".join(command()))
        return 0
    FOLDER.mkdir(exist_ok=True)
    result = subprocess.run(command())
    wheels = sorted(FOLDER.glob("*.whl"))
    size = sum(path.stat().st_size for path in wheels)
    print(f"{len(wheels)} wheels, {size / 2**20:.1f} MiB in {FOLDER}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

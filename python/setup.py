"""Installs the strata package with the C++ module the repository's CMake
build makes (build/python/strata/_strata*.so, or $STRATA_BUILD_DIR's);
builds that target first when it is missing. Debian's Python is externally
managed and no registry is reachable, so install into a virtual
environment over it:

    /usr/bin/python3 -m venv --system-site-packages ~/strata-venv
    ~/strata-venv/bin/pip install --no-build-isolation ./python
"""

import glob
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def built_module():
    build = os.environ.get("STRATA_BUILD_DIR",
                           os.path.join(HERE, "..", "build"))
    pattern = os.path.join(build, "python", "strata", "_strata*.so")
    if not glob.glob(pattern):
        subprocess.check_call(["cmake", "--build", build, "--target",
                               "strata_python"])
    found = glob.glob(pattern)
    if not found:
        raise RuntimeError(f"no {pattern}: build Strata first "
                           "(bash scripts/build.sh)")
    return found[0]


class BuildWithModule(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "strata")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(built_module(), target)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel carries a compiled module
        return True


setup(cmdclass={"build_py": BuildWithModule}, distclass=BinaryDistribution)

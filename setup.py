# Builds the kvtier wheel (pyproject.toml): the .py sources of
# client/python/kvtier plus kvtier._native, built by the project's CMake for
# the interpreter running this. Set KVTIER_BUILD_DIR to a configured build
# directory to build the extension there (an incremental build; it must have
# been configured for this interpreter); otherwise a fresh CMake build is made
# under build-python/.
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, "build-python"), exist_ok=True)  # setup.cfg's egg_base


def project_version():
    """CMake's project(VERSION): the one version of the C++ code, the .deb and this."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*kvtier\b[^)]*?\bVERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt has no `project(kvtier VERSION x.y.z)`")
    return m.group(1)


class CMakeExtension(build_ext):
    """Builds the `kvtier_python` CMake target and copies its module in."""

    def build_extension(self, ext):
        build_dir = os.environ.get("KVTIER_BUILD_DIR")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
        else:
            build_dir = os.path.join(ROOT, "build-python", "cmake")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
                "-DCMAKE_BUILD_TYPE=Release", "-DKVTIER_PYTHON=ON",
                f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "kvtier_python",
                               "-j", str(os.cpu_count() or 2)])
        name = "_native" + sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(build_dir, "python", "kvtier", name)
        if not os.path.exists(built):
            raise RuntimeError(
                f"{built} was not built: the CMake build in {build_dir} was configured for "
                f"another Python than {sys.executable} (reconfigure it with "
                f"-DPython3_EXECUTABLE={sys.executable}, or unset KVTIER_BUILD_DIR)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)


setup(
    version=project_version(),
    package_dir={"": "client/python"},
    packages=find_packages("client/python", include=["kvtier", "kvtier.*"]),
    package_data={"kvtier": ["py.typed", "_native.pyi"]},
    ext_modules=[Extension("kvtier._native", sources=[])],
    cmdclass={"build_ext": CMakeExtension},
    zip_safe=False,
)

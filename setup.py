"""Install libai. The configs/ folder ships inside the package as ``libai/configs`` so that user
configs outside the repository can inherit them with ``_base_ = "libai::_base_/..."``, and the
``libai`` command (``libai train bert_tiny``) finds them by name from any folder."""

import os
import re

from setuptools import find_namespace_packages, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_requirements(name):
    out = []
    with open(os.path.join(HERE, "requirements", name)) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("-r "):
                out += read_requirements(line[3:].strip())
            else:
                out.append(line)
    return out


with open(os.path.join(HERE, "libai", "version.py")) as f:
    version = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)

config_packages = ["libai.configs"] + [
    "libai.configs." + p for p in find_namespace_packages(where="configs")
]

setup(
    name="libai",
    version=version,
    description="A config-driven training engine for PyTorch models",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["libai", "libai.*"]) + config_packages,
    package_dir={"libai.configs": "configs"},
    package_data={"libai.configs": ["**/*.py", "**/*.yaml", "**/*.yml", "**/*.json"]},
    include_package_data=True,
    entry_points={"console_scripts": ["libai = libai.cli:main"]},
    install_requires=read_requirements("runtime.txt"),
    extras_require={
        "optional": read_requirements("optional.txt"),
        "hf": read_requirements("hf.txt"),
        "tests": read_requirements("tests.txt"),
    },
)

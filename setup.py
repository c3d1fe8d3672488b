"""Build entry for the parts setup.cfg cannot declare: the C++ op extension.

Metadata lives in setup.cfg.  Build with ``pip install --no-build-isolation -e .``
so the extension compiles against the torch already installed (build isolation
would fetch a different torch into a throwaway environment).
"""
from setuptools import setup

setup()

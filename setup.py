"""Build entry for the parts setup.cfg cannot declare: the C++ op extension.

Metadata lives in setup.cfg.  Build with ``pip install --no-build-isolation -e .``
so the extension compiles against the torch already installed (build isolation
would fetch a different torch into a throwaway environment).  Rebuild the
extension alone, in place, with ``python setup.py build_ext --inplace``.

The extension ``mpirun_kit/maskrcnn/_C*.so`` holds the detection ops
(mpirun_kit/maskrcnn/csrc/).  The CPU kernels always build.  The CUDA kernels
build when torch.cuda is available at build time and nvcc exists; ``FORCE_CUDA=1``
builds them without a visible GPU (a ``docker build`` of the GPU image), which
still needs CUDA torch and nvcc.  Targets: sm_80 (A100) and sm_90 (H100), plus
compute_90 PTX for newer GPUs.
"""
import glob
import os
import sys

from setuptools import setup

CSRC = os.path.join("mpirun_kit", "maskrcnn", "csrc", "ops")
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]


def _sources(*patterns):
    return sorted(p for pattern in patterns for p in glob.glob(os.path.join(CSRC, pattern)))


def _want_cuda(torch, cuda_home):
    # The build boundary is the one place allowed to look at the environment.
    forced = os.environ.get("FORCE_CUDA", "0") == "1"
    return (torch.cuda.is_available() or forced) and torch.version.cuda is not None and cuda_home is not None


def _arch_flags():
    # MRK_CUDA_ARCH=90 builds for that one architecture (ops/gpu-check.sh: the GPU present, about
    # half the build time of the three gencodes)
    arch = os.environ.get("MRK_CUDA_ARCH", "").strip()
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"] if arch else CUDA_ARCH_FLAGS


def _extensions():
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
    except ImportError as exc:
        # Never build silently without the ops: the package would install and then
        # run every detection op on the slow reference path.  The usual cause is
        # pip's build isolation, which builds in a fresh environment without torch.
        raise SystemExit(
            f"mpirun_kit's op extension needs torch at build time ({exc}); install torch first, then "
            "build without isolation: pip install --no-build-isolation -e .  (ops/quickstart.sh does both)"
        ) from exc
    # torch looks for `ninja` on PATH; the one pip put next to this interpreter
    # (ops/quickstart.sh installs it into .venv) is not on PATH before activation.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    sources = _sources("*.cpp", "cpu/*.cpp", "autograd/*.cpp")
    cxx = ["-O3", "-fopenmp"]
    kwargs = {"extra_link_args": ["-fopenmp"]}
    if _want_cuda(torch, CUDA_HOME):
        ext = CUDAExtension(
            "mpirun_kit.maskrcnn._C",
            sources + _sources("cuda/*.cu"),
            define_macros=[("MPIRUN_KIT_WITH_CUDA", "1")],
            extra_compile_args={"cxx": cxx, "nvcc": ["-O3", "--expt-relaxed-constexpr", *_arch_flags()]},
            **kwargs,
        )
    else:
        ext = CppExtension("mpirun_kit.maskrcnn._C", sources, extra_compile_args={"cxx": cxx}, **kwargs)
    class AtomicBuildExtension(BuildExtension):
        """Puts the built library in place with a rename, never by writing over it.

        setuptools copies an in-place build onto the existing ``_C*.so``; a
        process that has it mapped (a training rank) then dies of SIGBUS.
        """

        def copy_file(self, infile, outfile, *args, **kwargs):
            if not str(outfile).endswith(".so"):
                return super().copy_file(infile, outfile, *args, **kwargs)
            tmp = f"{outfile}.tmp{os.getpid()}"
            result = super().copy_file(infile, tmp, *args, **kwargs)
            os.replace(tmp, outfile)
            return (outfile, result[1]) if isinstance(result, tuple) else result

    return [ext], {"build_ext": AtomicBuildExtension}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)

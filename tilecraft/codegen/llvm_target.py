"""The LLVM target: the CPU and features code is compiled for, and LLVM's objects for it.

``parse_target("llvm -mcpu=znver3 -mattr=+avx2 -opt-level=3 -fast-math")`` gives the
:class:`LLVMOptions` that the code generator (``llvm.py``) and the JIT (``llvm_jit.py``) use: the
host CPU with all its features unless ``-mcpu``/``-mattr`` say otherwise. :func:`check_target`
refuses CPU and feature names LLVM does not know, before LLVM sees them (it would abort the
process). :func:`target_machine` and :func:`optimize` are LLVM's target machine and ``O<n>``
pipeline for those options.

>>> opts = parse_target("llvm -opt-level=2")
>>> opts.opt_level, opts.cpu == _llvm().get_host_cpu_name()
(2, True)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .llvm_types import CodegenError


@dataclass(frozen=True)
class LLVMOptions:
    """What the target string decides: ``llvm -mcpu=znver3 -mattr=+avx2 -opt-level=3 -fast-math``."""
    target: str
    triple: str
    cpu: str
    features: str
    opt_level: int = 3
    fast_math: bool = False


def parse_target(target="llvm") -> LLVMOptions:
    """Host CPU name and features unless ``-mcpu=``/``-mattr=`` say otherwise."""
    from ..target import Target
    t = Target(target)
    if t.kind != "llvm":
        raise CodegenError(f"the LLVM backend compiles for target 'llvm', got {str(t)!r}")
    check_target(t)
    llvm = _llvm()
    cpu = t.attrs.get("mcpu") or llvm.get_host_cpu_name()
    if "mattr" in t.attrs:
        features = t.attrs["mattr"]
    elif "mcpu" in t.attrs:
        features = ""
    else:
        features = llvm.get_host_cpu_features().flatten()
    triple = t.attrs.get("mtriple") or llvm.get_process_triple()
    try:
        opt = int(t.attrs.get("opt-level", 3))
    except ValueError:
        raise CodegenError(f"-opt-level must be 0..3, got {t.attrs['opt-level']!r}") from None
    fast = t.attrs.get("fast-math", "0") not in ("0", "false")
    return LLVMOptions(str(t), triple, cpu, features, opt, fast)


# LLVM aborts the whole process on some target options instead of reporting them: an unknown
# -mcpu on x86-64 ("LLVM ERROR: 64-bit code requested on a subtarget that doesn't support it"),
# an -mattr entry without +/- (an assertion). So they are checked here first, against the names
# LLVM lists for the triple; LLVM prints that list only to stderr (for the CPU name "help"), so
# it is read once per process from a short-lived child process.
_PROBE = ("import os, sys, llvmlite.binding as llvm\n"
          "llvm.initialize_native_target(); llvm.initialize_native_asmprinter()\n"
          "llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu='help', features='')\n"
          "sys.stderr.flush(); os._exit(0)\n")
_known_names: dict = {}
_checked_targets: set = set()


def known_cpus_and_features(triple: str) -> tuple[list[str], list[str]]:
    """The CPU names and feature names LLVM knows for ``triple`` (empty lists when LLVM cannot
    list them here).

    >>> cpus, features = known_cpus_and_features(_llvm().get_process_triple())
    >>> "skylake-avx512" in cpus, "avx2" in features
    (True, True)
    """
    if triple not in _known_names:
        import subprocess
        import sys

        try:
            out = subprocess.run([sys.executable, "-c", _PROBE, triple], capture_output=True, text=True,
                                 timeout=120).stderr
        except (OSError, subprocess.SubprocessError):
            out = ""
        sections: dict = {"cpus": [], "features": []}
        current = None
        for line in out.splitlines():
            if line.startswith("Available CPUs"):
                current = "cpus"
            elif line.startswith("Available features"):
                current = "features"
            elif current and line.startswith("  ") and " - " in line:
                sections[current].append(line.split()[0])
        _known_names[triple] = (sections["cpus"], sections["features"])
    return _known_names[triple]


def _unknown_name(what: str, name: str, known: list[str], target, triple: str, extra: str = "") -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    return (f"target {str(target)!r}: LLVM knows no {what} {name!r} for {triple}{hint}.{extra} "
            f"Valid {what}s: {', '.join(known)}")


def check_target(target="llvm") -> None:
    """Raise ``TargetError`` unless the ``-mcpu`` and ``-mattr`` of an ``llvm`` target name a
    CPU and features LLVM knows for the target's triple; the message lists the valid names and
    the closest ones. LLVM would otherwise abort the process. Checked once per process for
    each target string.

    >>> check_target("llvm -mcpu=skylakex")   # TargetError: ... no CPU 'skylakex' ... did you mean 'skylake'
    """
    from ..target import Target, TargetError

    t = Target(target)
    cpu, mattr = t.attrs.get("mcpu"), t.attrs.get("mattr")
    key = str(t)
    if t.kind != "llvm" or (cpu is None and mattr is None) or key in _checked_targets:
        return
    llvm = _llvm()
    triple = t.attrs.get("mtriple") or llvm.get_process_triple()
    host = llvm.get_host_cpu_name()
    if cpu is not None and not (cpu == host and triple == llvm.get_process_triple()):
        cpus, _ = known_cpus_and_features(triple)
        if cpus and cpu not in cpus:
            raise TargetError(_unknown_name("CPU", cpu, cpus, t, triple, f" This machine's CPU is {host!r}."))
    if mattr is not None:
        entries = [e.strip() for e in mattr.split(",") if e.strip()]
        for entry in entries:
            if entry[0] not in "+-" or len(entry) < 2:
                raise TargetError(f"target {str(t)!r}: each -mattr entry must be +feature or -feature "
                                  f"(e.g. -mattr=+avx2,+fma), got {entry!r}")
        _, features = known_cpus_and_features(triple)
        for entry in entries:
            if features and entry[1:] not in features:
                raise TargetError(_unknown_name("feature", entry[1:], features, t, triple))
    _checked_targets.add(key)


_llvm_ready = False


def _llvm():
    global _llvm_ready
    import llvmlite.binding as llvm
    if not _llvm_ready:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _llvm_ready = True
    return llvm


def target_machine(opts: LLVMOptions, reloc: str = "default"):
    """A fresh target machine (MCJIT takes ownership of the one it is given)."""
    llvm = _llvm()
    target = llvm.Target.from_triple(opts.triple)
    return target.create_target_machine(cpu=opts.cpu, features=opts.features, opt=opts.opt_level,
                                        reloc=reloc, codemodel="jitdefault" if reloc == "default" else "default")


@lru_cache(maxsize=8)
def _cached_target_machine(opts: LLVMOptions, reloc: str):
    return target_machine(opts, reloc)


def optimize(module, tm, opt_level: int) -> None:
    """Run LLVM's default ``O<opt_level>`` pipeline (new pass manager)."""
    llvm = _llvm()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = opt_level >= 1
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)

"""Which x86 vector features an LLVM target has: what CPU micro-kernels are chosen by.

``cpu_features("llvm -mcpu=skylake-avx512")`` answers with the names of :data:`FEATURES` that
the target has, as LLVM compiles for it: the host's features for a plain ``llvm`` (llvmlite
reports them), and otherwise what LLVM does with ``-mcpu``/``-mattr``, implied features included
(``-mattr=+avx512vnni`` brings ``avx512f``; ``-mcpu=znver3`` has no AVX-512). The second case is
asked of LLVM itself: each feature's probe (:data:`FEATURES`) is compiled for the target and
its assembly must hold the instruction. LLVM aborts the process on an intrinsic the target
lacks, so the probes run in a short child process that forks once per probe (about 0.2 s, once
per process and target).

>>> "avx512f" in cpu_features("llvm -mcpu=skylake-avx512")
True
>>> sorted(cpu_features("llvm -mcpu=znver3"))
['avx2', 'fma']
"""
from __future__ import annotations

import json
from functools import lru_cache

from .llvm_types import CodegenError

# name -> (LLVM IR of a function @probe, what the assembly must contain)
FEATURES = {
    "avx2": ("declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)\n"
             "define <8 x i32> @probe(<16 x i16> %a, <16 x i16> %b) {\n"
             "  %r = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %a, <16 x i16> %b)\n"
             "  ret <8 x i32> %r\n}\n", ("vpmaddwd", "ymm")),
    "fma": ("declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)\n"
            "define <8 x float> @probe(<8 x float> %a, <8 x float> %b, <8 x float> %c) {\n"
            "  %r = call <8 x float> @llvm.fma.v8f32(<8 x float> %a, <8 x float> %b, <8 x float> %c)\n"
            "  ret <8 x float> %r\n}\n", ("vfmadd", "ymm")),
    "avx512f": ("define void @probe(ptr %p) {\n"
                "  %a = load <16 x float>, ptr %p, align 64\n"
                "  %r = fadd <16 x float> %a, %a\n"
                "  store <16 x float> %r, ptr %p, align 64\n  ret void\n}\n", ("vaddps", "zmm")),
    "avx512bw": ("declare <32 x i16> @llvm.x86.avx512.pmaddubs.w.512(<64 x i8>, <64 x i8>)\n"
                 "define <32 x i16> @probe(<64 x i8> %a, <64 x i8> %b) {\n"
                 "  %r = call <32 x i16> @llvm.x86.avx512.pmaddubs.w.512(<64 x i8> %a, <64 x i8> %b)\n"
                 "  ret <32 x i16> %r\n}\n", ("vpmaddubsw", "zmm")),
    "avx512vnni": ("declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)\n"
                   "define <16 x i32> @probe(<16 x i32> %c, <16 x i32> %a, <16 x i32> %b) {\n"
                   "  %r = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> %c, <16 x i32> %a, "
                   "<16 x i32> %b)\n  ret <16 x i32> %r\n}\n", ("vpdpbusd", "zmm")),
    # 256-bit vpdpbusd: AVX-VNNI (VEX: Alder Lake, Zen 5) or AVX512-VNNI with AVX512VL (EVEX:
    # Cascade Lake, Zen 4), so "avxvnni" here is wider than LLVM's feature of that name
    "avxvnni": ("declare <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32>, <8 x i32>, <8 x i32>)\n"
                "define <8 x i32> @probe(<8 x i32> %c, <8 x i32> %a, <8 x i32> %b) {\n"
                "  %r = call <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32> %c, <8 x i32> %a, "
                "<8 x i32> %b)\n  ret <8 x i32> %r\n}\n", ("vpdpbusd", "ymm")),
    # AMX int8 tiles (Sapphire Rapids on): topi/cpu_amx.py
    "amx-int8": ("declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)\n"
                 "declare x86_amx @llvm.x86.tdpbusd.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)\n"
                 "declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)\n"
                 "define void @probe(ptr %p) {\n"
                 "  %t = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %p, i64 64)\n"
                 "  %r = call x86_amx @llvm.x86.tdpbusd.internal(i16 16, i16 64, i16 64, x86_amx %t, "
                 "x86_amx %t, x86_amx %t)\n"
                 "  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %p, i64 64, x86_amx %r)\n"
                 "  ret void\n}\n", ("tdpbusd", "ldtilecfg")),
}

_PROBE = """
import json, os, sys
import llvmlite.binding as llvm
llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
triple, cpu, features = sys.argv[1:4]
probes = json.loads(sys.stdin.read())
found = []
for name, (text, needles) in probes.items():
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                      # LLVM may abort here: only this fork dies
        try:
            mod = llvm.parse_assembly(text)
            tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2)
            asm = tm.emit_assembly(mod)
            ok = all(n in asm for n in needles) and "call" not in asm
        except Exception:
            ok = False
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        found.append(name)
print(json.dumps(found))
"""


def cpu_features(target="llvm") -> frozenset:
    """The names of :data:`FEATURES` that ``target`` (an ``llvm`` target string or
    ``Target``) compiles for; see the module docstring.

    >>> "avx2" in cpu_features("llvm -mcpu=haswell")
    True
    """
    from .llvm_target import _llvm, parse_target
    from ..target import Target

    t = Target(target)
    opts = parse_target(t)
    if not any(k in t.attrs for k in ("mcpu", "mattr", "mtriple")):
        host = _llvm().get_host_cpu_features()
        found = {name for name in FEATURES if host.get(name)}
        if host.get("avx512vnni") and host.get("avx512vl"):
            found.add("avxvnni")          # 256-bit vpdpbusd in its EVEX form, as the probe finds it
        return frozenset(found)
    return _probe(opts.triple, opts.cpu, opts.features)


@lru_cache(maxsize=None)
def _probe(triple: str, cpu: str, features: str) -> frozenset:
    import subprocess
    import sys

    try:
        r = subprocess.run([sys.executable, "-c", _PROBE, triple, cpu, features], input=json.dumps(FEATURES),
                           capture_output=True, text=True, timeout=120)
        found = json.loads(r.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as err:
        raise CodegenError(f"could not ask LLVM which features CPU '{cpu}' with '{features}' has "
                           f"(in a child process): {err}") from None
    return frozenset(found)

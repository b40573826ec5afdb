"""Why the fp32 micro-kernel alone reaches less of the FMA peak on Intel (Golden Cove) cores than
on Zen: tiny hand-written x86 kernels (gcc inline assembly, ``-march=sapphirerapids``, or the
host's ``-march=native`` where gcc is older), timed beside the FMA peak loop and beside our
codegen's micro-kernels in the same process, in turns (medians). Also the AMX int8 kernel's
per-call and per-step costs. Issue 11; run it pinned, e.g. on the device host::

    taskset -c 0,1 python3 bench/cpu_kernel_probe.py --threads 1,2
    python3 bench/cpu_kernel_probe.py --only freq,fp32 --kc 128

Rows (``--only``):

- ``freq``: the core clock measured by a chain of dependent ``add r11, r11`` (1 cycle each; not
  ``add r11, 1``, which Golden Cove's renamer folds): alone, and
  *inside* an FMA loop (16 independent zmm / ymm FMAs per 12 chained adds, so the chain sets the
  pace and the clock is measured while the FMA units run: the AVX-512 frequency licence); the
  FMA peak loops themselves (24 zmm accumulators, 12 ymm ones) with the clock they imply at 2
  FMA units (64 / 32 FLOP per cycle).
- ``fp32``: ``mr × nr`` register tiles on one L1-resident packed A panel (``kc × mr``) and B
  panel (``kc × nr``), the broadcast either a ``vbroadcastss`` into a register shared by the
  row's FMAs or embedded in every FMA (``{1to16}``), unrolled 1 or 4 steps; each also with the
  dependent-add clock probe inside (``clk``: the GHz the kernel ran at; the chain is 1.25 × the
  FMA-bound cycles, so it sets the pace); B 4K-aliased with A, B misaligned by 32 bytes, and a
  prefetch of the A panel 1 KB ahead, on the best tile; then our codegen's kernels
  (``cpu_intrinsics.gemm_fp32``, as ``bench/cpu_gemm_anatomy.py`` times them).
- ``amx`` (only where the CPU has ``amx-int8``): ``C[32, 32] += A[32, kc] · B`` on 2 × 2 C tiles
  with 2 A and 2 B tiles: the tile configuration and release per call (as LLVM emits for our
  kernel) or once; A read with its row stride ``lda`` = 1024 (in place) or packed (``[kc / 64,
  32, 64]``, 64-byte rows: one contiguous KB per tile); loads all ahead of the 4 ``tdpbusd`` or
  interleaved; C loaded and stored per call or zeroed; ``kc`` 256 and 1024. Int-ops/s.

Two threads: one Python thread per core calling the same C function on its own buffers (ctypes
drops the GIL), timed together. The shares are of the FMA peak loop timed in the same rounds.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# (mr, vectors of 16 lanes, unroll, embedded broadcast)
FP32_TILES = [(14, 2, 1, False), (14, 2, 1, True), (14, 2, 4, False), (12, 2, 4, False), (12, 2, 4, True),
              (8, 2, 4, False), (8, 2, 4, True), (8, 3, 4, False), (8, 3, 4, True), (6, 4, 4, False),
              (6, 4, 4, True), (28, 1, 1, True), (28, 1, 4, True), (24, 1, 4, True)]
CHAIN = 12      # dependent adds per 16 FMAs in the clock probe inside the FMA loop
# one cycle of a dependent chain: a register added to itself. Not "addq $1, %r11": Golden Cove's
# renamer folds chains of adds of immediates (the Emerald Rapids host ran 16 of them a cycle
# alone and far above the clock inside FMA loops: session 22's mid-session run)
CHAIN_OP = "addq %%r11, %%r11"


def _zmm(i: int) -> str:
    return f"%%zmm{i}"


def fp32_kernel(name: str, mr: int, nv: int, unroll: int, embedded: bool, chain: int = 0,
                prefetch: int = 0) -> str:
    """C text of ``void name(const float *a, const float *b, float *c, long kc, long reps)``:
    ``reps`` times, ``c[mr, 16 nv] = a-panel[kc, mr]ᵀ · b-panel[kc, 16 nv]`` in zmm accumulators
    (0 ..), B vectors in zmm31 down, the broadcast in the register below them; ``chain`` dependent
    adds on ``%r11`` per step (the clock probe); ``prefetch`` bytes ahead in the A panel."""
    acc = mr * nv
    assert acc + nv + (0 if embedded else 1) <= 32, (mr, nv)
    bcast = 31 - nv
    body = []
    for u in range(unroll):
        oa, ob = 4 * mr * u, 64 * nv * u
        for v in range(nv):
            body.append(f"vmovups {ob + 64 * v}(%%rsi), {_zmm(31 - v)}")
        if prefetch:
            body.append(f"prefetcht0 {prefetch + oa}(%%rdi)")
        for i in range(mr):
            if embedded:
                for v in range(nv):
                    body.append(f"vfmadd231ps {oa + 4 * i}(%%rdi)%{{1to16%}}, {_zmm(31 - v)}, {_zmm(i * nv + v)}")
            else:
                body.append(f"vbroadcastss {oa + 4 * i}(%%rdi), {_zmm(bcast)}")
                for v in range(nv):
                    body.append(f"vfmadd231ps {_zmm(bcast)}, {_zmm(31 - v)}, {_zmm(i * nv + v)}")
            if chain and i < chain:     # spread the chain over the step
                body += [CHAIN_OP] * (chain // mr + (i < chain % mr))
    zero = [f"vpxord {_zmm(r)}, {_zmm(r)}, {_zmm(r)}" for r in range(acc)]
    store = [f"vmovups {_zmm(i * nv + v)}, {64 * (i * nv + v)}(%%rdx)" for i in range(mr) for v in range(nv)]
    lines = zero + ["xorq %%r11, %%r11", "movq %[kc], %%rcx", "1:"] + body + [
        f"addq ${4 * mr * unroll}, %%rdi", f"addq ${64 * nv * unroll}, %%rsi", f"subq ${unroll}, %%rcx",
        "jnz 1b"] + store
    asm = "\n".join(f'        "{ln}\\n\\t"' for ln in lines)
    clobbers = ", ".join(f'"xmm{r}"' for r in range(32))
    return f"""
void {name}(const float *a, const float *b, float *c, long kc, long reps) {{
    for (long r = 0; r < reps; r++) {{
        const float *pa = a, *pb = b;
        __asm__ volatile(
{asm}
        : "+D"(pa), "+S"(pb) : "d"(c), [kc] "r"(kc)
        : "rcx", "r11", "memory", "cc", {clobbers});
    }}
}}
"""


def _loop_asm(name: str, lines: list[str], vregs: int, width: str = "zmm") -> str:
    """``void name(long n)``: ``n`` times ``lines``; the FMA operands (the two top registers)
    set to normal floats and the ``vregs - 2`` accumulators zeroed first (garbage could be
    denormal: microcode assists on Intel)."""
    setup = []
    if vregs:
        setup = [f"vbroadcastss (%[k]), %%{width}{vregs - 2}", f"vbroadcastss 4(%[k]), %%{width}{vregs - 1}"]
        setup += [f"vpxord %%zmm{r}, %%zmm{r}, %%zmm{r}" for r in range(vregs - 2)]
    asm = "\n".join(f'        "{ln}\\n\\t"' for ln in setup + ["movq %[n], %%rcx", "1:"] + lines)
    clobbers = "".join(f', "xmm{r}"' for r in range(vregs))
    return f"""
void {name}(long n) {{
    static const float k[2] = {{0.5f, 1e-6f}};
    __asm__ volatile(
{asm}
        "subq $1, %%rcx\\n\\t"
        "jnz 1b\\n\\t"
        : : [n] "r"(n), [k] "r"(k) : "rcx", "r11", "cc"{clobbers});
}}
"""


def freq_source() -> str:
    """``chain16(n)``: 16 dependent adds a step; ``peak_zmm(n)``: 24 independent zmm FMAs;
    ``peak_ymm(n)``: 12 ymm; ``zmm_clock(n)`` / ``ymm_clock(n)``: 16 FMAs and CHAIN dependent
    adds a step (the chain sets the pace)."""
    chain16 = [CHAIN_OP] * 16
    zmm = [f"vfmadd231ps %%zmm30, %%zmm31, %%zmm{i}" for i in range(24)]
    ymm = [f"vfmadd231ps %%ymm14, %%ymm15, %%ymm{i}" for i in range(12)]
    zclk, yclk = [], []
    for i in range(16):
        zclk.append(f"vfmadd231ps %%zmm30, %%zmm31, %%zmm{i}")
        yclk.append(f"vfmadd231ps %%ymm14, %%ymm15, %%ymm{i % 12}")
        if i < CHAIN:
            zclk.append(CHAIN_OP)
            yclk.append(CHAIN_OP)
    return (_loop_asm("chain16", chain16, 0) + _loop_asm("peak_zmm", zmm, 32)
            + _loop_asm("peak_ymm", ymm, 16, "ymm") + _loop_asm("zmm_clock", zclk, 32)
            + _loop_asm("ymm_clock", yclk, 16, "ymm"))


AMX_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <immintrin.h>

typedef struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tilecfg;

int amx_permit(void) { return (int)syscall(SYS_arch_prctl, 0x1023, 18); }

static void configure(void) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
    _tile_loadconfig(&cfg);
}

/* reps x: C[32, 32] (+)= A[32, kc] . B[kc / 4, 32, 4]; A rows lda bytes apart, the step's A tiles
   a_step bytes further on (64: in place; 2048: packed [kc / 64, 32, 64] with lda 64).
   flags: 1 configure + release per call, 2 interleave loads and tdpbusd, 4 zero C instead of
   loading it; B rows 128 bytes. */
void amx_kernel(const uint8_t *a, long lda, long a_step, const int8_t *b, int32_t *c, long kc,
                long reps, int flags) {
    if (!(flags & 1)) configure();
    for (long r = 0; r < reps; r++) {
        if (flags & 1) configure();
        if (flags & 4) { _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); }
        else {
            _tile_loadd(0, c, 128); _tile_loadd(1, c + 16, 128);
            _tile_loadd(2, c + 512, 128); _tile_loadd(3, c + 528, 128);
        }
        const uint8_t *pa = a;
        const int8_t *pb = b;
        if (flags & 2) {
            for (long k = 0; k < kc; k += 64, pa += a_step, pb += 16 * 128) {
                _tile_loadd(4, pa, lda);
                _tile_loadd(6, pb, 128);
                _tile_dpbusd(0, 4, 6);
                _tile_loadd(7, pb + 64, 128);
                _tile_dpbusd(1, 4, 7);
                _tile_loadd(5, pa + 16 * lda, lda);
                _tile_dpbusd(2, 5, 6);
                _tile_dpbusd(3, 5, 7);
            }
        } else {
            for (long k = 0; k < kc; k += 64, pa += a_step, pb += 16 * 128) {
                _tile_loadd(4, pa, lda);
                _tile_loadd(5, pa + 16 * lda, lda);
                _tile_loadd(6, pb, 128);
                _tile_loadd(7, pb + 64, 128);
                _tile_dpbusd(0, 4, 6);
                _tile_dpbusd(1, 4, 7);
                _tile_dpbusd(2, 5, 6);
                _tile_dpbusd(3, 5, 7);
            }
        }
        _tile_stored(0, c, 128); _tile_stored(1, c + 16, 128);
        _tile_stored(2, c + 512, 128); _tile_stored(3, c + 528, 128);
        if (flags & 1) _tile_release();
    }
    if (!(flags & 1)) _tile_release();
}
"""


def clock_chain(mr: int, nv: int, unroll: int) -> int:
    """Dependent adds per step in a ``_clk`` kernel: 1.25 × the step's FMA-bound cycles (2 FMA
    units), so the chain sets the pace and the kernel's time counts its cycles."""
    return int(1.25 * mr * nv / 2) + 1


def fp32_name(mr, nv, unroll, embedded, suffix=""):
    return f"k{mr}x{16 * nv}_u{unroll}_{'emb' if embedded else 'bc'}{suffix}"


def build(amx: bool, workdir: str):
    """Compile the probe kernels into a shared library; ``(CDLL, march, amx)`` (``amx`` False
    where gcc cannot compile the AMX kernel: the fp32 ones are built without it)."""
    parts = ["#include <stdint.h>\n", freq_source()]
    for mr, nv, u, e in FP32_TILES:
        parts.append(fp32_kernel(fp32_name(mr, nv, u, e), mr, nv, u, e))
        parts.append(fp32_kernel(fp32_name(mr, nv, u, e, "_clk"), mr, nv, u, e, chain=clock_chain(mr, nv, u)))
        parts.append(fp32_kernel(fp32_name(mr, nv, u, e, "_pf"), mr, nv, u, e, prefetch=1024))
    err = ""
    for with_amx in ([True, False] if amx else [False]):
        src = os.path.join(workdir, "probe.c")
        with open(src, "w") as f:
            f.write("\n".join(parts + ([AMX_SOURCE] if with_amx else [])))
        lib = os.path.join(workdir, f"probe{int(with_amx)}.so")
        for march in ("sapphirerapids", "native"):
            flags = ["-O2", f"-march={march}", "-shared", "-fPIC"] + (["-mamx-tile", "-mamx-int8"] if with_amx else [])
            r = subprocess.run(["gcc", *flags, src, "-o", lib], capture_output=True, text=True)
            if r.returncode == 0:
                return ctypes.CDLL(lib), march, with_amx
            err = r.stderr
            print(f"# gcc {' '.join(flags)} failed: {err.strip().splitlines()[-1] if err.strip() else '?'}")
    sys.exit(f"gcc failed to build the probe kernels:\n{err[-3000:]}")


def run_threads(calls):
    """Run each zero-argument call on its own thread; seconds until all are done."""
    if len(calls) == 1:
        t0 = time.perf_counter()
        calls[0]()
        return time.perf_counter() - t0
    barrier = threading.Barrier(len(calls) + 1)

    def worker(fn):
        barrier.wait()
        fn()
    ts = [threading.Thread(target=worker, args=(fn,)) for fn in calls]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def time_rows(rows: dict, rounds: int, target_s: float = 0.08) -> dict:
    """``{name: (make(n) -> [calls], work per unit)}`` → ``{name: median work/s}``, in turns;
    ``n`` units per call, chosen so a round of a row takes about ``target_s``."""
    units = {}
    for name, (make, _) in rows.items():
        n = 1
        while True:
            dt = run_threads(make(n))
            if dt > target_s / 4 or n > 1 << 40:
                break
            n *= 4
        units[name] = max(1, int(n * target_s / max(dt, 1e-9)))
    rates = {k: [] for k in rows}
    for _ in range(rounds):
        for name, (make, work) in rows.items():
            n = units[name]
            calls = make(n)
            rates[name].append(work * n * len(calls) / run_threads(calls))
    return {k: statistics.median(v) for k, v in rates.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--only", default="freq,fp32,amx")
    p.add_argument("--kc", type=int, default=256, help="the fp32 panels' depth (A kc × mr, B kc × nr)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-codegen", action="store_true", help="skip our codegen's kernels")
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    import numpy as np
    import llvmlite.binding as llvm
    from tilecraft.codegen.llvm_features import cpu_features

    only = args.only.split(",")
    amx = "amx" in only and "amx-int8" in cpu_features("llvm")
    with tempfile.TemporaryDirectory() as tmp:
        lib, march, amx = build(amx, tmp)
        print(f"# {llvm.get_host_cpu_name()}, gcc -march={march}, kc {args.kc}, medians of {args.rounds} "
              f"rounds, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        for threads in [int(t) for t in args.threads.split(",")]:
            probe(lib, np, threads, args, only, amx)


def probe(lib, np, threads, args, only, amx):
    kc = args.kc
    rows = {}

    def loop(fn, work):
        f = getattr(lib, fn)
        f.argtypes = [ctypes.c_long]
        return (lambda n: [lambda: f(n)] * threads), work
    rows["FMA peak zmm (24 acc)"] = loop("peak_zmm", 24 * 32)
    rows["FMA peak tilecraft (OpenMP)"] = tilecraft_peak(threads)
    if "freq" in only:
        rows["clock: add chain"] = loop("chain16", 16)
        rows["clock: add chain in zmm FMA loop"] = loop("zmm_clock", CHAIN)
        rows["clock: add chain in ymm FMA loop"] = loop("ymm_clock", CHAIN)
        rows["FMA peak ymm (12 acc)"] = loop("peak_ymm", 12 * 16)
    if "fp32" in only:
        bufs = []
        for t in range(threads):
            # one 2 MB region per thread: A at its start, B 4 KB-aliased (+ 64 KB) or not (+ 64 KB + 2112)
            region = np.zeros(1 << 19, "float32")
            base = (-region.ctypes.data % 4096) // 4
            region[:] = np.random.rand(region.size).astype("float32")
            bufs.append((region, base, np.zeros(32 * 64, "float32")))

        def kern(name, mr, nv, b_off, work=None):
            f = getattr(lib, name)
            f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2

            def make(n):
                return [(lambda r=r, base=base, c=c: f(r.ctypes.data + 4 * base, r.ctypes.data + 4 * (base + b_off),
                                                        c.ctypes.data, kc, n)) for r, base, c in bufs[:threads]]
            return make, work or 2.0 * mr * 16 * nv * kc
        apart = 16384 + 528        # floats: 64 KB + 2112 bytes (neither 4K-aliased nor misaligned)
        for mr, nv, u, e in FP32_TILES:
            rows[fp32_name(mr, nv, u, e)] = kern(fp32_name(mr, nv, u, e), mr, nv, apart)
            rows[fp32_name(mr, nv, u, e, "_clk")] = kern(fp32_name(mr, nv, u, e, "_clk"), mr, nv, apart,
                                                         work=clock_chain(mr, nv, u) * kc)
        for mr, nv, u, e in [(14, 2, 1, False), (12, 2, 4, False), (8, 2, 4, False), (6, 4, 4, False)]:
            name = fp32_name(mr, nv, u, e)
            rows[name + " B 4K-aliased"] = kern(name, mr, nv, 16384)
            rows[name + " B misaligned 32 B"] = kern(name, mr, nv, apart + 8)
            rows[name + " prefetch A 1 KB"] = kern(fp32_name(mr, nv, u, e, "_pf"), mr, nv, apart)
        if not args.no_codegen:
            rows.update(codegen_rows(threads, kc))
    if amx:
        rows.update(amx_rows(lib, np, threads))
    rates = time_rows(rows, args.rounds)
    # the shares: of the faster of the two FMA loops (Python threads calling the asm one; OpenMP
    # threads running tilecraft's, bench/cpu_microkernels.py's: session 22's mid-session run
    # found the asm loop at 2 threads below twice its 1-thread figure)
    peak = max(rates["FMA peak zmm (24 acc)"], rates["FMA peak tilecraft (OpenMP)"])
    print(f"\n## {threads} thread(s), load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name in ("FMA peak zmm (24 acc)", "FMA peak tilecraft (OpenMP)"):
        print(f"  {name:<44}{rates[name] / 1e9:8.1f} GFLOP/s  = {rates[name] / 1e9 / 64 / threads:.2f} GHz "
              f"at 64 FLOP/cycle/core")
    for name, r in rates.items():
        if name.startswith("FMA peak zmm") or name.startswith("FMA peak tilecraft"):
            continue
        if name.startswith("clock"):
            print(f"  {name:<44}{r / 1e9 / threads:8.2f} GHz (per core)")
        elif name.startswith("FMA peak ymm"):
            print(f"  {name:<44}{r / 1e9:8.1f} GFLOP/s  = {r / 1e9 / 32 / threads:.2f} GHz at 32 FLOP/cycle/core")
        elif name.endswith("_clk"):
            print(f"  {name:<44}{r / 1e9 / threads:8.2f} GHz (the kernel's clock: its add chain's pace)")
        elif name.startswith("amx"):
            print(f"  {name:<44}{r / 1e9:8.1f} Gop/s  {r / 1e9 / threads:7.1f} per core")
        else:
            print(f"  {name:<44}{r / 1e9:8.1f} GFLOP/s {100 * r / peak:5.0f}% of the FMA peak")
    sys.stdout.flush()


def tilecraft_peak(threads):
    """bench/cpu_microkernels.py's FMA loop (tilecraft, 16 accumulators, one OpenMP thread per
    core): ``(make, work)``, a unit one call of 1M steps."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ["TILECRAFT_NUM_THREADS"] = str(threads)
    import cpu_microkernels
    fn, flop = cpu_microkernels.fma_peak(threads)

    def make(n):
        def run():
            for _ in range(n):
                fn()
        return [run]
    return make, flop


def codegen_rows(threads, kc):
    """Our codegen's fp32 micro-kernels alone (``bench/cpu_gemm_anatomy.py``'s), one module each,
    with ``threads`` parallel iterations of 512 kernel calls; a unit is one run of the module."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ["TILECRAFT_NUM_THREADS"] = str(threads)
    import cpu_gemm_anatomy
    out = {}
    for mr, nr, unroll in [(14, 32, 1), (12, 32, 2), (8, 32, 4), (6, 64, 2), (8, 48, 2), (28, 16, 1)]:
        try:
            fn, flop, _ = cpu_gemm_anatomy.kernel_alone_fp32(mr, nr, unroll, threads, kc=kc)
        except Exception as e:      # a tile the ISA's register file refuses
            print(f"  (codegen {mr}x{nr}: {type(e).__name__}: {str(e)[:100]})")
            continue

        def make(n, fn=fn):
            def run():
                for _ in range(n):
                    fn()
            return [run]
        out[f"codegen {mr}x{nr} u{unroll}"] = (make, flop)
    return out


def amx_rows(lib, np, threads):
    lib.amx_permit()
    f = lib.amx_kernel
    f.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.c_long, ctypes.c_long, ctypes.c_int]
    out = {}
    bufs = [(np.random.randint(0, 256, 32 * 1024).astype("uint8"),
             np.random.randint(-128, 128, 1024 * 32).astype("int8"), np.zeros(32 * 32, "int32"))
            for _ in range(threads)]
    for kc in (256, 1024):
        for layout, lda, a_step in (("A in place (lda 1024)", 1024, 64), ("A packed", 64, 2048)):
            for flags, what in ((1, "cfg per call"), (0, "cfg once"), (2, "cfg once, interleaved"),
                                (4, "cfg once, C zeroed"), (3, "cfg per call, interleaved")):
                def make(n, lda=lda, a_step=a_step, kc=kc, flags=flags):
                    return [(lambda a=a, b=b, c=c: f(a.ctypes.data, lda, a_step, b.ctypes.data, c.ctypes.data,
                                                     kc, n, flags)) for a, b, c in bufs[:threads]]
                out[f"amx 32x32 kc{kc} {layout}, {what}"] = (make, 2.0 * 32 * 32 * kc)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ["TILECRAFT_NUM_THREADS"] = str(threads)
    import cpu_gemm_anatomy
    # our kernel (cpu_amx), its A in place: LLVM's tile configuration per call, or kept
    for kc, prefetch, keep, panels in ((256, 0, False, False), (256, 0, True, False), (256, 0, True, True),
                                       (1024, 0, False, False), (1024, 0, True, False), (1024, 0, True, True),
                                       (1024, 1, False, False), (1024, 1, True, False), (512, 1, True, False),
                                       (512, 1, True, True)):
        fn, flop, _ = cpu_gemm_anatomy.kernel_alone_int8(32, 32, threads, True, kc=kc, prefetch=prefetch,
                                                         keep_config=keep, a_panels=panels)

        def make(n, fn=fn):
            def run():
                for _ in range(n):
                    fn()
            return [run]
        out[f"amx codegen 32x32 kc{kc} pf{prefetch} " + ("(cfg kept)" if keep else "(cfg per call)")
            + (" A panels" if panels else "")] = (make, flop)
    return out


if __name__ == "__main__":
    main()

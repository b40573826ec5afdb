"""Intrinsic calls in the LLVM backend, as the intrinsic table's ``llvm=`` entries say
(``ir/intrinsics.py``): an overloaded LLVM intrinsic (elementwise on vectors), an inline float32
vector implementation for exp, log and tanh (Cephes' polynomials: LLVM would call libm once per
lane) and erf (fits of our own), a libm call lane by lane (tanh and erf on scalars and other vectors), or inline code for
every dtype (float64 → float32 rounded to odd).

The ``legalize`` pass has run first (``codegen_llvm`` makes sure of it), so what LLVM lacks is
already decomposed (sigmoid, rsqrt, isnan) and no call computes in float16.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir import intrinsics
from ..ir.expr import Call
from .llvm_types import CodegenError, const_literal, intrinsic_suffix, ll_type, splat_literal


# erf's fits (vector_erff): P(z) ~ erf(x) / x with z = x*x on [0, 0.921875]; R(t) ~ erfc(x) *
# exp(x*x) with t = x - 2.5 on [0.921875, 4]; lowest degree first
_ERF_SMALL = (1.1283791659907996, -0.3761263177192768, 0.11283679850172712, -0.02685889424869469,
              0.005200298166786806, -0.0008138171384729979, 8.362152724729273e-05)
_ERF_LARGE = (0.21080631106253261, -0.07434746638749735, 0.024940054422743427, -0.007993548266092448,
              0.002470243815524983, -0.000758068474629925, 0.00017177657608518886, -6.806830986718357e-05,
              4.067250818700766e-05, 1.877341628572573e-05, 7.980463845074378e-06)


class MathCalls:
    """The intrinsic-call methods of :class:`~tilecraft.codegen.llvm.LLVMCodegen` (a mixin)."""

    def e_Call(self, e: Call) -> str:
        row = intrinsics.lookup(e.name)
        if row is None or row.llvm is None:
            raise CodegenError(f"unknown intrinsic {e.name!r} in `{e}`; the LLVM backend knows "
                               f"{', '.join(sorted(r.name for r in intrinsics.TABLE if r.llvm))}")
        return self.math(e.name, [self.expr(a) for a in e.args], e.args[0].dtype, row.llvm)

    def math(self, name: str, args: list, d: str, how=None) -> str:
        """``name(*args)`` on values of dtype ``d``, the way the table's ``llvm=`` entry says
        (``how``; looked up when not given)."""
        how = how or intrinsics.lookup(name).llvm
        if how.inline:
            return getattr(self, how.inline)(*args, d)
        if how.vector_f32 and dt.element_of(d) == "float32" and dt.lanes(d) > 1:
            return getattr(self, how.vector_f32)(args[0], d)
        if how.intrinsic:
            ty = ll_type(d)
            intr = f"{how.intrinsic}.{intrinsic_suffix(d)}"
            self.declare(intr, f"declare {ty} @{intr}({', '.join([ty] * len(args))})")
            fm = self.fm if dt.is_float(d) else ""          # fast-math flags are for float calls only
            return self.op(f"call{fm} {ty} @{intr}({', '.join(f'{ty} {a}' for a in args)})")
        return self.libm(how.libm + ("f" if dt.element_of(d) == "float32" else ""), args, d)

    def vector_expf(self, x: str, d: str) -> str:
        """exp on float32 vectors without a libm call per lane (LLVM would scalarize
        ``llvm.exp.v8f32``): Cephes' expf, x = n*ln2 + r, exp(r) by a degree-7 polynomial, times
        2**n built in the exponent bits (on multiples of 16 lanes where the target has AVX-512F:
        one ``vscalefps`` per 16, which also rounds to inf, subnormals and 0 at the ends, 17 instructions
        a vector where the bits took 21). About 1 ulp; exact 0, inf and NaN at the ends. The
        range reduction and the polynomial's Horner steps are ``llvm.fmuladd`` (one FMA each
        where the target has FMA, a multiply and an add otherwise)."""
        lanes = dt.lanes(d)
        ty, ity = ll_type(d), f"<{lanes} x i32>"

        def c(v):
            return splat_literal(v, d)

        def f(instr, a, b):
            return self.op(f"{instr} {ty} {a}, {b}")

        def fma(a, b, acc):
            return self.fmuladd(a, b, acc, d)
        scalef = lanes % 16 == 0 and self._has_avx512f()
        # with vscalefps, 2**n overflows to inf and underflows to 0 by itself past the clamps
        xc = self.minmax(x, c(89.0 if scalef else 88.72283935546875), d, "min")
        xc = self.minmax(xc, c(-104.0), d, "max")
        n = self.math("floor", [fma(xc, c(1.44269504088896341), c(0.5))], d)
        r = fma(n, c(-0.693359375), xc)
        r = fma(n, c(2.12194440e-4), r)
        p = c(1.9875691500e-4)
        for k in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
            p = fma(p, r, c(k))
        y = f("fadd", fma(p, f("fmul", r, r), r), c(1.0))
        bty = ll_type(f"boolx{lanes}")
        nan = self.op(f"fcmp uno {ty} {x}, {x}")
        if scalef:
            # AVX-512's vscalefps: y * 2**n in one instruction, rounded once (to inf above
            # x = 88.72, to subnormals and 0 below -87.3)
            y = self._scalef(y, n, lanes)
            return self.op(f"select {bty} {nan}, {ty} {x}, {ty} {y}")
        # 2**n as 2**(n//2) * 2**(n - n//2): both factors stay normal for n in [-150, 128]
        i32 = f"int32x{lanes}"
        ni = self.op(f"fptosi {ty} {n} to {ity}")
        halves = (self.op(f"ashr {ity} {ni}, {splat_literal(1, i32)}"),)
        halves += (self.op(f"sub {ity} {ni}, {halves[0]}"),)
        for h in halves:
            biased = self.op(f"add {ity} {h}, {splat_literal(127, i32)}")
            bits = self.op(f"shl {ity} {biased}, {splat_literal(23, i32)}")
            y = f("fmul", y, self.op(f"bitcast {ity} {bits} to {ty}"))
        big = self.op(f"fcmp ogt {ty} {x}, {c(88.72283935546875)}")
        y = self.op(f"select {bty} {big}, {ty} {c(float('inf'))}, {ty} {y}")
        small = self.op(f"fcmp olt {ty} {x}, {c(-103.97)}")
        y = self.op(f"select {bty} {small}, {ty} {c(0.0)}, {ty} {y}")
        return self.op(f"select {bty} {nan}, {ty} {x}, {ty} {y}")

    def _scalef(self, y: str, n: str, lanes: int) -> str:
        """``y * 2**n`` on float32 vectors of a multiple of 16 lanes: ``vscalefps`` on each 16
        (the vectors split and joined again by shuffles, which cost nothing in registers)."""
        intr, t16 = "llvm.x86.avx512.mask.scalef.ps.512", "<16 x float>"
        self.declare(intr, f"declare {t16} @{intr}({t16}, {t16}, {t16}, i16, i32)")

        def call(a, b):
            return self.op(f"call {t16} @{intr}({t16} {a}, {t16} {b}, {t16} zeroinitializer, i16 -1, i32 4)")

        if lanes == 16:
            return call(y, n)
        ty = f"<{lanes} x float>"

        def lanes_of(v, first, count, vty):
            mask = ", ".join(f"i32 {first + j}" for j in range(count))
            return self.op(f"shufflevector {vty} {v}, {vty} undef, <{count} x i32> <{mask}>")

        parts = [call(lanes_of(y, k, 16, ty), lanes_of(n, k, 16, ty)) for k in range(0, lanes, 16)]
        width = 16
        while len(parts) > 1:           # join neighbours: 16 + 16 -> 32, ...
            vty = f"<{width} x float>"
            mask = ", ".join(f"i32 {j}" for j in range(2 * width))
            parts = [self.op(f"shufflevector {vty} {a}, {vty} {b}, <{2 * width} x i32> <{mask}>")
                     for a, b in zip(parts[::2], parts[1::2])]
            width *= 2
        return parts[0]

    def _has_avx512f(self) -> bool:
        """Whether the module's target has AVX-512F (asked once per module)."""
        has = getattr(self, "_avx512f", None)
        if has is None:
            from .llvm_features import cpu_features
            has = self._avx512f = "avx512f" in cpu_features(self.opts.target)
        return has

    def fmuladd(self, a: str, b: str, acc: str, d: str) -> str:
        """``a * b + acc`` on values of dtype ``d`` with ``llvm.fmuladd`` (fused where the target
        has FMA)."""
        ty = ll_type(d)
        intr = f"llvm.fmuladd.{intrinsic_suffix(d)}"
        self.declare(intr, f"declare {ty} @{intr}({ty}, {ty}, {ty})")
        return self.op(f"call {ty} @{intr}({ty} {a}, {ty} {b}, {ty} {acc})")

    def vector_logf(self, x: str, d: str) -> str:
        """log on float32 vectors (Cephes' logf): x = m * 2**e with m in [sqrt(1/2), sqrt(2)) read
        off the bits (subnormals scaled by 2**23 first), log(m) by a degree-8 polynomial in m - 1,
        plus e * ln2 in two parts. About 1 ulp; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf."""
        lanes = dt.lanes(d)
        ty, bty = ll_type(d), ll_type(f"boolx{lanes}")
        i32 = f"int32x{lanes}"
        ity = ll_type(i32)

        def c(v):
            return splat_literal(v, d)

        def ci(v):
            return splat_literal(v, i32)

        def f(instr, a, b):
            return self.op(f"{instr} {ty} {a}, {b}")

        def sel(cond, a, b, t=ty):
            return self.op(f"select {bty} {cond}, {t} {a}, {t} {b}")
        tiny = self.op(f"fcmp olt {ty} {x}, {c(1.1754943508222875e-38)}")
        xs = sel(tiny, f("fmul", x, c(8388608.0)), x)
        bits = self.op(f"bitcast {ty} {xs} to {ity}")
        e = self.op(f"sub {ity} {self.op(f'lshr {ity} {bits}, {ci(23)}')}, {ci(126)}")
        e = sel(tiny, self.op(f"sub {ity} {e}, {ci(23)}"), e, ity)
        mbits = self.op(f"or {ity} {self.op(f'and {ity} {bits}, {ci(0x007FFFFF)}')}, {ci(0x3F000000)}")
        m = self.op(f"bitcast {ity} {mbits} to {ty}")              # in [0.5, 1)
        low = self.op(f"fcmp olt {ty} {m}, {c(0.707106781186547524)}")
        e = sel(low, self.op(f"sub {ity} {e}, {ci(1)}"), e, ity)
        m = sel(low, f("fsub", f("fadd", m, m), c(1.0)), f("fsub", m, c(1.0)))
        fe = self.op(f"sitofp {ity} {e} to {ty}")
        z = f("fmul", m, m)
        p = c(7.0376836292e-2)
        for k in (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                  -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1):
            p = f("fadd", f("fmul", p, m), c(k))
        y = f("fmul", f("fmul", p, m), z)
        y = f("fadd", y, f("fmul", fe, c(-2.12194440e-4)))
        y = f("fsub", y, f("fmul", z, c(0.5)))
        y = f("fadd", f("fadd", m, y), f("fmul", fe, c(0.693359375)))
        # the ends: inf stays, 0 gives -inf, negatives and NaN give NaN
        y = sel(self.op(f"fcmp oeq {ty} {x}, {c(float('inf'))}"), x, y)
        y = sel(self.op(f"fcmp oeq {ty} {x}, {c(0.0)}"), c(float("-inf")), y)
        return sel(self.op(f"fcmp ult {ty} {x}, {c(0.0)}"), c(float("nan")), y)

    def vector_tanhf(self, x: str, d: str) -> str:
        """tanh on float32 vectors (Cephes' tanhf): an odd polynomial below |x| = 0.625, else
        ``1 - 2 / (exp(2|x|) + 1)`` with x's sign."""
        lanes = dt.lanes(d)
        ty, bty = ll_type(d), ll_type(f"boolx{lanes}")

        def c(v):
            return splat_literal(v, d)

        def f(instr, a, b):
            return self.op(f"{instr} {ty} {a}, {b}")
        z = f("fmul", x, x)
        p = c(-5.70498872745e-3)
        for k in (2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1):
            p = f("fadd", f("fmul", p, z), c(k))
        small = f("fadd", f("fmul", f("fmul", p, z), x), x)
        ax = self.math("fabs", [x], d)
        e2 = self.vector_expf(f("fmul", ax, c(2.0)), d)
        big = f("fsub", c(1.0), f("fdiv", c(2.0), f("fadd", e2, c(1.0))))
        neg = self.op(f"fcmp olt {ty} {x}, {c(0.0)}")
        big = self.op(f"select {bty} {neg}, {ty} {self.op(f'fneg {ty} {big}')}, {ty} {big}")
        is_big = self.op(f"fcmp ogt {ty} {ax}, {c(0.625)}")
        return self.op(f"select {bty} {is_big}, {ty} {big}, {ty} {small}")

    def vector_erff(self, x: str, d: str) -> str:
        """erf on float32 vectors (LLVM would call libm's erff once per lane): below |x| =
        0.921875, ``x * P(x*x)`` (degree 6; the leading coefficient in two parts so that the
        last step is one FMA); up to 4, ``1 - exp(-x*x) * R(|x| - 2.5)`` (degree 10: R is
        ``erfc(x) * exp(x*x)``, smooth) with x's sign; beyond, ±1 (erf(3.92) rounds to 1).
        Weighted least-squares fits in float64 (relative error below; absolute, scaled by
        exp(-x*x), above); within 1 ulp on [-4, 4] with FMA. NaN stays NaN."""
        lanes = dt.lanes(d)
        ty, bty = ll_type(d), ll_type(f"boolx{lanes}")

        def c(v):
            return splat_literal(v, d)

        def horner(coeffs, t):
            acc = c(coeffs[-1])
            for k in coeffs[-2::-1]:
                acc = self.fmuladd(acc, t, c(k), d)
            return acc
        lead = float(np.float32(_ERF_SMALL[0]))
        z = self.op(f"fmul {ty} {x}, {x}")
        q = horner([_ERF_SMALL[0] - lead] + list(_ERF_SMALL[1:]), z)
        small = self.fmuladd(x, c(lead), self.op(f"fmul {ty} {x}, {q}"), d)
        ax = self.math("fabs", [x], d)
        r = horner(_ERF_LARGE, self.op(f"fsub {ty} {ax}, {c(2.5)}"))
        e = self.vector_expf(self.op(f"fneg {ty} {z}"), d)
        big = self.fmuladd(self.op(f"fneg {ty} {e}"), r, c(1.0), d)
        one = self.op(f"fcmp oge {ty} {ax}, {c(4.0)}")
        big = self.op(f"select {bty} {one}, {ty} {c(1.0)}, {ty} {big}")
        neg = self.op(f"fcmp olt {ty} {x}, {c(0.0)}")
        big = self.op(f"select {bty} {neg}, {ty} {self.op(f'fneg {ty} {big}')}, {ty} {big}")
        is_small = self.op(f"fcmp olt {ty} {ax}, {c(0.921875)}")
        return self.op(f"select {bty} {is_small}, {ty} {small}, {ty} {big}")

    def libm(self, fname: str, args: list, d: str) -> str:
        """Call a scalar libm function, lane by lane for vectors."""
        sty = ll_type(dt.element_of(d))
        self.declare(fname, f"declare {sty} @{fname}({', '.join([sty] * len(args))}) nounwind")
        lanes = dt.lanes(d)
        if lanes == 1:
            return self.op(f"call {sty} @{fname}({', '.join(f'{sty} {a}' for a in args)})")
        vty = ll_type(d)
        out = "poison"
        for i in range(lanes):
            xs = [self.op(f"extractelement {vty} {a}, i64 {i}") for a in args]
            r = self.op(f"call {sty} @{fname}({', '.join(f'{sty} {x}' for x in xs)})")
            out = self.op(f"insertelement {vty} {out}, {sty} {r}, i64 {i}")
        return out

    def float64_to_float32_odd(self, v: str, src: str) -> str:
        """float64 -> float32 rounded to odd, so that a second rounding to float16 is exact.

        Rounding twice to nearest (double -> float -> half) can be off by one half ulp; rounding the
        first step to odd keeps a sticky bit, and float32's 13 extra bits make the second rounding
        the correctly rounded one. An inexact nearest result with an even mantissa is replaced by
        its odd neighbour on the other side of the exact value (one integer step in its bits).
        """
        n = dt.lanes(src)
        i32d = dt.with_lanes("int32", n)
        f32, f64, i32, i1 = (ll_type(dt.with_lanes("float32", n)), ll_type(src), ll_type(i32d),
                             ll_type(dt.with_lanes("bool", n)))

        def ci(v: int) -> str:
            return splat_literal(v, i32d) if n > 1 else const_literal(v, i32d)

        near = self.op(f"fptrunc {f64} {v} to {f32}")
        back = self.op(f"fpext {f32} {near} to {f64}")
        inexact = self.op(f"fcmp one {f64} {back}, {v}")
        bits = self.op(f"bitcast {f32} {near} to {i32}")
        low = self.op(f"and {i32} {bits}, {ci(1)}")
        even = self.op(f"icmp eq {i32} {low}, {ci(0)}")
        fix = self.op(f"and {i1} {inexact}, {even}")
        # bits grow with magnitude: step down when the nearest value overshot |v|, else up
        abs_back = self.math("fabs", [back], src)
        abs_v = self.math("fabs", [v], src)
        over = self.op(f"fcmp ogt {f64} {abs_back}, {abs_v}")
        step = self.op(f"select {i1} {over}, {i32} {ci(-1)}, {i32} {ci(1)}")
        moved = self.op(f"add {i32} {bits}, {step}")
        odd = self.op(f"select {i1} {fix}, {i32} {moved}, {i32} {bits}")
        return self.op(f"bitcast {i32} {odd} to {f32}")

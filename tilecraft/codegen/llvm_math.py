"""Math calls in the LLVM backend: ``exp``, ``log``, ``tanh``, ``sigmoid``, ... as LLVM intrinsics,
inline float32 vector code, or libm.

A call is one LLVM intrinsic where LLVM has one (``_MATH_INTRINSICS``, elementwise on vectors),
except on float32 vectors for exp, log and tanh, which are computed inline with Cephes'
polynomials (LLVM would call libm once per lane); ``rsqrt`` and ``sigmoid`` are composed of other
calls; ``tanh`` and ``erf`` on scalars (and other vectors) call libm, lane by lane. float16 is
computed in float32 and rounded once, as numpy does.
"""
from __future__ import annotations

from ..ir import dtype as dt
from ..ir.expr import Call
from .llvm_types import CodegenError, const_literal, intrinsic_suffix, ll_type, splat_literal

# math calls that are one LLVM intrinsic, elementwise on vectors
_MATH_INTRINSICS = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
    "log10": "llvm.log10", "sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor",
    "ceil": "llvm.ceil", "round": "llvm.roundeven", "trunc": "llvm.trunc", "sin": "llvm.sin",
    "cos": "llvm.cos", "pow": "llvm.pow", "fma": "llvm.fma", "nearbyint": "llvm.roundeven",
}
# float32 vector math computed inline (LLVM would call libm once per lane): name -> method
_VECTOR_F32 = {"exp": "vector_expf", "tanh": "vector_tanhf", "log": "vector_logf"}
# math calls only libm has: name for float64; float32 appends "f"
_LIBM = {"tanh": "tanh", "erf": "erf"}


class MathCalls:
    """The math-call methods of :class:`~tilecraft.codegen.llvm.LLVMCodegen` (a mixin)."""

    def e_Call(self, e: Call) -> str:
        name = e.name
        if name == "likely":
            return self.expr(e.args[0])
        d = e.dtype
        if name in ("abs", "fabs") and not dt.is_float(d):
            ty = ll_type(d)
            intr = f"llvm.abs.{intrinsic_suffix(d)}"
            self.declare(intr, f"declare {ty} @{intr}({ty}, i1)")
            return self.op(f"call {ty} @{intr}({ty} {self.expr(e.args[0])}, i1 false)")
        if name == "abs":
            name = "fabs"
        if not dt.is_float(d):
            raise CodegenError(f"the math function {name!r} needs float arguments, got {d}: `{e}`")
        args = [self.expr(a) for a in e.args]
        if dt.element_of(d) == "float16":
            # compute in float32 and round once, as numpy does
            wide = dt.with_lanes("float32", dt.lanes(d))
            args = [self.convert(a, d, wide) for a in args]
            return self.convert(self.math(name, args, wide, e), wide, d)
        return self.math(name, args, d, e)

    def math(self, name: str, args: list, d: str, e) -> str:
        ty = ll_type(d)
        if dt.element_of(d) == "float32" and dt.lanes(d) > 1 and name in _VECTOR_F32:
            return getattr(self, _VECTOR_F32[name])(args[0], d)
        if name in _MATH_INTRINSICS:
            intr = f"{_MATH_INTRINSICS[name]}.{intrinsic_suffix(d)}"
            self.declare(intr, f"declare {ty} @{intr}({', '.join([ty] * len(args))})")
            return self.op(f"call{self.fm} {ty} @{intr}({', '.join(f'{ty} {a}' for a in args)})")
        one = splat_literal(1.0, d) if dt.lanes(d) > 1 else const_literal(1.0, d)
        if name == "rsqrt":
            s = self.math("sqrt", args, d, e)
            return self.op(f"fdiv{self.fm} {ty} {one}, {s}")
        if name == "sigmoid":
            neg = self.op(f"fneg {ty} {args[0]}")
            ex = self.math("exp", [neg], d, e)
            den = self.op(f"fadd{self.fm} {ty} {one}, {ex}")
            return self.op(f"fdiv{self.fm} {ty} {one}, {den}")
        if name in _LIBM:
            return self.libm(_LIBM[name] + ("f" if dt.element_of(d) == "float32" else ""), args, d)
        raise CodegenError(f"unknown intrinsic {e.name!r} in `{e}`; the LLVM backend knows "
                           f"{', '.join(sorted(set(_MATH_INTRINSICS) | set(_LIBM) | {'rsqrt', 'sigmoid', 'abs', 'likely'}))}")

    def vector_expf(self, x: str, d: str) -> str:
        """exp on float32 vectors without a libm call per lane (LLVM would scalarize
        ``llvm.exp.v8f32``): Cephes' expf, x = n*ln2 + r, exp(r) by a degree-7 polynomial, times
        2**n built in the exponent bits. About 1 ulp; exact 0, inf and NaN at the ends."""
        lanes = dt.lanes(d)
        ty, ity = ll_type(d), f"<{lanes} x i32>"

        def c(v):
            return splat_literal(v, d)

        def f(instr, a, b):
            return self.op(f"{instr} {ty} {a}, {b}")
        xc = self.minmax(x, c(88.72283935546875), d, "min")
        xc = self.minmax(xc, c(-104.0), d, "max")
        n = self.math("floor", [f("fadd", f("fmul", xc, c(1.44269504088896341)), c(0.5))], d, None)
        r = f("fsub", xc, f("fmul", n, c(0.693359375)))
        r = f("fsub", r, f("fmul", n, c(-2.12194440e-4)))
        p = c(1.9875691500e-4)
        for k in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
            p = f("fadd", f("fmul", p, r), c(k))
        y = f("fadd", f("fadd", f("fmul", p, f("fmul", r, r)), r), c(1.0))
        # 2**n as 2**(n//2) * 2**(n - n//2): both factors stay normal for n in [-150, 128]
        i32 = f"int32x{lanes}"
        ni = self.op(f"fptosi {ty} {n} to {ity}")
        halves = (self.op(f"ashr {ity} {ni}, {splat_literal(1, i32)}"),)
        halves += (self.op(f"sub {ity} {ni}, {halves[0]}"),)
        for h in halves:
            biased = self.op(f"add {ity} {h}, {splat_literal(127, i32)}")
            bits = self.op(f"shl {ity} {biased}, {splat_literal(23, i32)}")
            y = f("fmul", y, self.op(f"bitcast {ity} {bits} to {ty}"))
        bty = ll_type(f"boolx{lanes}")
        big = self.op(f"fcmp ogt {ty} {x}, {c(88.72283935546875)}")
        y = self.op(f"select {bty} {big}, {ty} {c(float('inf'))}, {ty} {y}")
        small = self.op(f"fcmp olt {ty} {x}, {c(-103.97)}")
        y = self.op(f"select {bty} {small}, {ty} {c(0.0)}, {ty} {y}")
        nan = self.op(f"fcmp uno {ty} {x}, {x}")
        return self.op(f"select {bty} {nan}, {ty} {x}, {ty} {y}")

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
        ax = self.math("fabs", [x], d, None)
        e2 = self.vector_expf(f("fmul", ax, c(2.0)), d)
        big = f("fsub", c(1.0), f("fdiv", c(2.0), f("fadd", e2, c(1.0))))
        neg = self.op(f"fcmp olt {ty} {x}, {c(0.0)}")
        big = self.op(f"select {bty} {neg}, {ty} {self.op(f'fneg {ty} {big}')}, {ty} {big}")
        is_big = self.op(f"fcmp ogt {ty} {ax}, {c(0.625)}")
        return self.op(f"select {bty} {is_big}, {ty} {big}, {ty} {small}")

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

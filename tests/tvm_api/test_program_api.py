"""TVM's program and module API: ``lower`` → IRModule (``mod["main"]``), ``build(mod, name=)``,
``Module.save`` of an object file + ``contrib.cc.create_shared`` + ``load_module``; each checked by
running what comes out on fresh inputs against numpy, and each error message once."""
import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te
from tilecraft.contrib import cc
from tilecraft.ir import GlobalVar, IRModule, PrimFunc


def _vadd():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] * 2 + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(xi)
    return s, [A, B, C]


def _check(f, rng, n=29):
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.full(n, np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)


def test_lower_returns_a_module_of_its_function(rng):
    s, args = _vadd()
    mod = tvm.lower(s, args)
    assert isinstance(mod, IRModule) and "main" in mod and "other" not in mod
    main = mod["main"]
    assert type(main) is PrimFunc and main.body is mod.body and main.params == mod.params
    assert [gv.name_hint for gv in mod.get_global_vars()] == ["main"]
    assert list(mod.functions) == [GlobalVar("main")] and mod[GlobalVar("main")].name == "main"
    named = tvm.lower(s, args, name="myadd")
    assert "myadd" in named and named["myadd"].name == "myadd"
    with pytest.raises(KeyError, match=r"the module has no function 'main'; it has: 'myadd'"):
        named["main"]
    f = tvm.build(mod, target="llvm")         # "main" is a C program's: build's default name instead
    assert f.entry_name == "default_function"
    _check(f, rng)


def test_build_of_a_lowered_function_honours_name(rng):
    s, args = _vadd()
    mod = tvm.lower(s, args, name="first")
    assert tvm.build(mod, target="llvm").entry_name == "first"           # its own name by default
    f = tvm.build(mod, target="llvm", name="myadd")
    assert f.entry_name == "myadd" and f.function_names == ["myadd"]
    _check(f, rng)
    g = tvm.build(mod["first"], target="llvm", name="second")
    assert g.entry_name == "second"
    _check(g["second"], rng)


def test_save_object_create_shared_load(tmp_path, rng):
    s, args = _vadd()
    f = tvm.build(s, args, target="llvm", name="myadd")
    obj = f.save(str(tmp_path / "myadd.o"))
    lib = cc.create_shared(str(tmp_path / "myadd.so"), [obj])
    g = tvm.runtime.load_module(lib)
    assert g.entry_name == "myadd"
    _check(g, rng)
    f.save(str(tmp_path / "myadd.ll"))
    assert "define" in (tmp_path / "myadd.ll").read_text()


def test_save_object_of_a_parallel_module_links_libgomp(tmp_path, rng):
    s, args = _vadd()
    s[args[2]].parallel(s[args[2]].leaf_iter_vars[0])
    f = tvm.build(s, args, target="llvm", name="padd")
    g = tvm.runtime.load_module(cc.create_shared(str(tmp_path / "padd.so"), [f.save(str(tmp_path / "padd.o"))]))
    _check(g, rng, n=1000)


def test_save_errors(tmp_path):
    s, args = _vadd()
    f = tvm.build(s, args, target="llvm")
    with pytest.raises(ValueError, match=r"a CPU module saves as an object file \('.o'\), LLVM IR \('.ll'\) or "
                                         r"assembly \('.s'\), not 'so'; export_library writes a shared library"):
        f.save(str(tmp_path / "x.so"))
    with pytest.raises(FileNotFoundError, match="save: the folder .* does not exist"):
        f.save(str(tmp_path / "nowhere" / "x.o"))
    lib = f.export_library(str(tmp_path / "x.so"))
    with pytest.raises(ValueError, match="this module was loaded from a library; it has no code to save"):
        tvm.runtime.load_module(lib).save(str(tmp_path / "y.o"))


def test_create_shared_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="create_shared: no such object file"):
        cc.create_shared(str(tmp_path / "x.so"), [str(tmp_path / "missing.o")])
    (tmp_path / "junk.o").write_text("not an object")
    with pytest.raises(RuntimeError, match=r"create_shared: linking '.*x.so' failed"):
        cc.create_shared(str(tmp_path / "x.so"), [str(tmp_path / "junk.o")])

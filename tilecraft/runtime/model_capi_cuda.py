"""The C API of an exported CUDA model: ``lib.export_library("libnet.so")`` of a
``relay.build(mod, target="cuda")`` (a path ending in ``.so``; other names give the archive that
``tilecraft.runtime.load_module`` reads) writes a shared library holding the kernels' cubin, the
weights and a small C runtime generated for the graph over the CUDA driver API, and its header
(``net.h``). The functions are those of a CPU model (``runtime/model_capi.py``), host pointers in
and out::

    #include "net.h"
    tilecraft_model *m = tilecraft_model_create();     /* GPU 0; NULL: see tilecraft_model_error() */
    tilecraft_model_set_input(m, tilecraft_model_input_index("data"), x, nbytes);  /* host -> GPU */
    tilecraft_model_run(m);                             /* every kernel, in order (asynchronous) */
    tilecraft_model_get_output(m, 0, y, y_nbytes);      /* waits, GPU -> host */
    tilecraft_model_free(m);
    /* gcc main.c -I. -L. -lnet -Wl,-rpath,$PWD -o main      (no -lcuda: see below) */

``create`` loads the CUDA driver (``libcuda.so.1``, opened with ``dlopen``: a machine without the
driver gets a message saying so, not a loader error at program start), retains the GPU's primary
context, checks that the GPU is the architecture the cubin was compiled for, loads the cubin
(``cuModuleLoadData``), allocates one device arena laid out by the graph's memory plan (the
planned storages, each input, the kernels' workspaces; 256-byte aligned) and one buffer for all
the weights, uploaded once from the library. ``run`` launches the kernels with the launch table
generated here (``cuLaunchKernel``: each kernel's grid, block, dynamic shared memory and argument
slots) on the context's default stream; ``get_output`` copies back (and so waits). A failing call
returns non-zero after writing a message that ``tilecraft_model_error()`` returns (thread-local):
the driver call, its error name, the kernel and graph node. Each model object has its own
device memory; calls on one object must not overlap.

The library is compiled by ``$CC`` (gcc) against the CUDA toolkit's ``cuda.h`` (found under
``CUDA_HOME``, ``CUDA_PATH``, ``/usr/local/cuda`` or ``/usr/local/cuda-*``) and links only
``-ldl``. Kernels that take scalar arguments or loop on the host (a ``te.scan``) are refused:
a model's kernels take buffers of static shapes.

>>> lib.export_library("libnet.so")          # doctest: +SKIP   (writes libnet.so and net.h)
"""
from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess

import numpy as np

from .model_capi import ModelAPIError, _str, api_prefix, c_table, header_section, io_tables, query_functions

ALIGN = 256          # device allocations are 256-byte aligned; slots in the arena too

# the driver functions the generated runtime calls, looked up with dlsym by their versioned
# names (cuda.h maps cuMemAlloc to cuMemAlloc_v2, ...)
DRIVER_FUNCTIONS = ("cuInit", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetAttribute",
                    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease", "cuCtxPushCurrent",
                    "cuCtxPopCurrent", "cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction",
                    "cuFuncSetAttribute", "cuMemAlloc", "cuMemFree", "cuMemcpyHtoD", "cuMemcpyDtoH",
                    "cuLaunchKernel", "cuGetErrorName")


def cuda_include_dir() -> str | None:
    """The folder holding the CUDA toolkit's ``cuda.h``, or None."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for root in roots:
        if root and os.path.isfile(os.path.join(root, "include", "cuda.h")):
            return os.path.join(root, "include")
    return None


def _up(n: int) -> int:
    return -(-int(n) // ALIGN) * ALIGN


def _nbytes(node: dict) -> int:
    return int(np.prod(node["shape"], dtype=np.int64)) * np.dtype(node["dtype"]).itemsize


def launch_table(graph: dict, plans: dict) -> tuple:
    """The arena layout and the launches of ``graph`` whose functions have the launch ``plans``
    (name -> ``FunctionPlan``). Returns ``(slots, arena_bytes, launches)``: ``slots`` maps a graph
    node (an int) or a workspace (``("ws", func, j)``) to its byte offset in the arena (inputs,
    planned storages, unplanned kernel outputs, workspaces); each launch is ``(func, kernel name,
    grid, block, dynamic shared bytes, [argument slot keys], graph node)``, a weight's slot key
    being ``("param", node)``.

    >>> slots, size, launches = launch_table(lib.graph, lib.module.plans)     # doctest: +SKIP
    """
    from .signature import eval_dim
    nodes = graph["nodes"]
    total, slots = 0, {}
    storage_at = []
    for size in graph.get("storage", ()):
        storage_at.append(total)
        total += _up(size)
    for i, n in enumerate(nodes):
        if n["op"] == "input" or (n["op"] == "kernel" and "storage_id" not in n):
            slots[i] = total
            total += _up(_nbytes(n))
        elif n["op"] == "kernel":
            slots[i] = storage_at[n["storage_id"]]
    launches = []
    for i, n in enumerate(nodes):
        if n["op"] != "kernel":
            continue
        plan = plans[n["func"]]
        if plan.program:
            raise ModelAPIError(f"export_library: function {n['func']} (node {i}) loops on the host (a te.scan); "
                                "the C API of a CUDA model launches each kernel once")
        args = [a if nodes[a]["op"] != "param" else ("param", a) for a in list(n["inputs"]) + [i]]
        for j, (wname, wdtype, size) in enumerate(plan.workspace):
            if ("ws", n["func"], j) not in slots:
                slots[("ws", n["func"], j)] = total
                total += _up(eval_dim(size, {}) * np.dtype(wdtype).itemsize)
        for k in plan.kernels:
            bad = sorted({p[0] for p in k.params if p[0] not in ("arg", "ws")})
            if bad or set(k.types) - {"P"}:
                what = {"loop": "a host loop's value", "tmap": "tensor maps (TMA)"}
                kinds = ", ".join(what.get(b, f"'{b}' parameters") for b in bad) or "scalar arguments"
                raise ModelAPIError(f"export_library: kernel {k.name} of {n['func']} (node {i}) takes {kinds} "
                                    f"({k.types}); the C API of a CUDA model passes device buffers only")
            grid = tuple(int(eval_dim(g, {})) for g in k.grid) + (1,) * (3 - len(k.grid))
            if min(grid) <= 0:
                continue                      # nothing to do (an empty output)
            block = tuple(k.block) + (1,) * (3 - len(k.block))
            keys = [args[p[1]] if p[0] == "arg" else ("ws", n["func"], p[1]) for p in k.params]
            launches.append((n["func"], k.name, grid, block, k.dynamic_shared_bytes, keys, i))
    return slots, total, launches


def model_cuda_c_source(graph: dict, plans: dict, params_table: list, arch: str, image_is_ptx: bool = False) -> str:
    """C source of the CUDA model API for ``graph`` (see the module docstring); the cubin is the
    symbol ``<prefix>_cubin`` and the weights ``<prefix>_params`` (at the ``params_table``
    offsets), both linked in from the library's data."""
    p = api_prefix(graph)
    nodes = graph["nodes"]
    offsets = {t["name"]: t["offset"] for t in params_table}
    inputs = [i for i, n in enumerate(nodes) if n["op"] == "input"]
    outputs = list(graph["outputs"])
    slots, arena, launches = launch_table(graph, plans)
    kernels = sorted({launch[1] for launch in launches})
    kidx = {k: j for j, k in enumerate(kernels)}
    # one device address per graph node (inputs, weights, kernel outputs) then per workspace
    ws_keys = sorted((k for k in slots if isinstance(k, tuple)), key=str)
    slot_of = {i: i for i in range(len(nodes))}
    slot_of.update({k: len(nodes) + j for j, k in enumerate(ws_keys)})
    n_slots = len(nodes) + len(ws_keys)
    flat, rows = [], []
    for func, name, grid, block, smem, keys, node in launches:
        rows.append(f"    {{{kidx[name]}, {{{', '.join(map(str, grid))}}}, {{{', '.join(map(str, block))}}}, {smem}, "
                    f"{len(flat)}, {len(keys)}, {node}}},  /* {name} */")
        flat += [slot_of[k[1] if isinstance(k, tuple) and k[0] == "param" else k] for k in keys]
    major, minor = _arch_numbers(arch)

    max_args = max([len(launch[5]) for launch in launches] + [1])
    src = ["/* Generated by tilecraft: the C API of one CUDA model (see tilecraft/runtime/model_capi_cuda.py). */",
           "#include <dlfcn.h>", "#include <pthread.h>", "#include <stdint.h>", "#include <stdio.h>",
           "#include <stdlib.h>", "#include <string.h>", "#include <cuda.h>", "",
           f"extern const char {p}_cubin[];", f"extern const char {p}_params[];", "",
           "#define TC_STR2(x) #x", "#define TC_STR(x) TC_STR2(x)   /* cuMemAlloc -> \"cuMemAlloc_v2\" */",
           f"#define TC_DRIVER(X) {' '.join(f'X({f})' for f in DRIVER_FUNCTIONS)}",
           "#define TC_FIELD(f) __typeof__(&f) f;",
           "static struct { TC_DRIVER(TC_FIELD) } cu;",
           "static pthread_once_t tc_once = PTHREAD_ONCE_INIT;",
           "static char tc_load_error[400];",
           f"static _Thread_local char {p}_msg[512];",
           f"#define N_IN {len(inputs)}", f"#define N_OUT {len(outputs)}", f"#define N_NODES {len(nodes)}",
           f"#define N_SLOTS {n_slots}", f"#define N_KERNELS {max(1, len(kernels))}",
           f"#define N_LAUNCH {len(launches)}", f"#define MAX_ARGS {max_args}",
           f"#define ARENA_BYTES {max(ALIGN, arena)}", f"#define PARAMS_BYTES {max(1, _params_bytes(params_table))}",
           "",
           "static void tc_load(void) {",
           "    void *h = dlopen(\"libcuda.so.1\", RTLD_NOW | RTLD_LOCAL);",
           "    if (!h) { snprintf(tc_load_error, sizeof tc_load_error, \"the CUDA driver library libcuda.so.1 could not be \"",
           "                       \"loaded (%s): this model needs an NVIDIA GPU and its driver\", dlerror()); return; }",
           "#define TC_SYM(f) if (!(cu.f = (__typeof__(&f))dlsym(h, TC_STR(f)))) { snprintf(tc_load_error, \\",
           "        sizeof tc_load_error, \"the CUDA driver has no %s (a driver older than the CUDA 12 API)\", TC_STR(f)); return; }",
           "    TC_DRIVER(TC_SYM)",
           "}",
           "",
           f"typedef struct {p} {p};",
           f"struct {p} {{ CUcontext ctx; CUdevice dev; CUmodule module; CUfunction fn[N_KERNELS];",
           "             CUdeviceptr arena, weights; CUdeviceptr slot[N_SLOTS]; };",
           "typedef struct { int32_t kernel; unsigned grid[3], block[3], smem; int32_t arg0, nargs, node; } tc_launch;",
           c_table(f"{p}_kernel_name", "char *const", [_str(k) for k in kernels]),
           f"static const tc_launch {p}_launch[{max(1, len(launches))}] = {{",
           *(rows or ["    {0, {0, 0, 0}, {0, 0, 0}, 0, 0, 0, 0},"]), "};",
           c_table(f"{p}_launch_arg", "int32_t", [str(s) for s in flat]),
           c_table(f"{p}_slot_at", "int64_t", [str(slots.get(i, -1)) if nodes[i]["op"] != "param" else "-1"
                                             for i in range(len(nodes))] + [str(slots[k]) for k in ws_keys]),
           c_table(f"{p}_param_at", "int64_t", [str(offsets[n["name"]]) if n["op"] == "param" else "-1" for n in nodes]),
           *io_tables(p, nodes, inputs, outputs),
           f"static int32_t {p}_fail(int32_t rc, const char *what) {{",
           f"    snprintf({p}_msg, sizeof {p}_msg, \"%s\", what); return rc; }}",
           "/* a failed driver call: the message names the call, the driver's error and what it was for */",
           f"static int32_t {p}_cufail(CUresult rc, const char *call, const char *what) {{",
           "    const char *name = NULL;",
           "    if (!cu.cuGetErrorName || cu.cuGetErrorName(rc, &name) != CUDA_SUCCESS) name = \"unknown error\";",
           f"    snprintf({p}_msg, sizeof {p}_msg, \"%s: %s failed (%d: %s)\", what, call, (int)rc, name);",
           "    return (int32_t)rc; }",
           "#define TC_CU(fn, args, what) do { CUresult r_ = cu.fn args; if (r_ != CUDA_SUCCESS) { "
           f"rc = {p}_cufail(r_, #fn, what); goto done; }} }} while (0)",
           *query_functions(p)]
    src += [
        f"void {p}_free({p} *m) {{",
        "    if (!m) return;",
        "    if (m->ctx && cu.cuCtxPushCurrent(m->ctx) == CUDA_SUCCESS) {",
        "        CUcontext old;",
        "        if (m->arena) cu.cuMemFree(m->arena);",
        "        if (m->weights) cu.cuMemFree(m->weights);",
        "        if (m->module) cu.cuModuleUnload(m->module);",
        "        cu.cuCtxPopCurrent(&old);",
        "        cu.cuDevicePrimaryCtxRelease(m->dev);",
        "    }",
        "    free(m); }",
        f"{p} *{p}_create_on_device(int32_t ordinal) {{",
        "    int32_t rc = 0; int pushed = 0; CUcontext old;",
        "    int major = 0, minor = 0, count = 0;",
        "    pthread_once(&tc_once, tc_load);",
        f"    if (tc_load_error[0]) {{ {p}_fail(1, \"create: \"); strncat({p}_msg, tc_load_error, sizeof {p}_msg - 9); return NULL; }}",
        f"    {p} *m = calloc(1, sizeof *m);",
        f"    if (!m) {{ {p}_fail(1, \"create: out of memory\"); return NULL; }}",
        "    TC_CU(cuInit, (0), \"create\");",
        "    TC_CU(cuDeviceGetCount, (&count), \"create\");",
        "    if (ordinal < 0 || ordinal >= count) {",
        f"        snprintf({p}_msg, sizeof {p}_msg, \"create: there is no GPU %d (the machine has %d)\", (int)ordinal, count);",
        "        rc = 1; goto done; }",
        "    TC_CU(cuDeviceGet, (&m->dev, ordinal), \"create\");",
        "    TC_CU(cuDeviceGetAttribute, (&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, m->dev), \"create\");",
        "    TC_CU(cuDeviceGetAttribute, (&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, m->dev), \"create\");",
        (f"    if (major != {major} || minor != {minor}) {{" if not image_is_ptx else
         f"    if (major * 10 + minor < {major * 10 + minor}) {{"),
        f"        snprintf({p}_msg, sizeof {p}_msg, \"create: the kernels were compiled for {arch} but GPU %d is \"",
        "                 \"sm_%d%d: build the model with target='cuda -arch=sm_%d%d'\", (int)ordinal, major, minor, major, minor);",
        "        rc = 1; goto done; }",
        "    TC_CU(cuDevicePrimaryCtxRetain, (&m->ctx, m->dev), \"create\");",
        "    TC_CU(cuCtxPushCurrent, (m->ctx), \"create\"); pushed = 1;",
        f"    TC_CU(cuModuleLoadData, (&m->module, {p}_cubin), \"create: loading the kernels\");",
        "    for (int32_t k = 0; k < N_LAUNCH; k++) {",
        f"        const tc_launch *L = &{p}_launch[k];",
        "        if (m->fn[L->kernel]) continue;",
        f"        TC_CU(cuModuleGetFunction, (&m->fn[L->kernel], m->module, {p}_kernel_name[L->kernel]), \"create\");",
        "    }",
        "    for (int32_t k = 0; k < N_LAUNCH; k++) {     /* above 48 KiB a kernel opts in to its shared memory */",
        f"        const tc_launch *L = &{p}_launch[k];",
        "        if (L->smem > 48 * 1024)",
        "            TC_CU(cuFuncSetAttribute, (m->fn[L->kernel], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)L->smem),",
        "                  \"create: the kernel's shared memory\");",
        "    }",
        "    TC_CU(cuMemAlloc, (&m->arena, ARENA_BYTES), \"create: the intermediate tensors (\" TC_STR(ARENA_BYTES) \" bytes)\");",
        "    TC_CU(cuMemAlloc, (&m->weights, PARAMS_BYTES), \"create: the weights (\" TC_STR(PARAMS_BYTES) \" bytes)\");",
        f"    TC_CU(cuMemcpyHtoD, (m->weights, {p}_params, PARAMS_BYTES), \"create: uploading the weights\");",
        "    for (int32_t s = 0; s < N_SLOTS; s++)",
        f"        m->slot[s] = s < N_NODES && {p}_param_at[s] >= 0 ? m->weights + {p}_param_at[s]",
        f"                   : {p}_slot_at[s] >= 0 ? m->arena + {p}_slot_at[s] : 0;",
        "done:",
        "    if (pushed) cu.cuCtxPopCurrent(&old);",
        f"    if (rc) {{ if (m->ctx && !m->module) {{ cu.cuDevicePrimaryCtxRelease(m->dev); m->ctx = NULL; }} {p}_free(m); return NULL; }}",
        "    return m; }",
        f"{p} *{p}_create(void) {{ return {p}_create_on_device(0); }}",
        f"int32_t {p}_set_input({p} *m, int32_t i, const void *data, int64_t nbytes) {{",
        "    int32_t rc = 0; CUcontext old;",
        f"    if (!m || i < 0 || i >= N_IN) return {p}_fail(1, \"set_input: no such input (or no model)\");",
        f"    if (nbytes != {p}_in_bytes[i]) {{",
        f"        snprintf({p}_msg, sizeof {p}_msg, \"set_input: input '%s' has %lld bytes, got %lld\",",
        f"                 {p}_in_name[i], (long long){p}_in_bytes[i], (long long)nbytes);",
        "        return 1; }",
        f"    if ((rc = cu.cuCtxPushCurrent(m->ctx))) return {p}_cufail(rc, \"cuCtxPushCurrent\", \"set_input\");",
        f"    TC_CU(cuMemcpyHtoD, (m->slot[{p}_in_node[i]], data, (size_t)nbytes), \"set_input\");",
        "done:",
        "    cu.cuCtxPopCurrent(&old); return rc; }",
        f"int32_t {p}_get_output(const {p} *m, int32_t i, void *data, int64_t nbytes) {{",
        "    int32_t rc = 0; CUcontext old;",
        f"    if (!m || i < 0 || i >= N_OUT) return {p}_fail(1, \"get_output: no such output (or no model)\");",
        f"    if (nbytes != {p}_out_bytes[i]) {{",
        f"        snprintf({p}_msg, sizeof {p}_msg, \"get_output: output %d has %lld bytes, got %lld\",",
        f"                 (int)i, (long long){p}_out_bytes[i], (long long)nbytes);",
        "        return 1; }",
        f"    if ((rc = cu.cuCtxPushCurrent(m->ctx))) return {p}_cufail(rc, \"cuCtxPushCurrent\", \"get_output\");",
        f"    TC_CU(cuMemcpyDtoH, (data, m->slot[{p}_out_node[i]], (size_t)nbytes), \"get_output (a kernel of the last run may have failed)\");",
        "done:",
        "    cu.cuCtxPopCurrent(&old); return rc; }",
        f"int32_t {p}_run({p} *m) {{",
        "    int32_t rc = 0; CUcontext old;",
        f"    if (!m) return {p}_fail(1, \"run: no model\");",
        f"    if ((rc = cu.cuCtxPushCurrent(m->ctx))) return {p}_cufail(rc, \"cuCtxPushCurrent\", \"run\");",
        "    for (int32_t k = 0; k < N_LAUNCH; k++) {",
        f"        const tc_launch *L = &{p}_launch[k];",
        "        void *args[MAX_ARGS];",
        f"        for (int32_t a = 0; a < L->nargs; a++) args[a] = &m->slot[{p}_launch_arg[L->arg0 + a]];",
        "        CUresult r = cu.cuLaunchKernel(m->fn[L->kernel], L->grid[0], L->grid[1], L->grid[2], L->block[0],",
        "                                       L->block[1], L->block[2], L->smem, NULL, args, NULL);",
        "        if (r != CUDA_SUCCESS) {",
        f"            char what[200]; snprintf(what, sizeof what, \"run: kernel %s (graph node %d)\", {p}_kernel_name[L->kernel], (int)L->node);",
        f"            rc = {p}_cufail(r, \"cuLaunchKernel\", what); break; }}",
        "    }",
        "    cu.cuCtxPopCurrent(&old); return rc; }", ""]
    return "\n".join(src)


def _params_bytes(table: list) -> int:
    return max((t["offset"] + int(np.prod(t["shape"], dtype=np.int64)) * np.dtype(t["dtype"]).itemsize
                for t in table), default=0)


def _arch_numbers(arch: str) -> tuple:
    digits = arch.removeprefix("sm_").removesuffix("a")
    if not digits.isdigit() or len(digits) < 2:
        raise ModelAPIError(f"export_library: cannot read the GPU architecture {arch!r} of the kernels")
    return int(digits[:-1]), int(digits[-1])


def header_text(graph: dict, guard: str, library_path: str, arch: str) -> str:
    """The library's header: the model API of ``runtime/model_capi.py`` plus ``create_on_device``."""
    from .library import link_flags
    p = api_prefix(graph)
    return "\n".join([
        f"/* Generated by tilecraft: a model compiled for the GPU ({arch}), its kernels, weights and runtime in",
        f" * {os.path.basename(library_path)}. Link a program with it (the CUDA driver, libcuda.so.1, is opened at",
        " * create time; a machine without it gets an error message, not a loader failure):",
        f" *     gcc main.c {link_flags(library_path)} -o main",
        " * Inputs and outputs are host memory; the model copies them to and from the GPU. */",
        f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", "",
        "#ifdef __cplusplus", 'extern "C" {', "#endif",
        *header_section(graph),
        f"{p} *{p}_create_on_device(int32_t ordinal);     /* create on GPU `ordinal` (create: GPU 0) */",
        "", "#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""])


def export_cuda_c_library(graph: dict, module, params: dict, path: str) -> str:
    """Write ``path`` (a shared library: the C API of the model, see the module docstring) and its
    header; returns the absolute path. ``module`` is the model's ``CUDAModule``."""
    import re
    from .graph_executor import pack_params
    from .library import ExportError, check_destination, header_path, library_stem
    from .tempdirs import owned_temp_dir
    path = check_destination(os.fspath(path))
    cc = shlex.split(os.environ.get("CC", "gcc"))
    if shutil.which(cc[0]) is None:
        raise ExportError(f"export_library: the C API of a CUDA model is compiled by a C compiler, but {cc[0]!r} "
                          "was not found; install gcc or set CC (or write the archive: a name ending in .tcuda)")
    include = cuda_include_dir()
    if include is None:
        raise ExportError("export_library: the C API of a CUDA model is compiled against the CUDA toolkit's cuda.h, "
                          "which was not found (CUDA_HOME, CUDA_PATH, /usr/local/cuda, /usr/local/cuda-*)")
    blob, table = pack_params(params)
    is_ptx = getattr(module, "image_kind", "cubin") == "ptx"
    source = model_cuda_c_source(graph, module.plans, table, module.arch, is_ptx)
    p = api_prefix(graph)
    tmp = owned_temp_dir("tilecraft-export-")
    try:
        objs = []
        for symbol, data in ((f"{p}_cubin", module.cubin + (b"\0" if is_ptx else b"")), (f"{p}_params", blob or b"\0")):
            raw, asm, obj = (os.path.join(tmp, symbol + s) for s in (".bin", ".S", ".o"))
            with open(raw, "wb") as f:
                f.write(data)
            with open(asm, "w") as f:
                f.write(f'.section .rodata\n.global {symbol}\n.hidden {symbol}\n.balign 256\n{symbol}:\n'
                        f'.incbin "{raw}"\n.section .note.GNU-stack,"",@progbits\n')
            _run(cc + ["-c", asm, "-o", obj], f"assembling {symbol}", ExportError)
            objs.append(obj)
        src, obj = os.path.join(tmp, "model_api.c"), os.path.join(tmp, "model_api.o")
        with open(src, "w") as f:
            f.write(source)
        _run(cc + ["-c", "-O2", "-fPIC", "-std=gnu11", f"-I{include}", "-o", obj, src],
             f"compiling the C API of {os.path.basename(path)}", ExportError)
        out = os.path.join(tmp, "lib.so")
        _run(cc + ["-shared", "-fPIC", f"-Wl,-soname,{os.path.basename(path)}", "-Wl,-Bsymbolic", "-o", out, obj,
                   *objs, "-ldl", "-lpthread"], f"linking {os.path.basename(path)}", ExportError)
        shutil.move(out, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stem = re.sub(r"\W", "_", library_stem(path)).upper()
    with open(header_path(path), "w") as f:
        f.write(header_text(graph, f"TILECRAFT_{stem}_H", path, module.arch))
    return path


def _run(cmd: list, what: str, error) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise error(f"export_library: {what} failed: {' '.join(shlex.quote(c) for c in cmd)}\n{proc.stderr}")

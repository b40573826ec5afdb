"""The C API of an exported model: ``lib.export_library("libnet.so")`` of a ``relay.build``
links, next to the kernels, the graph and the weights, a small C runtime generated for that
graph, and its header (``libnet.h``) declares it. A C program runs the model without Python::

    #include "libnet.h"
    tilecraft_model *m = tilecraft_model_create();            /* NULL: out of memory */
    int32_t x = tilecraft_model_input_index("data");           /* -1: no such input */
    tilecraft_model_set_input(m, x, data, nbytes);             /* copies; 0 on success */
    tilecraft_model_run(m);                                    /* the kernels in order */
    tilecraft_model_get_output(m, 0, out, out_nbytes);         /* copies output 0 */
    tilecraft_model_free(m);
    /* gcc main.c -I. -L. -lnet -Wl,-rpath,$PWD -o main */

Every function that can fail returns 0 on success, else non-zero after writing a message that
``tilecraft_model_error()`` returns (a size that is not the tensor's, an index past the inputs, a
kernel's status). The weights are the library's read-only data (no file to load, no copy); the
intermediate tensors live in one 64-byte aligned arena laid out by the memory plan; each model
(``create``) has its own arena and inputs, so several may run in different threads. Parallel
kernels use OpenMP (``OMP_NUM_THREADS``, or the library's ``tilecraft_num_threads``).

The names start with ``tilecraft_model`` for a model built with ``mod_name="default"``, else with
the ``mod_name`` (``relay.build(..., mod_name="resnet")``: ``resnet_create``, ``resnet_run``...),
so two models link into one program.

>>> src = model_c_source(graph, params_table, functions)           # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

PARAMS_SYMBOL = "tilecraft_params"


class ModelAPIError(ValueError):
    """The graph cannot be called through the C API (a kernel with scalar arguments)."""


def api_prefix(graph: dict) -> str:
    """``tilecraft_model``, or the model's ``mod_name``."""
    name = graph.get("mod_name", "default")
    return "tilecraft_model" if name == "default" else name


def _nbytes(node: dict) -> int:
    return int(np.prod(node["shape"], dtype=np.int64)) * np.dtype(node["dtype"]).itemsize


def _up64(n: int) -> int:
    return -(-n // 64) * 64


def _str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def c_table(name: str, ctype: str, values: list) -> str:
    """A static C array: ``c_table("x", "int32_t", ["1", "2"])`` is
    ``static const int32_t x[2] = {1, 2};`` (one ``0`` where ``values`` is empty)."""
    return f"static const {ctype} {name}[{max(1, len(values))}] = {{{', '.join(values) or '0'}}};"


def io_tables(p: str, nodes: list, inputs: list, outputs: list) -> list:
    """The C tables the query functions read: each input's and output's graph node, name (inputs),
    dtype, rank, bytes and shape (both model APIs, CPU and CUDA, share them).

    >>> io_tables("m", [dict(name="x", dtype="float32", shape=[2])], [0], [0])[0]
    'static const int32_t m_in_node[1] = {0};'
    """
    def shapes(name, idx):
        rows = [f"static const int64_t {name}_{k}[{max(1, len(nodes[i]['shape']))}] = "
                f"{{{', '.join(str(d) for d in nodes[i]['shape']) or '0'}}};" for k, i in enumerate(idx)]
        return rows + [c_table(name, "int64_t *const", [f"{name}_{k}" for k in range(len(idx))])]
    return [c_table(f"{p}_in_node", "int32_t", [str(i) for i in inputs]),
            c_table(f"{p}_out_node", "int32_t", [str(i) for i in outputs]),
            c_table(f"{p}_in_name", "char *const", [_str(nodes[i]["name"]) for i in inputs]),
            c_table(f"{p}_in_dtype", "char *const", [_str(nodes[i]["dtype"]) for i in inputs]),
            c_table(f"{p}_out_dtype", "char *const", [_str(nodes[i]["dtype"]) for i in outputs]),
            c_table(f"{p}_in_ndim", "int32_t", [str(len(nodes[i]["shape"])) for i in inputs]),
            c_table(f"{p}_out_ndim", "int32_t", [str(len(nodes[i]["shape"])) for i in outputs]),
            c_table(f"{p}_in_bytes", "int64_t", [str(_nbytes(nodes[i])) for i in inputs]),
            c_table(f"{p}_out_bytes", "int64_t", [str(_nbytes(nodes[i])) for i in outputs]),
            *shapes(f"{p}_in_shape", inputs), *shapes(f"{p}_out_shape", outputs), ""]


def query_functions(p: str) -> list:
    """The C query functions of a model API over :func:`io_tables` (``_error``, ``_num_inputs``,
    ``_input_name``, ``_input_index``, ``_input_shape``, ...), shared by the CPU and CUDA APIs.

    >>> query_functions("m")[0]
    'const char *m_error(void) { return m_msg; }'
    """
    src = [f"const char *{p}_error(void) {{ return {p}_msg; }}",
           f"int32_t {p}_num_inputs(void) {{ return N_IN; }}",
           f"int32_t {p}_num_outputs(void) {{ return N_OUT; }}",
           f"const char *{p}_input_name(int32_t i) {{ return i >= 0 && i < N_IN ? {p}_in_name[i] : NULL; }}",
           f"int32_t {p}_input_index(const char *name) {{",
           f"    for (int32_t i = 0; i < N_IN; i++) if (name && strcmp(name, {p}_in_name[i]) == 0) return i;",
           "    return -1; }"]
    for side, n in (("input", "N_IN"), ("output", "N_OUT")):
        short = side[:2] if side == "input" else "out"
        src += [f"int32_t {p}_{side}_ndim(int32_t i) {{ return i >= 0 && i < {n} ? {p}_{short}_ndim[i] : -1; }}",
                f"const int64_t *{p}_{side}_shape(int32_t i) {{ return i >= 0 && i < {n} ? {p}_{short}_shape[i] : NULL; }}",
                f"const char *{p}_{side}_dtype(int32_t i) {{ return i >= 0 && i < {n} ? {p}_{short}_dtype[i] : NULL; }}",
                f"int64_t {p}_{side}_nbytes(int32_t i) {{ return i >= 0 && i < {n} ? {p}_{short}_bytes[i] : -1; }}"]
    return src


def header_section(graph: dict) -> list:
    """The lines of the model API in the library's header (what :func:`model_c_source` defines)."""
    p = api_prefix(graph)
    ins = [n["name"] for n in graph["nodes"] if n["op"] == "input"]
    return ["", f"/* The model ({len(ins)} input{'s' * (len(ins) != 1)}: {', '.join(ins)}; "
                f"{len(graph['outputs'])} output{'s' * (len(graph['outputs']) != 1)}): "
                f"create it, set its inputs, run, read the outputs.",
            f" * Functions returning int32_t give 0 on success, else non-zero after writing a message that",
            f" * {p}_error() returns (thread-local). Sizes are in bytes; tensors are C-contiguous. */",
            f"typedef struct {p} {p};",
            f"{p} *{p}_create(void);                       /* NULL on failure ({p}_error() says why) */",
            f"void {p}_free({p} *m);",
            f"int32_t {p}_num_inputs(void);",
            f"int32_t {p}_num_outputs(void);",
            f"const char *{p}_input_name(int32_t i);         /* NULL past the inputs */",
            f"int32_t {p}_input_index(const char *name);     /* -1 when no input has that name */",
            f"int32_t {p}_input_ndim(int32_t i);",
            f"const int64_t *{p}_input_shape(int32_t i);",
            f"const char *{p}_input_dtype(int32_t i);        /* \"float32\", ... */",
            f"int64_t {p}_input_nbytes(int32_t i);",
            f"int32_t {p}_output_ndim(int32_t i);",
            f"const int64_t *{p}_output_shape(int32_t i);",
            f"const char *{p}_output_dtype(int32_t i);",
            f"int64_t {p}_output_nbytes(int32_t i);",
            f"int32_t {p}_set_input({p} *m, int32_t i, const void *data, int64_t nbytes);",
            f"int32_t {p}_run({p} *m);",
            f"int32_t {p}_get_output(const {p} *m, int32_t i, void *data, int64_t nbytes);",
            f"const char *{p}_error(void);"]


def model_c_source(graph: dict, params_table: list, functions: dict) -> str:
    """C source of the model API for ``graph`` (planned or not), whose weights are at the
    ``params_table`` offsets of ``tilecraft_params`` and whose kernels have the manifest's
    ``functions`` entries (name -> entry)."""
    p = api_prefix(graph)
    nodes = graph["nodes"]
    offsets = {t["name"]: t["offset"] for t in params_table}
    inputs = [i for i, n in enumerate(nodes) if n["op"] == "input"]
    outputs = list(graph["outputs"])
    storage = list(graph.get("storage", ()))
    storage_at, total = [], 0
    for size in storage:
        storage_at.append(total)
        total += _up64(size)
    node_at = {}
    for i, n in enumerate(nodes):
        if n["op"] == "kernel":
            if "storage_id" in n:
                node_at[i] = storage_at[n["storage_id"]]
            else:
                node_at[i] = total
                total += _up64(_nbytes(n))
    kernels = sorted({n["func"] for n in nodes if n["op"] == "kernel"})
    decls = []
    for k in kernels:
        params = functions[k]["params"]
        if any(q["kind"] != "buffer" for q in params):
            raise ModelAPIError(f"export_library: kernel {k} takes scalar arguments; the C API calls kernels "
                                "with buffers only (static shapes)")
        decls.append(f"extern int32_t {k}({', '.join(['void *'] * len(params)) or 'void'});")

    src = ["/* Generated by tilecraft: the C API of one model (see tilecraft/runtime/model_capi.py). */",
           "#include <stdint.h>", "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>", "",
           f"extern const char {PARAMS_SYMBOL}[];" if offsets else "", *decls, "",
           f"typedef struct {p} {p};",
           f"struct {p} {{ char *arena; char *in[{max(1, len(inputs))}]; void *ptr[{len(nodes)}]; }};",
           f"static _Thread_local char {p}_msg[512];",
           f"#define N_IN {len(inputs)}", f"#define N_OUT {len(outputs)}",
           *io_tables(p, nodes, inputs, outputs),
           f"static int32_t {p}_fail(int32_t rc, const char *what) {{",
           f"    snprintf({p}_msg, sizeof {p}_msg, \"%s\", what); return rc; }}",
           *query_functions(p)]
    create = [f"{p} *{p}_create(void) {{",
              f"    {p} *m = calloc(1, sizeof *m);",
              f"    if (!m) {{ {p}_fail(1, \"create: out of memory\"); return NULL; }}",
              f"    m->arena = aligned_alloc(64, {max(64, total)});",
              f"    if (!m->arena) {{ free(m); {p}_fail(1, \"create: out of memory ({total} bytes)\"); return NULL; }}"]
    for k, i in enumerate(inputs):
        create += [f"    m->in[{k}] = aligned_alloc(64, {max(64, _up64(_nbytes(nodes[i])))});",
                   f"    if (!m->in[{k}]) {{ {p}_free(m); {p}_fail(1, \"create: out of memory\"); return NULL; }}",
                   f"    memset(m->in[{k}], 0, {_nbytes(nodes[i])});",
                   f"    m->ptr[{i}] = m->in[{k}];"]
    for i, n in enumerate(nodes):
        if n["op"] == "param":
            create.append(f"    m->ptr[{i}] = (void *)({PARAMS_SYMBOL} + {offsets[n['name']]});")
        elif n["op"] == "kernel":
            create.append(f"    m->ptr[{i}] = m->arena + {node_at[i]};")
    create += ["    return m;", "}"]
    src += create
    src += [f"void {p}_free({p} *m) {{",
            "    if (!m) return;",
            f"    for (int32_t i = 0; i < N_IN; i++) free(m->in[i]);",
            "    free(m->arena); free(m); }",
            f"int32_t {p}_set_input({p} *m, int32_t i, const void *data, int64_t nbytes) {{",
            f"    if (!m || i < 0 || i >= N_IN) return {p}_fail(1, \"set_input: no such input (or no model)\");",
            f"    if (nbytes != {p}_in_bytes[i]) {{",
            f"        snprintf({p}_msg, sizeof {p}_msg, \"set_input: input '%s' has %lld bytes, got %lld\",",
            f"                 {p}_in_name[i], (long long){p}_in_bytes[i], (long long)nbytes);",
            "        return 1; }",
            f"    memcpy(m->in[i], data, (size_t)nbytes); return 0; }}",
            f"int32_t {p}_get_output(const {p} *m, int32_t i, void *data, int64_t nbytes) {{",
            f"    if (!m || i < 0 || i >= N_OUT) return {p}_fail(1, \"get_output: no such output (or no model)\");",
            f"    if (nbytes != {p}_out_bytes[i]) {{",
            f"        snprintf({p}_msg, sizeof {p}_msg, \"get_output: output %d has %lld bytes, got %lld\",",
            f"                 (int)i, (long long){p}_out_bytes[i], (long long)nbytes);",
            "        return 1; }",
            f"    memcpy(data, m->ptr[{p}_out_node[i]], (size_t)nbytes); return 0; }}",
            f"int32_t {p}_run({p} *m) {{",
            f"    if (!m) return {p}_fail(1, \"run: no model\");",
            "    int32_t rc;"]
    for i, n in enumerate(nodes):
        if n["op"] == "kernel":
            args = ", ".join(f"m->ptr[{a}]" for a in list(n["inputs"]) + [i])
            src.append(f"    if ((rc = {n['func']}({args})) != 0) return {p}_fail(rc, "
                       f"\"run: kernel {n['func']} (node {i}) failed\");")
    src += ["    return 0; }", ""]
    return "\n".join(s for s in src if s is not None)

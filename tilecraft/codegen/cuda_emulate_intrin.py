"""Tensor intrinsics in the CUDA emulator (``cuda_emulate.py``): a tensorized region runs by the
intrinsic's TE definition, on the tiles its ``buffer_bind_scope``s bind.

* ``buffer_bind_scope``: the declared buffer views a tile of its target; the tile's first element
  is evaluated per thread (``sum(begin[d] * strides[d])``), its shape and strides are constants.
* ``tensor_intrin``: one use of the intrinsic. If its lowering calls a warp-collective builtin
  (``ir/builtin.py``'s ``WARP_BUILTINS``: wmma, ldmatrix, mma.sync) it runs **once per warp**: all
  32 threads of each warp that gets there must get there together (``.sync.aligned``: a warp
  whose threads disagree is an error, and so is a block whose threads are not whole warps), and
  they must bind the same tiles. If it calls a block-collective builtin (``BLOCK_BUILTINS``:
  the sm_90a wgmma main loop and store) it runs **once per block**, all of the block's threads
  there together and binding the same tiles; the wgmma main loop is also run through the shared
  ring and descriptors as the CUDA C moves the data (``cuda_emulate_wgmma.py``) and must agree. Otherwise it runs once per thread, on that thread's tiles. Each
  run is ``interp.run_tensor_intrin`` on numpy views of the tiles (``interp.tile_view``, which
  refuses a tile that leaves its buffer).
* A **fragment** (a buffer in a scope of ``FRAGMENT_SCOPES``) is one array per warp (per block
  for ``wgmma.accumulator``, the block's accumulator tile), poisoned when allocated; only tensor intrinsics may touch it (an element access is an error, as the
  CUDA C cannot express it).
* **The lowering is checked against the definition**: each warp call's operands must describe
  the tiles the definition used. A memory pointer (``access_ptr``) must start where its tile
  does, with the tile's row stride; a load or store with ``row_major``/``col_major`` must move
  the same elements as the definition did (in that orientation); a fragment's tile ``index``
  must name one tile per index and one index per tile within a warp's fragment (TVM's
  ``elem_offset // 256``), inside the fragment. So an index or stride the CUDA C would get wrong
  fails here, without a GPU.
* Races: a use reads its input tiles and writes its output tiles; shared and global tiles go
  through the same bookkeeping as single accesses (a warp's accesses count as its first lane's).
"""
from __future__ import annotations

import numpy as np

from ..interp import InterpError, run_tensor_intrin, tile_view
from ..ir import dtype as dt
from ..ir.builtin import BLOCK_BUILTINS, FRAGMENT_SCOPES, WARP_BUILTINS, warp_operands
from ..ir.expr import Call
from ..ir.functor import post_order_visit
from .cuda_tensorcore import FragmentError, fragment_layouts

TILE_CALLS = {"tvm_load_matrix_sync": "load", "tc_ldmatrix": "load",
              "tvm_store_matrix_sync": "store", "tc_mma_store": "store"}
MMA_CALLS = ("tvm_mma_sync", "tc_mma_sync")
FILL_CALLS = ("tvm_fill_fragment", "tc_mma_fill")


class EmulationError(RuntimeError):
    """The kernel would misbehave on a GPU: out-of-bounds access, race, divergent barrier."""


def _np(dtype: str):
    return np.dtype("bool" if dt.is_bool(dtype) else dt.numpy_name(dtype))


def _poisoned(shape, dtype: str) -> np.ndarray:
    """Memory the kernels have not written yet: NaN for floats, bytes of 0x5A for integers, True
    for bools (a GPU leaves it as it was, so a read of it must show, not read zeros)."""
    d = _np(dtype)
    if d.kind == "f":
        return np.full(shape, np.nan, d)
    if d.kind == "b":
        return np.ones(shape, d)
    return np.full(shape, int.from_bytes(b"\x5a" * d.itemsize, "little"), d)


def fragment_message(buf, what: str) -> str:
    return (f"'{buf.name}' is a fragment (scope {buf.scope}) but is {what} element by element; its "
            f"elements live in the registers of a whole warp, so only tensor-core calls may touch it: "
            f"tensorize the stages that read and write it (load, mma, store)")


class _View:
    """A declared buffer's tile: its target, first element per lane, shape and strides."""
    __slots__ = ("buffer", "offset", "shape", "strides", "declared")

    def __init__(self, buffer, offset, shape, strides, declared):
        self.buffer, self.offset, self.shape, self.strides = buffer, offset, shape, strides
        self.declared = declared

    def elements(self, units) -> np.ndarray:
        """The flat indices of the tile's elements, ``(len(units), tile size)``."""
        grid = np.zeros(1, np.int64)
        for n, st in zip(self.shape, self.strides):
            grid = (grid[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).reshape(-1)
        return self.offset[units][:, None] + grid[None, :]


def _warp_calls(stmt) -> list:
    out = []
    post_order_visit(stmt, lambda n: out.append(n) if isinstance(n, Call) and n.name in WARP_BUILTINS else None)
    return out


def _filled_before(calls) -> dict:
    """``{id(mma call): value}`` for each mma whose accumulator a fill call of the same region
    set before it (a whole reduction inside one tensorized ``body``: fill, then mma)."""
    fills, out = {}, {}
    for call in calls:
        ops = warp_operands(call)
        if call.name in FILL_CALLS:
            data, index = ops["frag"][0]
            fills[(id(data), str(index))] = float(getattr(ops["value"], "value", ops["value"]))
        elif call.name in MMA_CALLS:
            data, index = ops["frag"][-1]                       # c, the accumulator read
            if (id(data), str(index)) in fills:
                out[id(call)] = fills[(id(data), str(index))]
        else:
            for data, index in ops["frag"]:
                fills.pop((id(data), str(index)), None)         # written otherwise since the fill
    return out


def _block_calls(stmt) -> list:
    out = []
    post_order_visit(stmt, lambda n: out.append(n) if isinstance(n, Call) and n.name in BLOCK_BUILTINS else None)
    return out


class TensorIntrinMixin:
    """The tensor-intrinsic part of the emulator's ``_Kernel`` (it provides ``expr``, ``stmt``,
    ``globals``, ``shared``, ``local``, the race checks and the thread bookkeeping)."""

    def init_tensor_intrins(self):
        self.fragments: dict = {}          # fragment buffer -> (warps, elements) array
        self.views: dict = {}              # declared buffer -> _View
        self.frag_tiles: dict = {}         # fragment buffer -> (index -> offset, offset -> index) per warp
        self.wpb = -(-self.nthreads // 32)                   # warps per block
        self.layouts = fragment_layouts(self.body)            # fragment data var -> its layout
        self.warp_of = self.block_of * self.wpb + self.tid // 32

    def allocate_fragment(self, buf, n: int):
        rows = self.nblocks if buf.scope == "wgmma.accumulator" else self.nblocks * self.wpb
        self.fragments[buf] = _poisoned((rows, n), buf.dtype)
        self.frag_tiles.pop(buf, None)

    # --- buffer_bind_scope ----------------------------------------------------------------------
    def bind_view(self, s, mask):
        declared, region = s.node, s.value
        start = len(region.begin) - len(declared.shape)
        offset = np.zeros(self.L, np.int64)
        for b, st in zip(region.begin, region.strides):
            offset = offset + self.expr(b, mask).astype(np.int64) * self.expr(st, mask).astype(np.int64)
        act = np.nonzero(mask)[0]
        if not act.size:
            return
        strides = []
        for st in region.strides[start:]:
            v = self.expr(st, mask)[act]
            if (v != v[0]).any():
                raise EmulationError(f"kernel {self.info.name}: the tile of '{region.buffer.name}' bound to "
                                     f"'{declared.name}' has a stride that differs between threads")
            strides.append(int(v[0]))
        shape = []
        for x in region.extent[start:]:
            v = self.expr(x, mask)[act]
            shape.append(int(v[0]))
        old = self.views.get(declared)
        self.views[declared] = _View(region.buffer, offset, tuple(shape), tuple(strides), declared)
        try:
            self.stmt(s.body, mask)
        finally:
            if old is None:
                del self.views[declared]
            else:
                self.views[declared] = old

    # --- tensor_intrin --------------------------------------------------------------------------
    def run_intrin(self, s, mask):
        intrin, part = s.node, s.value
        n_in = len(intrin.inputs)
        bufs = intrin.buffers[n_in:] if part == "reset" else intrin.buffers
        missing = [b.name for b in bufs if b not in self.views]
        if missing:
            raise EmulationError(f"kernel {self.info.name}: the {part} of tensor intrinsic '{intrin.name}' runs "
                                 f"where its buffer(s) {', '.join(missing)} are bound to nothing")
        calls = _warp_calls(s.body)
        what = f"kernel {self.info.name}: tensor intrinsic '{intrin.name}' ({part})"
        views = [self.views[b] for b in bufs]
        block_calls = _block_calls(s.body)
        if block_calls:
            units = self._block_units(what, mask, views)
            self._check_block_calls(what, block_calls, views, units, mask)
        else:
            units = self._warp_units(what, mask, views) if calls else np.nonzero(mask)[0]
        ins = views[:n_in] if part != "reset" else []
        outs = views[len(ins):]
        for v in ins:
            self._tile_access(v, units, write=False)
        checks = self._check_operands(what, calls, views, units, mask) if calls else []
        params = {p: self.expr(p, mask) for p in intrin.scalar_params}      # bound by tensorize's LetStmts
        filled = _filled_before(calls)
        for u in units:
            before = [[self._tile(v, u).copy() for v in fv] if kind == "mma" else None for kind, _, fv in checks]
            for (kind, call, fv), old in zip(checks, before):
                c = filled.get(id(call)) if kind == "mma" else None
                if c is not None:        # filled in this region before the mma: the mma adds to the fill
                    old[3] = np.full_like(old[3], c)
            try:
                run_tensor_intrin(intrin, part, [self._tile(v, u) for v in ins], [self._tile(v, u) for v in outs],
                                  {p: int(v[u]) for p, v in params.items()})
            except InterpError as err:
                raise EmulationError(f"{what}: {err}") from None
            for call in block_calls:
                if call.name in ("tc_wgmma_mainloop", "tc_wgmma_tma_mainloop"):
                    self._check_wgmma_model(what, call, views, u, mask)
                elif call.name == "tc_wgmma_conv_mainloop":
                    self._check_wgmma_conv_model(what, call, views, u, mask)
            for (kind, call, fv), old in zip(checks, before):
                if kind == "mma":
                    self._check_mma(what, call, fv, old, u)
                else:
                    self._check_tile_call(what, call, fv, u)
        for v in outs:
            self._tile_access(v, units, write=True)

    def _warp_units(self, what, mask, views) -> np.ndarray:
        """The first lane of each warp that runs a warp-collective use (all of its lanes must)."""
        if self.nthreads % 32:
            raise EmulationError(f"{what} is warp-wide, but the block has {self.nthreads} threads, not whole "
                                 f"warps of 32")
        m = mask.reshape(-1, 32)
        part = m.any(1) & ~m.all(1)
        if part.any():
            w = int(np.argmax(part))
            raise EmulationError(f"{what} is warp-wide, but only {int(m[w].sum())} of the 32 threads of the warp "
                                 f"of {self._thread(w * 32)} run it (threads of a warp must run it together)")
        units = np.nonzero(m.all(1))[0] * 32
        for v in views:
            off = v.offset.reshape(-1, 32)[units // 32]
            bad = (off != off[:, :1]).any(1)
            if bad.any():
                w = int(units[np.argmax(bad)])
                lane = int(np.argmax(off[np.argmax(bad)] != off[np.argmax(bad), 0]))
                raise EmulationError(
                    f"{what} is warp-wide, but the threads of a warp bind different tiles of "
                    f"'{v.buffer.name}' to '{v.declared.name}': {self._thread(w)} starts at element "
                    f"{int(off[np.argmax(bad), 0])}, {self._thread(w + lane)} at {int(off[np.argmax(bad), lane])} "
                    f"(bind the warp's 32 threads to no loop of the tensorized stage)")
        return units

    def _block_units(self, what, mask, views) -> np.ndarray:
        """The first thread of each block that runs a block-collective use (all of its threads must,
        binding the same tiles)."""
        m = mask.reshape(-1, self.nthreads)
        part = m.any(1) & ~m.all(1)
        if part.any():
            b = int(np.argmax(part))
            raise EmulationError(f"{what} is block-wide, but only {int(m[b].sum())} of the {self.nthreads} threads "
                                 f"of block {b} run it (all threads of a block must run it together)")
        units = np.nonzero(m.all(1))[0] * self.nthreads
        for v in views:
            off = v.offset.reshape(-1, self.nthreads)[units // self.nthreads]
            bad = (off != off[:, :1]).any(1)
            if bad.any():
                raise EmulationError(f"{what} is block-wide, but the threads of block "
                                     f"{int(units[np.argmax(bad)] // self.nthreads)} bind different tiles of "
                                     f"'{v.buffer.name}' to '{v.declared.name}' (bind no thread loop of the stage)")
        return units

    def _check_block_calls(self, what, calls, views, units, mask):
        """A block call's pointers start at the tiles the definition binds, with their row
        strides; its fragment is the bound accumulator; bm, bn (and k) are the tiles' shapes; the
        block has the threads (a producer and bm / 64 consumer warpgroups) the code assumes."""
        from .cuda_wgmma import block_threads, smem_bytes
        by_data = {b.data: b for b in self.fragments}
        for call in calls:
            frag = by_data.get(call.args[0])
            if frag is None or frag.scope != "wgmma.accumulator":
                raise EmulationError(f"{what}: {call.name}'s fragment `{call.args[0]}` is not a wgmma.accumulator "
                                     f"fragment allocated in this kernel")
            acc = self._view_of(what, views, frag, call, "fragment")
            conv = call.name == "tc_wgmma_conv_mainloop"
            gemm = call.name in ("tc_wgmma_mainloop", "tc_wgmma_tma_mainloop")
            bm, bn = (int(x.value) for x in (call.args[7:9] if gemm else
                                             call.args[5:7] if conv else call.args[3:5]))
            if tuple(acc.shape) != (bm, bn) or self.fragments[frag].shape[1] != bm * bn:
                raise EmulationError(f"{what}: {call.name} names a {bm} x {bn} block tile, but the accumulator "
                                     f"'{frag.name}' bound is {' x '.join(map(str, acc.shape))} of "
                                     f"{self.fragments[frag].shape[1]} elements")
            if self.nthreads != block_threads(bm):
                raise EmulationError(f"{what}: a {bm}-row wgmma block needs {block_threads(bm)} threads (a producer "
                                     f"warpgroup and {bm // 64} consumers), the kernel has {self.nthreads}")
            pairs = ((call.args[1], call.args[2]), (call.args[3], call.args[4])) \
                if gemm else ((call.args[1], None), (call.args[2], None)) if conv \
                else ((call.args[1], call.args[2]),)
            for ptr, stride in pairs:
                mem = self._view_of(what, views, ptr.buffer, call, "pointer's buffer")
                start = self.expr(ptr.offset, mask).astype(np.int64)[units]
                if (start != mem.offset[units]).any():
                    k = int(np.argmax(start != mem.offset[units]))
                    raise EmulationError(f"{what}: {call.name} points at element {int(start[k])} of "
                                         f"'{ptr.buffer.name}', but the tile bound to '{mem.declared.name}' starts at "
                                         f"element {int(mem.offset[units][k])}")
                if stride is None:             # the conv's x (all of it) and w (compact rows): no stride argument
                    continue
                st = self.expr(stride, mask).astype(np.int64)[units]
                if (st != mem.strides[-2]).any():
                    raise EmulationError(f"{what}: {call.name} reads rows {int(st[0])} elements apart, but the tile "
                                         f"bound to '{mem.declared.name}' has rows {mem.strides[-2]} apart")
            if conv:
                smem, stages = call.args[4], int(call.args[7].value)
                have = int(smem.buffer.shape[0].value) * dt.nbytes(smem.buffer.dtype)
                if smem.buffer.scope != "shared" or have < smem_bytes(bm, bn, stages):
                    raise EmulationError(f"{what}: tc_wgmma_conv_mainloop's ring '{smem.buffer.name}' "
                                         f"({smem.buffer.scope}, {have} bytes) must be shared memory of "
                                         f"{smem_bytes(bm, bn, stages)} bytes")
            if gemm:
                k, smem, stages = int(call.args[5].value), call.args[6], int(call.args[9].value)
                a = self._view_of(what, views, call.args[1].buffer, call, "A")
                if a.shape[-1] != k:
                    raise EmulationError(f"{what}: {call.name} runs k={k}, but the A tile bound is "
                                         f"{' x '.join(map(str, a.shape))}")
                have = int(smem.buffer.shape[0].value) * dt.nbytes(smem.buffer.dtype)
                if smem.buffer.scope != "shared" or have < smem_bytes(bm, bn, stages):
                    raise EmulationError(f"{what}: {call.name}'s ring '{smem.buffer.name}' ({smem.buffer.scope}, "
                                         f"{have} bytes) must be shared memory of {smem_bytes(bm, bn, stages)} bytes")

    def _tma_operand(self, what, call, ptr, ld, u, mask):
        """The whole 2-D array a TMA main loop's tensor map covers (the buffer, rows of its last
        dimension) and the tile's (first row, first column) in it, as the C code computes them."""
        buf = ptr.buffer
        ld = int(self.expr(ld, mask).astype(np.int64)[u])
        last = buf.shape[-1]
        cols = int(last.value) if hasattr(last, "value") else ld
        if len(buf.shape) != 2 or ld != cols:
            raise EmulationError(f"{what}: {call.name} reads '{buf.name}' through a tensor map of its shape "
                                 f"{tuple(str(d) for d in buf.shape)}, but its tile's rows are {ld} elements apart "
                                 f"(TMA tiles must be whole rows of a 2-D buffer)")
        flat = self._storage(buf, u)
        off = int(self.expr(ptr.offset, mask).astype(np.int64)[u])
        return flat[:flat.size // cols * cols].reshape(-1, cols), (off // ld, off % ld)

    def _check_wgmma_model(self, what, call, views, u, mask):
        """The main loop run as the CUDA C moves the data (``cuda_emulate_wgmma.py``: the k steps
        through the kernel's shared ring, swizzled, by cp.async or TMA, each wgmma's operands read
        back through its descriptors, run by the instruction's TE definition) must give what the
        definition did."""
        from .cuda_emulate_wgmma import model_mainloop
        a, b = (self._tile(self._view_of(what, views, p.buffer, call, "pointer's buffer"), u)
                for p in (call.args[1], call.args[3]))
        acc = self._tile(self._view_of(what, views, self._fragment_of(call.args[0]), call, "fragment"), u)
        ring = call.args[6].buffer
        bm, bn, stages = (int(x.value) for x in (call.args[7], call.args[8], call.args[9]))
        tma = None
        if call.name == "tc_wgmma_tma_mainloop":
            ga, ca = self._tma_operand(what, call, call.args[1], call.args[2], u, mask)
            gb, cb = self._tma_operand(what, call, call.args[3], call.args[4], u, mask)
            tma = (ga, ca, gb, cb)
        got = model_mainloop(self.shared[ring].data[self.block_of[u]], a, b, bm, bn, stages,
                             dt.element_of(call.args[1].buffer.dtype), tma)
        scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
        bad = np.abs(got - acc) > 1e-4 * scale + 1e-6
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise EmulationError(f"{what}: the main loop through the swizzled shared ring and the wgmma "
                                 f"descriptors gives {got[i, j]!r} at [{i}, {j}] of the block tile, its definition "
                                 f"{acc[i, j]!r}: the swizzle, the descriptors or the ring's stages disagree")

    def _check_wgmma_conv_model(self, what, call, views, u, mask):
        """The conv's main loop as the CUDA C moves the data (``cuda_wgmma_conv.model_conv_block``:
        the gather into the swizzled ring with the C's index arithmetic, the descriptors, each
        wgmma by its definition) must give what the intrinsic's definition did."""
        from .cuda_wgmma_conv import model_conv_block
        x, w = (self._tile(self._view_of(what, views, p.buffer, call, "pointer's buffer"), u)
                for p in (call.args[1], call.args[2]))
        acc = self._tile(self._view_of(what, views, self._fragment_of(call.args[0]), call, "fragment"), u)
        m0 = int(self.expr(call.args[3], mask)[u])
        bm, bn, stages = (int(call.args[k].value) for k in (5, 6, 7))
        N, H, W, C, R, S, stride = (int(call.args[k].value) for k in range(9, 16))
        pad = int(self.expr(call.args[16], mask)[u])
        ring = self.shared[call.args[4].buffer].data[self.block_of[u]]
        got = model_conv_block(ring, x, w, m0, (N, H, W, C, bn, R, S, stride, pad), bm, bn, stages,
                               dt.element_of(call.args[1].buffer.dtype))
        bad = np.abs(got - acc) > 1e-3 * np.abs(acc).max() + 1e-5
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise EmulationError(f"{what}: the conv's gather through the swizzled shared ring and the wgmma "
                                 f"descriptors gives {got[i, j]!r} at [{i}, {j}] of the block tile, its definition "
                                 f"{acc[i, j]!r}: the gather, the swizzle or the descriptors disagree")

    def _fragment_of(self, var):
        return next(b for b in self.fragments if b.data is var)

    def _storage(self, buf, u: int) -> np.ndarray:
        if buf.scope == "wgmma.accumulator":
            return self.fragments[buf][self.block_of[u]]
        if buf.scope in FRAGMENT_SCOPES:
            return self.fragments[buf][self.warp_of[u]]
        if buf.scope == "shared":
            return self.shared[buf].data[self.block_of[u]]
        if buf.scope == "local":
            return self.local[buf][u]
        return self.globals[buf]

    def _tile(self, v: _View, u: int) -> np.ndarray:
        flat = self._storage(v.buffer, u)
        try:
            return tile_view(flat, v.offset[u], v.shape, v.strides, v.declared.name, v.buffer.name)
        except InterpError as err:
            raise EmulationError(f"kernel {self.info.name}: {self._thread(u)}: {err}") from None

    def _tile_access(self, v: _View, units, write: bool):
        """The race bookkeeping of a use's reads or writes of a tile (after bounds are known good
        or about to be checked by ``_tile``)."""
        buf = v.buffer
        if buf.scope in FRAGMENT_SCOPES or buf.scope == "local" or not units.size:
            return
        idx = v.elements(units)
        size = self._storage(buf, int(units[0])).size
        if ((idx < 0) | (idx >= size)).any():
            return                     # _tile reports it with the tile's description
        if buf.scope == "shared":
            where = self.shared[buf]
            blk = np.repeat(self.block_of[units][:, None], idx.shape[1], 1)
            tid = np.repeat(self.tid[units][:, None], idx.shape[1], 1)
            (self._shared_write if write else self._shared_read)(buf, where, blk, tid, idx)
        elif buf in self.tracked:
            if write:
                self._global_write(buf, idx, units, self.globals[buf][idx])
            else:
                self._global_read(buf, idx, units)

    # --- the lowering's operands against the definition's tiles --------------------------------
    def _uniform(self, what, e, mask, units, name: str) -> np.ndarray:
        v = self.expr(e, mask).astype(np.int64)
        per = v.reshape(-1, 32)[units // 32]
        bad = (per != per[:, :1]).any(1)
        if bad.any():
            raise EmulationError(f"{what}: the {name} `{e}` differs between the threads of the warp of "
                                 f"{self._thread(int(units[np.argmax(bad)]))}; a warp-wide call takes one value")
        return per[:, 0]

    def _view_of(self, what, views, buf, call, role: str):
        for v in views:
            if v.buffer is buf:
                return v
        raise EmulationError(f"{what}: {call.name}'s {role} is '{buf.name}', which is not a buffer the "
                             f"intrinsic binds here ({', '.join(f'{v.declared.name} -> {v.buffer.name}' for v in views)})")

    def _check_operands(self, what, calls, views, units, mask) -> list:
        """Check each warp call's fragments, pointers and strides against the bound tiles;
        returns the loads and stores to compare element by element after each run."""
        by_data = {b.data: b for b in self.fragments}
        checks = []
        for call in calls:
            ops = warp_operands(call)
            frag_views = []
            for var, index in ops["frag"]:
                buf = by_data.get(var)
                if buf is None:
                    raise EmulationError(f"{what}: {call.name}'s fragment `{var}` is not a fragment allocated in "
                                         f"this kernel")
                v = self._view_of(what, views, buf, call, "fragment")
                idx = self._uniform(what, index, mask, units, f"index of fragment '{buf.name}'")
                self._check_fragment_index(what, call, buf, v, idx, units)
                frag_views.append(v)
            if call.name in MMA_CALLS:
                checks.append(("mma", call, tuple(frag_views)))
            ptr = ops["ptr"]
            if ptr is None:
                continue
            mem = self._view_of(what, views, ptr.buffer, call, "pointer's buffer")
            start = self._uniform(what, ptr.offset, mask, units, "pointer offset")
            want = mem.offset[units]
            if (start != want).any():
                k = int(np.argmax(start != want))
                raise EmulationError(
                    f"{what}: {call.name} points at element {int(start[k])} of '{ptr.buffer.name}', but the tile "
                    f"bound to '{mem.declared.name}' starts at element {int(want[k])} (in the warp of "
                    f"{self._thread(int(units[k]))})")
            stride = self._uniform(what, ops["stride"], mask, units, "stride")
            row = mem.strides[-2] if len(mem.strides) >= 2 else None
            if row is not None and (stride != row).any():
                raise EmulationError(
                    f"{what}: {call.name} reads rows {int(stride[0])} elements apart, but the tile bound to "
                    f"'{mem.declared.name}' in '{ptr.buffer.name}' has rows {row} apart (pass the tile's "
                    f"stride, e.g. {mem.declared.name}.strides[0])")
            if call.name in TILE_CALLS and frag_views:
                checks.append((TILE_CALLS[call.name], call, (mem, frag_views[0])))
        return checks

    def _check_fragment_index(self, what, call, buf, v, idx, units):
        size = self.fragments[buf].shape[1]
        tiles = size // int(np.prod(v.shape))        # 16 x 16, or an mma operand's 16 x K (32 bytes a row)
        if (idx < 0).any() or (idx >= tiles).any():
            k = int(np.argmax((idx < 0) | (idx >= tiles)))
            raise EmulationError(f"{what}: {call.name} uses tile {int(idx[k])} of the fragment '{buf.name}', "
                                 f"which holds {tiles} tile(s) of {' x '.join(map(str, v.shape))}")
        by_index, by_offset = self.frag_tiles.setdefault(
            buf, (np.full((self.nblocks * self.wpb, max(tiles, 1)), -1, np.int64),
                  np.full((self.nblocks * self.wpb, size), -1, np.int64)))
        w = self.warp_of[units]
        off = v.offset[units]
        old = by_index[w, idx]
        bad = (old != -1) & (old != off)
        old_i = by_offset[w, np.clip(off, 0, size - 1)]
        bad2 = (old_i != -1) & (old_i != idx)
        if bad.any() or bad2.any():
            k = int(np.argmax(bad | bad2))
            other = (f"tile {int(idx[k])} stood for the tile at element {int(old[k])} before" if bad[k] else
                     f"that tile was tile {int(old_i[k])} before")
            raise EmulationError(
                f"{what}: {call.name} names tile {int(idx[k])} of the fragment '{buf.name}' for the tile that "
                f"starts at element {int(off[k])}, but {other} (in the warp of {self._thread(int(units[k]))}); "
                f"the index must pick one {' x '.join(map(str, v.shape))} tile per value, e.g. elem_offset // 256 "
                f"for 16 x 16 tiles stored one after another")
        by_index[w, idx] = off
        by_offset[w, np.clip(off, 0, size - 1)] = idx

    def _check_tile_call(self, what, call, views, u):
        """After a load or store: the fragment tile holds what the memory tile does, in the same
        orientation (the call's layout says how the hardware reads that orientation)."""
        mem, frag = views
        m, f = self._tile(mem, u), self._tile(frag, u)
        src, dst = (m, f) if TILE_CALLS[call.name] == "load" else (f, m)
        conv = src.astype(dst.dtype)
        if dt.element_of((frag if TILE_CALLS[call.name] == "load" else mem).buffer.dtype) == "bfloat16":
            conv = dt.round_bfloat16(conv)          # held in float32: a store to bfloat16 rounds
        same = conv == dst
        if dst.dtype.kind == "f":
            same |= np.isnan(conv) & np.isnan(dst)
        if not same.all():
            raise EmulationError(
                f"{what}: {call.name} copies the tile between '{mem.buffer.name}' and '{frag.buffer.name}' as it "
                f"is, but the intrinsic's definition moves other elements (a transposed or shifted copy); "
                f"define it as a copy C[i, j] = A[i, j] and give the orientation as the call's layout")

    def _check_mma(self, what, call, views, before, u):
        """After an mma: the definition's result is what the hardware computes, ``d = a @ b + c``
        with each fragment read in its layout (``col_major``: the tile is the transpose of the
        hardware's matrix; the layout of a fragment is the one its loads or stores give)."""
        d_view = views[0]
        a, b, c = (self._oriented(v, t) for v, t in zip(views[1:], before[1:]))
        with np.errstate(all="ignore"):
            want = a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)
        got = self._oriented(d_view, self._tile(d_view, u)).astype(np.float64)
        scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(c.astype(np.float64))
        ok = np.abs(got - want) <= 1e-3 * scale + 1e-6
        ok |= np.isnan(want) & np.isnan(got)
        if not ok.all():
            i, j = np.argwhere(~ok)[0]
            lay = ", ".join(f"'{v.buffer.name}' {self.layouts.get(v.buffer.data, 'row_major')}" for v in views)
            raise EmulationError(
                f"{what}: {call.name} computes d = a @ b + c on the fragments as the hardware reads them "
                f"({lay}), which gives {want[i, j]!r} at [{i}, {j}], but the intrinsic's definition gives "
                f"{got[i, j]!r}: the definition must read each fragment in its layout (a row_major B tile "
                f"as B[k, j], a col_major one as B[j, k]) and accumulate onto d's previous value")

    def _oriented(self, v, tile):
        return tile.T if self.layouts.get(v.buffer.data) == "col_major" else tile

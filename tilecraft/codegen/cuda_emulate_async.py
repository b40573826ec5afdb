"""Asynchronous copies (``cp.async``) in the CUDA emulator (``cuda_emulate.py``).

A thread's ``tc_cp_async(dst, src, bytes)`` (or ``tc_cp_async_zfill(dst, src, bytes, pred)``, which
reads nothing and copies zeros where ``pred`` fails) reads its source when it is issued but does not
write shared memory then: the copy is *in flight*, tagged with the group the thread's next
``tc_cp_async_commit()`` closes. ``tc_cp_async_wait(n)`` lands, for each thread that runs it,
every copy of its groups but the newest ``n`` (as ``cp.async.wait_group n``); a landed copy is
a write by that thread at that moment, so the race checker asks for a barrier before another
thread reads it. Copies never committed are never landed by a wait.

So a schedule that reads a tile before waiting for it, waits for too few groups, or forgets the
barrier after the wait fails here: reading or writing an element while a copy into it is in
flight is an error naming the buffer, the element and the thread, and a missing barrier is a
race. Sources are checked to lie inside their buffer and both addresses to be aligned to the
copy's size (what the hardware requires).
"""
from __future__ import annotations

import numpy as np

from ..ir import dtype as dt


class AsyncCopyMixin:
    """The ``cp.async`` part of the emulator's ``_Kernel`` (it provides ``expr``, ``globals``,
    ``shared``, ``tracked``, the race checks and the thread bookkeeping)."""

    def init_async_copies(self):
        self.committed = np.zeros(self.L, np.int64)      # groups each thread has committed
        self.in_flight: list = []                        # [[buffer, lanes, idx, vals, group]]
        self.in_flight_count: dict = {}                  # shared buffer -> (blocks, n) copies in flight

    def async_copy(self, call, mask):
        if call.name in ("tc_cp_async", "tc_cp_async_zfill"):
            self._cp_async_start(call, mask)
        elif call.name == "tc_cp_async_commit":
            self.committed[mask] += 1
        else:
            self._cp_async_wait(int(call.args[0].value), mask)

    def _cp_async_start(self, call, mask):
        from .cuda_emulate import EmulationError
        dst, src, nbytes = call.args[:3]
        # tc_cp_async_zfill: lanes whose predicate fails read nothing and land zeros
        read = mask & self.expr(call.args[3], mask).astype(bool) if len(call.args) == 4 else mask
        size = dt.bits(dst.buffer.dtype) // 8
        if dt.bits(src.buffer.dtype) // 8 != size:
            raise EmulationError(f"kernel {self.info.name}: cp.async from '{src.buffer.name}' ({src.buffer.dtype}) "
                                 f"into '{dst.buffer.name}' ({dst.buffer.dtype}): a copy moves bytes, the two "
                                 f"buffers must have elements of one size")
        n = int(nbytes.value) // size
        lanes = np.nonzero(mask)[0]
        d0 = self.expr(dst.offset, mask).astype(np.int64)
        s0 = self.expr(src.offset, mask).astype(np.int64)
        for name, off, m in ((src.buffer.name, s0, read), (dst.buffer.name, d0, mask)):
            bad = m & (off % n != 0)
            if bad.any():
                k = int(np.argmax(bad))
                raise EmulationError(
                    f"kernel {self.info.name}: cp.async of {int(nbytes.value)} bytes at element {int(off[k])} of "
                    f"'{name}' by {self._thread(k)}: the address must be a multiple of {int(nbytes.value)} bytes")
        step = np.arange(n)
        s_idx, d_idx = s0[:, None] + step, d0[:, None] + step
        glob = self.globals[src.buffer]
        self._check_bounds(src.buffer, s_idx, read, glob.size)
        sh = self.shared[dst.buffer]
        self._check_bounds(dst.buffer, d_idx, mask, sh.data.shape[1])
        reading = np.nonzero(read)[0]
        if src.buffer in self.tracked:
            self._global_read(src.buffer, s_idx[reading], reading)
        vals = np.zeros((len(lanes), n), glob.dtype)
        got = read[lanes]
        vals[got] = glob[s_idx[lanes[got]]]
        count = self.in_flight_count.setdefault(dst.buffer, np.zeros(sh.data.shape, np.int64))
        blk = np.repeat(self.block_of[lanes][:, None], n, 1)
        self._check_not_in_flight(dst.buffer, blk, np.repeat(self.tid[lanes][:, None], n, 1), d_idx[lanes],
                                  "copies into")
        np.add.at(count, (blk, d_idx[lanes]), 1)
        self.in_flight.append([dst.buffer, lanes, d_idx[lanes], vals, self.committed[lanes].copy()])

    def _cp_async_wait(self, keep: int, mask):
        limit = self.committed - keep                   # groups below this have landed
        left = []
        for entry in self.in_flight:
            buf, lanes, idx, vals, group = entry
            land = mask[lanes] & (group < limit[lanes])
            if land.any():
                self._land(buf, lanes[land], idx[land], vals[land])
                entry = [buf, lanes[~land], idx[~land], vals[~land], group[~land]]
            if len(entry[1]):
                left.append(entry)
        self.in_flight = left

    def _land(self, buf, lanes, idx, vals):
        n = idx.shape[1]
        sh = self.shared[buf]
        blk = np.repeat(self.block_of[lanes][:, None], n, 1)
        tid = np.repeat(self.tid[lanes][:, None], n, 1)
        np.subtract.at(self.in_flight_count[buf], (blk, idx), 1)
        self._shared_write(buf, sh, blk, tid, idx)
        sh.data[blk, idx] = vals

    def _check_not_in_flight(self, buf, blk, tid, idx, what: str):
        """Refuse an access of shared elements that a cp.async is still copying into."""
        from .cuda_emulate import EmulationError
        count = self.in_flight_count.get(buf)
        if count is None:
            return
        busy = count[blk, idx] > 0
        if busy.any():
            k = tuple(np.argwhere(busy)[0])
            raise EmulationError(
                f"kernel {self.info.name}: thread {tid[k]} of block {blk[k]} {what} shared '{buf.name}[{idx[k]}]' "
                f"while a cp.async into it is in flight (wait for its group with cp.async.wait_group, then "
                f"__syncthreads(), first)")

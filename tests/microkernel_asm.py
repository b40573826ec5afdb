"""Reading the hot loop of a micro-kernel out of x86 assembly (AT&T syntax, as LLVM prints it).

``hot_loop(asm, "vfmadd")`` is the innermost loop (a label and the backward branch to it) holding
the most instructions whose mnemonic starts with the given text; ``LoopReport`` says what a
register-tile micro-kernel's loop must show: its update instructions all accumulate into
registers (distinct destination registers, as many as the tile has accumulators), it stores
nothing and touches no stack slot (no spills), and its A operands are broadcast loads.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r"^(\.?[A-Za-z_][\w.$]*):")
_JUMP = re.compile(r"^\s+j\w+\s+(\.?[A-Za-z_][\w.$]*)\s*$")


def op_of(instruction: str) -> str:
    """The mnemonic of one instruction, past an encoding prefix (``{vex} vpdpbusd ...``)."""
    return next(w for w in instruction.split() if not w.startswith("{"))


def _instructions(lines):
    return [x.strip() for x in lines if x.strip() and not x.strip().startswith((".", "#")) and not _LABEL.match(x)]


def hot_loop(asm: str, mnemonic: str) -> list[str]:
    """The instructions of the innermost loop (one that holds no other loop) with the most
    ``mnemonic*`` instructions; empty when no such loop has any."""
    lines = asm.splitlines()
    labels, loops = {}, []
    for n, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = n
            continue
        j = _JUMP.match(line)
        if j and j.group(1) in labels:          # a backward branch: a loop from the label to here
            loops.append((labels[j.group(1)], n))
    best, best_key = [], None
    for a, b in loops:
        if any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops):
            continue
        body = _instructions(lines[a:b + 1])
        count = sum(1 for x in body if op_of(x).startswith(mnemonic))
        key = (count, -len(body))
        if count and (best_key is None or key > best_key):
            best, best_key = body, key
    return best


@dataclass
class LoopReport:
    updates: int            # instructions of the mnemonic
    accumulators: int       # distinct destination registers of those
    stores: int             # instructions that write memory
    stack: int              # instructions that touch the stack (spills and reloads)
    broadcasts: int         # broadcast loads (vbroadcastss / vpbroadcastd, or an embedded {1toN})
    text: str


def report(body: list[str], mnemonic: str) -> LoopReport:
    updates = [x for x in body if op_of(x).startswith(mnemonic)]
    dests = {x.split(",")[-1].strip() for x in updates}
    stores = [x for x in body if re.search(r",\s*-?\w*\(%", x) and not op_of(x).startswith(("cmp", "test"))]
    stack = [x for x in body if "(%rsp" in x]
    broadcasts = [x for x in body if "broadcast" in op_of(x) or re.search(r"\{1to\d+\}", x)]
    return LoopReport(len(updates), len(dests), len(stores), len(stack), len(broadcasts), "\n".join(body))

"""``PassContext``: options for the builds made inside a ``with`` block (TVM's ``tvm.transform``).

>>> with tilecraft.transform.PassContext(config={"tir.instrument_bound_checkers": True}):
...     f = tilecraft.build(s, [A, B], target="llvm")
>>> f(a_too_small, b)     # KernelIndexError: index 8 out of bounds for buffer 'A' of extent 8 ...

``opt_level``, ``required_pass``/``disabled_pass`` (pass names), ``instruments`` and ``config``
take TVM's names; the graph level (``tilecraft.relay``) runs its passes by them. The options known so far:

=================================  =====  ==========================================================
``tir.instrument_bound_checkers``  bool   CPU code checks every load and store against its buffer's
                                          extent and fails with ``KernelIndexError`` (buffer, index,
                                          extent, function) instead of touching memory outside it
``tir.UnrollLoop``                 dict   ``{"auto_max_step": n}``: every serial loop nest of at
                                          most ``n`` iterations is unrolled, as under
                                          ``pragma(ax, "auto_unroll_max_step", n)`` (TVM's other
                                          keys ``explicit_unroll``, ``max_depth``,
                                          ``unroll_local_access`` are accepted and ignored)
``te.keep_schedule_record``        bool   schedules created in the block keep ``s.schedule_record``
                                          (a snapshot after each primitive) and
                                          ``s.primitive_record`` (their names), e.g. for ``tedd``
``cuda.allow_tf32``                bool   ``relay.build(target="cuda")`` runs float32 convolutions
                                          on tensor cores with TF32 operands (torch's
                                          ``allow_tf32``; relay/transform/tensorcore_layout.py)
=================================  =====  ==========================================================

An unknown key or a value of the wrong type is refused when the context is made. Contexts nest;
the innermost one is ``PassContext.current()`` (a default context outside any ``with``). This
module imports nothing else of tilecraft, so every layer may read the current context.
"""
from __future__ import annotations

import threading
from .error import TVMError

# key -> (type, default, what it does)
CONFIG_OPTIONS = {
    "tir.instrument_bound_checkers": (bool, False, "check every CPU load and store against its buffer"),
    "tir.UnrollLoop": (dict, {}, "unroll every loop nest of at most auto_max_step iterations"),
    "te.keep_schedule_record": (bool, False, "schedules created here keep schedule_record / primitive_record"),
    "cuda.allow_tf32": (bool, False, "relay.build(target='cuda'): float32 convolutions on tensor cores (TF32)"),
}
UNROLL_KEYS = {"auto_max_step": int, "explicit_unroll": bool, "max_depth": int, "unroll_local_access": bool}

_local = threading.local()


class PassContextError(ValueError, TVMError):
    """A PassContext option that does not exist or has a value of the wrong type."""


class PassContext:
    """Build options for a ``with`` block: ``PassContext(opt_level=3, config={...})``."""

    def __init__(self, opt_level: int = 2, required_pass=None, disabled_pass=None, config=None,
                 instruments=None):
        if not isinstance(opt_level, int) or isinstance(opt_level, bool) or not 0 <= opt_level <= 4:
            raise PassContextError(f"PassContext: opt_level must be an integer from 0 to 4, got {opt_level!r}")
        self.opt_level = opt_level
        self.required_pass = list(required_pass or [])
        self.disabled_pass = list(disabled_pass or [])
        # objects with run_after_pass(mod, pass_info), called after each graph pass (relay's
        # PrintAfterAll prints the module)
        self.instruments = list(instruments or [])
        self.config = {}
        for key, value in dict(config or {}).items():
            if key not in CONFIG_OPTIONS:
                raise PassContextError(f"PassContext: unknown config option {key!r}; known options: "
                                       f"{', '.join(sorted(CONFIG_OPTIONS))}")
            typ = CONFIG_OPTIONS[key][0]
            if not isinstance(value, typ) or (typ is not bool and isinstance(value, bool)):
                raise PassContextError(f"PassContext: config option {key!r} takes a {typ.__name__}, "
                                       f"got {value!r}")
            if key == "tir.UnrollLoop":
                for k, v in value.items():
                    want = UNROLL_KEYS.get(k)
                    if want is None or not isinstance(v, want) or (want is int and isinstance(v, bool)):
                        raise PassContextError(
                            f"PassContext: tir.UnrollLoop takes {', '.join(f'{n} ({t.__name__})' for n, t in UNROLL_KEYS.items())}; "
                            f"got {k!r}: {v!r}")
                value = dict(value)
            self.config[key] = value

    def get(self, key: str):
        """The value of a config option here (its default when not set)."""
        if key not in CONFIG_OPTIONS:
            raise PassContextError(f"PassContext: unknown config option {key!r}")
        return self.config.get(key, CONFIG_OPTIONS[key][1])

    @staticmethod
    def current() -> "PassContext":
        """The innermost active context, or the default one."""
        stack = getattr(_local, "stack", None)
        return stack[-1] if stack else _DEFAULT

    def __enter__(self) -> "PassContext":
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _local.stack.pop()

    def __repr__(self) -> str:
        return f"PassContext(opt_level={self.opt_level}, config={self.config!r})"


_DEFAULT = PassContext()

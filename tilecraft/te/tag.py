"""Operation tags (TVM's ``te.tag_scope``): a tag names what kind of operator a compute stage
is (``"elemwise"``, ``"broadcast"``, ``"conv2d_nchw"``), so that schedules can find stages by
tag (``op.tag``). Tags do not change what is computed.

>>> with te.tag_scope("ewise"):
...     B = te.compute((n,), lambda i: A[i] + 1)      # B.op.tag == "ewise"
>>> @te.tag_scope(tag="conv")
... def conv(...): ...                                 # every compute inside is tagged "conv"
"""
from __future__ import annotations

import functools

from .tensor import TEError


class TagScope:
    """A scope, as ``with`` block or decorator, in which every ``te.compute`` gets ``tag``."""

    _current: "TagScope | None" = None

    def __init__(self, tag: str):
        if not isinstance(tag, str):
            raise TEError(f"te.tag_scope: the tag must be a string, got {tag!r}")
        self.tag = tag
        self._old = None

    def __enter__(self):
        if TagScope._current is not None:
            raise TEError(f"te.tag_scope({self.tag!r}) inside te.tag_scope({TagScope._current.tag!r}): "
                          f"tag scopes do not nest (as in TVM)")
        TagScope._current = self
        return self

    def __exit__(self, *exc):
        TagScope._current = None

    def __call__(self, fdecl):
        @functools.wraps(fdecl)
        def tagged(*args, **kwargs):
            with self:
                return fdecl(*args, **kwargs)
        return tagged


def tag_scope(tag: str) -> TagScope:
    """The scope of a tag: ``with te.tag_scope("ewise"): ...`` or ``@te.tag_scope(tag="conv")``."""
    return TagScope(tag)


def scoped_tag(tag: str, where: str) -> str:
    """The tag an operation gets: ``tag``, or the enclosing scope's (giving both is an error)."""
    scope = TagScope._current
    if scope is None:
        return tag
    if tag:
        raise TEError(f"{where}: tag={tag!r} given inside te.tag_scope({scope.tag!r}); an operation "
                      f"has one tag (nested tags are not supported, as in TVM)")
    return scope.tag

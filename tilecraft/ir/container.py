"""TVM's container names (``tvm.container`` / ``tvm.ir.container``), for scripts that check what
an API returned: tilecraft returns plain Python containers, so ``Map`` is ``dict`` (what
``tvm.te.schedule.InferBound`` returns) and ``Array`` is ``tuple`` (``op.axis``, ``op.reduce_axis``,
``tensor.shape``; a few results are lists: ``leaf_iter_vars``).

>>> isinstance(tvm.te.schedule.InferBound(s), tvm.container.Map)
True
"""
Map = dict
Array = tuple

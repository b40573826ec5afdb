"""TVM's module path ``autotvm.task.space`` (``from tvm.autotvm.task.space import SplitEntity``):
the config-space names, which live in ``tilecraft.autotune.space``; the same objects."""
from ..space import (ANNOTATIONS, AnnotateEntity, AnnotateSpace, ConfigEntity, ConfigSpace,  # noqa: F401
                     FallbackConfigEntity, InstantiationError, KnobSpace, OtherOptionEntity, OtherOptionSpace,
                     ReorderEntity, ReorderSpace, SplitEntity, SplitSpace, StaleConfigError, UnknownKnobError,
                     VirtualAxis, axis_extent, axis_name, entity_from_json, get_factors, get_pow2s)

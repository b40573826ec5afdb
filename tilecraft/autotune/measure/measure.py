"""TVM's module path ``autotvm.measure.measure`` (``from tvm.autotvm.measure.measure import
MeasureErrorNo, MeasureResult``): the measurement records and interfaces of
``tilecraft.autotune.measure``; the same objects."""
from . import (BuildResult, Builder, MeasureErrorNo, MeasureInput, MeasureResult, Runner,  # noqa: F401
               create_measure_batch, measure_option)

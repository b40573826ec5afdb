"""TVM's module path ``autotvm.tuner.xgboost_cost_model`` (``from
tvm.autotvm.tuner.xgboost_cost_model import XGBoostCostModel``): the cost model, which lives in
``tilecraft.autotune.cost_model``; the same object."""
from ..cost_model import XGBoostCostModel  # noqa: F401

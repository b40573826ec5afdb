"""Search strategies: ``RandomTuner``, ``GridSearchTuner``, ``XGBTuner`` (model-based)."""
from .basic import GridSearchTuner, RandomTuner
from .model_based import ModelBasedTuner, XGBTuner, submodular_pick
from .sa_optimizer import SimulatedAnnealingOptimizer
from .tuner import Tuner

__all__ = ["Tuner", "RandomTuner", "GridSearchTuner", "ModelBasedTuner", "XGBTuner",
           "SimulatedAnnealingOptimizer", "submodular_pick"]

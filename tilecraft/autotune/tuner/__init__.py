"""Search strategies: ``RandomTuner``, ``GridSearchTuner``, ``GATuner``, ``DropletTuner``, ``XGBTuner``
(model-based)."""
from .basic import GridSearchTuner, IndexBaseTuner, RandomTuner
from .droplet_tuner import DropletTuner
from .ga_tuner import GATuner
from .model_based import ModelBasedTuner, XGBTuner, submodular_pick
from .sa_optimizer import SimulatedAnnealingOptimizer
from .tuner import Tuner

__all__ = ["Tuner", "IndexBaseTuner", "RandomTuner", "GridSearchTuner", "GATuner", "DropletTuner", "ModelBasedTuner", "XGBTuner",
           "SimulatedAnnealingOptimizer", "submodular_pick"]

"""Schedules (stages and primitives, recorded as steps) and lowering to a loop nest."""
from .schedule import (Schedule, ScheduleError, Stage, create_schedule, from_json, replay)
from .record import Step, python_names, step_from_json
from .lower import lower

"""Schedules (stages and primitives, recorded as steps) and lowering to a loop nest."""
from .schedule import (Schedule, ScheduleError, Stage, Step, create_schedule, replay)
from .lower import lower

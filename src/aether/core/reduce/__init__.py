"""Reducers: pure, total functions `fold(state, record) -> state`, one module per event family."""

from aether.core.reduce.fold import REDUCERS, fold, fold_all, fold_event, fold_many

__all__ = ["REDUCERS", "fold", "fold_all", "fold_event", "fold_many"]

"""OTD: the online task deployment scheduler (paper section 4) and its PySpark traffic job."""

from scheduler_otd.otd import Decision, WorkerLoad, allocation_scores, classify, otd_round

__all__ = ["Decision", "WorkerLoad", "allocation_scores", "classify", "otd_round"]

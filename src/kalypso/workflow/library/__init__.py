"""The workflow library: the Helium paper's evaluation workflows with bundled inputs."""

from kalypso.workflow.library.workflows import (
    BUILDERS,
    PAPER,
    SMALL,
    QAData,
    Sizes,
    Workload,
    workload,
)

__all__ = ["BUILDERS", "PAPER", "SMALL", "QAData", "Sizes", "Workload", "workload"]

"""Numeric comparisons shared by the end-to-end tests and the GPU benchmark checks."""
import torch


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """||value - reference|| / ||reference||, computed in float64."""
    value, reference = value.double(), reference.double()
    return float((value - reference).norm() / reference.norm())

"""Arrow -> numpy without pandas: Array.to_numpy() and pa.array() import pandas on first use
(a start-up cost in time and memory in every prepare process), so the text steps read buffers directly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def int_values(arr: pa.Array) -> np.ndarray:
    """A null-free Arrow integer array as a numpy view of its buffer."""
    width = arr.type.bit_width // 8
    return np.frombuffer(arr.buffers()[1], np.dtype(f"int{arr.type.bit_width}"), len(arr), arr.offset * width)

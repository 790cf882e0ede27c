"""Ranks agree before anything is written: one rank's bad input fails the call on every rank.

Each collective call of the distributed engine first runs every check on
every rank, catching the error instead of raising it, then calls `agree`:
one `allreduce` tells every rank the lowest rank that failed (if any). If
one did, it broadcasts its message and every rank raises: the failed rank
its own error (TensorFlow's type, as the one-process engine), the others a
`PeerFailedError` naming the rank and quoting its message. Nothing is
written before `agree` returns, so nothing changes on any rank.

`agree` also checks that the ranks are making the same call, with the
same values of the arguments every rank must share (`training`, say): a
program whose ranks went out of step fails on every rank instead of
mixing up two collectives.

It can carry a few integers every rank needs the smallest of (`least`), in
the same allreduce: a choice the ranks must make alike from their own data.

>>> from tpu_embedding_shim.engine.distributed.communicator import SingleProcess
>>> agree(SingleProcess(), None, "forward", training=True).tolist()
[]
>>> agree(SingleProcess(), None, "apply_gradients", least=[1, 0]).tolist()
[1, 0]
>>> agree(SingleProcess(), ValueError("bad id"), "forward")
Traceback (most recent call last):
ValueError: bad id
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .communicator import Communicator

__all__ = ["PeerFailedError", "agree"]


class PeerFailedError(RuntimeError):
    """Another rank refused this collective call; nothing was changed on any rank.

    Attributes:
      rank: the (lowest) rank that failed.
      reason: its error, as "TypeName: message".
    """

    def __init__(self, rank: int, reason: str):
        self.rank = rank
        self.reason = reason
        super().__init__(f"Rank {rank} failed this call on its input ({reason}); nothing was changed on any rank.")


def agree(
    comm: Communicator, error: BaseException | None, call: str, *, least: Sequence[int] = (), **facts: Any
) -> np.ndarray:
    """Raises on every rank when `error` is set on any rank, or when the ranks are not making the same call.

    Args:
      comm: the ranks.
      error: this rank's error (None: its checks passed).
      call: the name of the collective call being made (`forward`, ...).
      least: integers (as many on every rank) whose minimum over the ranks
        every rank gets back, from the same allreduce.
      facts: arguments that must be the same on every rank (`training`, ...).

    Returns:
      int64 [len(least)]: each of `least`'s minimum over the ranks.

    Raises:
      `error` itself on the rank(s) that failed; `PeerFailedError` on the
      others; ValueError on every rank when `call` or a fact differs
      between ranks (a program whose ranks went out of step).
    """
    code = zlib.crc32(json.dumps([call, facts], sort_keys=True, default=repr).encode())
    flags = np.array([comm.rank if error is not None else comm.size, code, -code, *least], dtype=np.int64)
    reduced = comm.allreduce(flags, "min")
    first = int(reduced[0])
    if first < comm.size:
        reason = f"{type(error).__name__}: {error}" if comm.rank == first else None
        reason = comm.bcast_object(reason, root=first)
        if error is not None:
            raise error
        raise PeerFailedError(first, reason)
    if reduced[1] != -reduced[2]:
        shown = ", ".join(f"{name}={value!r}" for name, value in facts.items())
        raise ValueError(
            f"Every rank must make the same collective call at the same time, with the same arguments: "
            f"this rank calls {call}({shown}), another rank something else."
        )
    return reduced[3:]

"""How the fast path uses the machine's threads: small calls on one thread, small tables side by side.

Two rules. Neither changes a kernel or a number: only which thread runs
what (a helper thread sums a table as one partition instead of P; the sums
are per id, in entry order, either way).

- `one_thread_below(work)`: a call on fewer than `SERIAL_WORK` row elements
  (rows x D) runs its kernels on the calling thread alone. With
  `OMP_WAIT_POLICY=PASSIVE` waking a sleeping OpenMP worker costs ~25-60 us
  on the machine of docs/benchmarks.md, against ~3 us for the same kernel
  with `numba.set_num_threads(1)`, and a call on a few hundred rows (the
  MovieLens job's batches of 256) is done before the worker wakes.
- `run_each(calls)`: independent calls (the lookups of different features,
  the sums or updates of different tables), each below `SERIAL_WORK` but
  worth a parallel launch together, are spread over
  `numba.get_num_threads()` Python threads, each running its share on one
  numba thread. The kernels release the GIL (`nogil=True`), so one
  thread's kernel runs while another prepares its next call: a step over
  26 small tables used one core before (every call below the one-thread
  rule), and now uses all of them. Calls at or above `SERIAL_WORK` run one
  after another on the calling thread, each on every thread.

Spreading needs a thread-safe threading layer (OpenMP or TBB; numba's own
`workqueue` layer aborts on concurrent launches): until a parallel kernel
has run and numba has chosen a safe one, `run_each` runs its calls in order
on the calling thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numba
from numba.np.ufunc import parallel as _parallel

__all__ = ["SERIAL_WORK", "num_threads", "on_one_thread", "one_thread_below", "run_each"]

T = TypeVar("T")

SERIAL_WORK = 1 << 17
"""Row elements (rows x D) a call touches below which its kernels run on one thread."""

_SAFE_LAYERS = ("omp", "tbb")


def num_threads() -> int:
    """`numba.get_num_threads()`: the calling thread's numba thread count.

    Once numba's threads run, its backend's own getter is called directly,
    holding the GIL (`_backend`): numba's public getter takes a process-wide
    multiprocessing lock on every call, and its ctypes binding releases the
    GIL, so under `run_each`'s threads each call could wait for another
    thread's Python (a step over 26 small tables spent ~3 ms of 10 in 1,700
    such calls)."""
    backend = _backend()
    if backend is not None:
        return int(backend[0]())
    return int(numba.get_num_threads())


def _set_num_threads(count: int) -> None:
    """`numba.set_num_threads(count)`, without its lock once numba's threads run (see `num_threads`).

    `count` is 1 or a count numba gave (`num_threads`), so in numba's range."""
    backend = _backend()
    if backend is not None:
        backend[1](count)
    else:
        numba.set_num_threads(count)


_backend_calls: tuple[Callable[[], int], Callable[[int], None]] | None = None


def _backend() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """numba's threading backend's (get, set) thread count, bound with `ctypes.PYFUNCTYPE` so a call keeps
    the GIL (both only read or write a thread-local integer); None until numba has launched its threads."""
    global _backend_calls
    if _backend_calls is None:
        # numba internals: whether its threads run, and its backend's C functions (set by numba at launch);
        # no public API gives the count without the lock.
        if not _parallel._is_initialized:  # noqa: SLF001  (numba internal, see above)
            return None
        getter = _parallel._get_num_threads  # type: ignore[attr-defined]  # noqa: SLF001
        setter = _parallel._set_num_threads  # type: ignore[attr-defined]  # noqa: SLF001
        get_address = ctypes.cast(getter, ctypes.c_void_p).value
        set_address = ctypes.cast(setter, ctypes.c_void_p).value
        if get_address is None or set_address is None:
            return None
        _backend_calls = (
            ctypes.PYFUNCTYPE(ctypes.c_int)(get_address),
            ctypes.PYFUNCTYPE(None, ctypes.c_int)(set_address),
        )
    return _backend_calls


def on_one_thread(call: Callable[[], T]) -> T:
    """`call()` with numba's thread count 1 on the calling thread (`one_thread_below(0)`, without a
    context manager's cost: a few microseconds a call at B = 64)."""
    saved = num_threads()
    if saved == 1:
        return call()
    _set_num_threads(1)
    try:
        return call()
    finally:
        _set_num_threads(saved)


@contextlib.contextmanager
def one_thread_below(work: int) -> Iterator[None]:
    """Runs the block's kernels on the calling thread alone when `work` < `SERIAL_WORK`."""
    if work >= SERIAL_WORK or num_threads() == 1:  # nothing to change
        yield
        return
    with _threads(1):
        yield


@contextlib.contextmanager
def _threads(count: int) -> Iterator[None]:
    """numba's thread count for the calling thread (it is thread-local) set to `count` for the block."""
    saved = num_threads()
    _set_num_threads(count)
    try:
        yield
    finally:
        _set_num_threads(saved)


def run_each(calls: Sequence[tuple[int, Callable[[], T]]]) -> list[T]:
    """The results of independent `(work, call)` pairs, in order; small calls run side by side.

    The first error in call order is raised. Run one after another, the
    calls after a failing one are skipped; spread, every call still runs to
    its end first (none is left half done on another thread)."""
    threads = num_threads()
    small = [i for i, (work, _) in enumerate(calls) if work < SERIAL_WORK]
    spread = (
        threads > 1 and len(small) > 1 and sum(calls[i][0] for i in small) >= SERIAL_WORK and _layer_is_thread_safe()
    )
    if not spread:
        if small and len(small) == len(calls) and threads > 1:  # all small: one thread count change, not one each
            with _threads(1):
                return [call() for _, call in calls]
        return [call() for _, call in calls]
    outcomes: dict[int, T | _Failed] = {}  # call index -> its result or error (each thread writes its own)
    for i, (work, call) in enumerate(calls):  # the large ones first, each on every thread
        if work >= SERIAL_WORK:
            outcomes[i] = _outcome(call)
    shares = [share for share in balance(small, [calls[i][0] for i in small], threads) if share]
    pool = worker_pool(threads - 1)
    futures = [pool.submit(_run_share, calls, share, outcomes) for share in shares[1:]]
    _run_share(calls, shares[0], outcomes)
    for future in futures:
        future.result()  # `_run_share` catches the calls' errors: this only waits
    results: list[T] = []
    for i in range(len(calls)):
        outcome = outcomes[i]
        if isinstance(outcome, _Failed):
            raise outcome.error
        results.append(outcome)
    return results


class _Failed:
    """A call's error, kept to be raised in call order by `run_each`."""

    def __init__(self, error: BaseException):
        self.error = error


def _outcome(call: Callable[[], T]) -> T | _Failed:
    try:
        return call()
    except BaseException as error:
        return _Failed(error)


def _run_share(
    calls: Sequence[tuple[int, Callable[[], T]]], share: list[int], outcomes: dict[int, T | _Failed]
) -> None:
    """Runs the calls at `share` on this thread, one numba thread; records each result or error."""
    with _threads(1):
        for i in share:
            outcomes[i] = _outcome(calls[i][1])


def balance(indices: list[int], works: list[int], parts: int) -> list[list[int]]:
    """`indices` in `parts` shares of about equal work (largest first to the lightest share), each in order."""
    shares: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for work, i in sorted(zip(works, indices), key=lambda pair: -pair[0]):
        lightest = loads.index(min(loads))
        shares[lightest].append(i)
        loads[lightest] += work
    return [sorted(share) for share in shares]


def _layer_is_thread_safe() -> bool:
    try:
        return numba.threading_layer() in _SAFE_LAYERS
    except ValueError:  # no parallel kernel has run yet: numba has not chosen a layer
        return False


_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_executor_key: tuple[int, int] = (-1, 0)  # (process id, workers): a forked child gets its own pool


def worker_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of helper threads (the calling thread is the other worker)."""
    global _executor, _executor_key
    key = (os.getpid(), workers)
    with _lock:
        if _executor is None or _executor_key != key:
            if _executor is not None and _executor_key[0] == key[0]:
                _executor.shutdown(wait=False)  # a new thread count: let the old helpers go
            _executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tpu-embedding-shim")
            _executor_key = key
        return _executor

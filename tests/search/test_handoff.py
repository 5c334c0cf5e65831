"""HandoffPolicy: the decision to run engines concurrently, from fed measurements (no clocks), and the
searcher running the first engine in the calling thread and the others in the executor, or all inline."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hybrid_memory.search.engine import Query, RowSet
from hybrid_memory.search.searcher import HandoffPolicy, HybridSearcher, size_class


def test_each_arm_is_measured_once_first_concurrency_then_inline():
    policy = HandoffPolicy()
    assert policy.costs() == (None, None)
    assert policy.concurrent(["sparse", "dense"])
    policy.record(True, 0.002)
    assert policy.costs() == (0.002, None)
    assert not policy.concurrent(["sparse", "dense"])  # inline still unmeasured
    policy.record(False, 0.003)
    assert policy.costs() == (0.002, 0.003)


def test_the_faster_arm_runs_and_every_probe_th_search_the_other():
    policy = HandoffPolicy(window=3, probe=4)
    policy.record(True, 0.0061)  # concurrently slower than one after the other (GIL contention)
    policy.record(False, 0.0055)
    assert [policy.concurrent(["sparse", "dense"]) for _ in range(8)] == [False, False, False, True] * 2
    for _ in range(3):  # the window keeps the last 3 concurrent walls: 0.004 s each, median 0.004 < 0.0055
        policy.record(True, 0.004)
    assert policy.costs() == (0.004, 0.0055)
    assert [policy.concurrent(["sparse", "dense"]) for _ in range(4)] == [True, True, True, False]


def test_size_classes_are_measured_apart():
    assert [
        size_class(None),
        size_class(RowSet([])),
        size_class(RowSet([1, 2])),
        size_class(RowSet(range(15))),
        size_class(RowSet(range(16))),
        size_class(RowSet(range(100_000))),
    ] == [None, 0, 1, 2, 2, 8]
    policy = HandoffPolicy(probe=1000)
    policy.record(True, 0.004)
    policy.record(False, 0.009)  # unfiltered: concurrency pays
    policy.record(True, 0.0004, size=5)
    policy.record(False, 0.0003, size=5)  # a narrow filter: it does not
    assert policy.concurrent(["sparse", "dense"]) and not policy.concurrent(["sparse", "dense"], 5)
    assert policy.concurrent(["sparse", "dense"], 6)  # a class never measured starts concurrent


def test_the_median_ignores_one_outlier():
    policy = HandoffPolicy(window=3)
    for wall in (0.001, 0.0031, 0.050):  # one descheduled search
        policy.record(False, wall)
    assert policy.costs()[1] == 0.0031


def test_bad_policy_parameters():
    with pytest.raises(ValueError, match="window and probe"):
        HandoffPolicy(window=0)


class _Recorder:
    def __init__(self, name, ids):
        self.name, self.ids, self.threads = name, ids, []

    def search(self, query, k, allowed):
        self.threads.append(threading.current_thread().name)
        return [(i, 1.0 / (1 + i)) for i in self.ids][:k]

    def score(self, query, ids):
        return np.array([1.0 / (1 + i) if i in self.ids else np.nan for i in ids.tolist()])


def _searcher(policy, executor):
    engines = {"sparse": _Recorder("sparse", [1, 2]), "dense": _Recorder("dense", [2, 3])}
    keys = lambda ids: {i: f"k{i}" for i in ids}  # noqa: E731
    return HybridSearcher(engines, keys, executor=executor, policy=policy), engines


def test_the_caller_runs_the_first_engine_and_the_executor_the_other():
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker") as pool:
        searcher, engines = _searcher(HandoffPolicy(), pool)
        result = searcher.search(Query("q"), top_k=3, depth=2, weights={}, fusion="rrf")
    assert [h.key for h in result.hits] == ["k2", "k1", "k3"]
    assert engines["sparse"].threads == [threading.current_thread().name]
    assert engines["dense"].threads[0].startswith("worker")
    assert searcher.policy.costs()[0] is not None and searcher.policy.costs()[1] is None  # measured, concurrent


def test_a_policy_that_finds_no_gain_runs_both_engines_in_the_caller():
    policy = HandoffPolicy(probe=1000)
    policy.record(True, 0.0011)
    policy.record(False, 0.0002)  # one after the other was faster
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker") as pool:
        searcher, engines = _searcher(policy, pool)
        inline = searcher.search(Query("q"), top_k=3, depth=2, weights={}, fusion="adaptive")
    me = threading.current_thread().name
    assert engines["sparse"].threads == [me] and engines["dense"].threads == [me]
    concurrent, _ = _searcher(HandoffPolicy(), None)
    same = concurrent.search(Query("q"), top_k=3, depth=2, weights={}, fusion="adaptive")
    assert [(h.key, h.score) for h in inline.hits] == [(h.key, h.score) for h in same.hits]


def test_the_caller_runs_the_slowest_measured_engine():
    policy = HandoffPolicy()
    assert policy.slowest_first(["sparse", "dense"]) == ["sparse", "dense"]  # unmeasured: the given order
    policy.record_engine("sparse", 0.004)
    assert policy.slowest_first(["sparse", "dense"]) == ["sparse", "dense"]  # dense still unmeasured
    policy.record_engine("dense", 0.008)
    assert policy.slowest_first(["sparse", "dense"]) == ["dense", "sparse"]
    policy.record_engine("dense", 0.001)
    policy.record_engine("dense", 0.001)  # median of 0.008, 0.001, 0.001: 0.001 < 0.004
    assert policy.slowest_first(["sparse", "dense"]) == ["sparse", "dense"]
    policy.record_engine("dense", 0.004)
    policy.record_engine("dense", 0.004)  # median 0.004: a tie keeps the given order
    assert policy.slowest_first(["dense", "sparse"]) == ["dense", "sparse"]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker") as pool:
        searcher, engines = _searcher(HandoffPolicy(), pool)
        searcher.policy.record_engine("sparse", 0.001)
        searcher.policy.record_engine("dense", 0.002)  # walls unmeasured: concurrent
        result = searcher.search(Query("q"), top_k=3, depth=2, weights={}, fusion="rrf")
    assert [h.key for h in result.hits] == ["k2", "k1", "k3"]  # the same fused list whoever ran what
    assert engines["dense"].threads == [threading.current_thread().name]
    assert engines["sparse"].threads[0].startswith("worker")


def test_a_filtered_search_is_measured_under_its_size_class():
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker") as pool:
        searcher, engines = _searcher(HandoffPolicy(), pool)
        allowed = RowSet([1, 2, 3])  # size class (3 + 1).bit_length() // 2 = 1
        searcher.search(Query("q"), top_k=3, depth=2, weights={}, fusion="rrf", allowed=allowed)  # concurrent
        searcher.search(Query("q"), top_k=3, depth=2, weights={}, fusion="rrf", allowed=allowed)  # then inline
    policy = searcher.policy
    assert [arm is not None for arm in policy.costs(1)] == [True, True]
    assert policy.costs() == (None, None)  # the unfiltered class is untouched
    me = threading.current_thread().name
    assert engines["sparse"].threads == [me, me]
    assert engines["dense"].threads[0].startswith("worker") and engines["dense"].threads[1] == me  # then inline

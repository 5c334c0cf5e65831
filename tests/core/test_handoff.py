"""HandoffPolicy: the decision to run engines concurrently, from fed measurements (no clocks), and the
searcher running the first engine in the calling thread and the others in the executor, or all inline."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hybrid_memory.engines import Query
from hybrid_memory.searcher import HandoffPolicy, HybridSearcher


def test_unmeasured_engines_run_concurrently():
    policy = HandoffPolicy()
    assert policy.costs(["sparse", "dense"]) == (None, None)
    assert policy.concurrent(["sparse", "dense"])
    policy.record_engine("sparse", 0.002)
    assert policy.concurrent(["sparse", "dense"])  # dense and the overhead still unknown


def test_concurrency_pays_exactly_when_its_overhead_is_below_the_faster_engine():
    policy = HandoffPolicy(window=3, probe=4)
    policy.record_engine("sparse", 0.002)
    policy.record_engine("dense", 0.003)
    policy.record_concurrent(0.0035, [0.002, 0.003])  # overhead 0.0005 s
    assert policy.costs(["sparse", "dense"]) == (pytest.approx(0.0005), 0.002)
    assert policy.concurrent(["sparse", "dense"])
    for _ in range(3):  # the window keeps the last 3 overheads: 0.008 s each, median 0.008 > 0.002
        policy.record_concurrent(0.011, [0.002, 0.003])
    assert policy.costs(["sparse", "dense"])[0] == pytest.approx(0.008)
    # inline, but every 4th decision probes concurrency again so the overhead stays measured
    assert [policy.concurrent(["sparse", "dense"]) for _ in range(8)] == [False, False, False, True] * 2


def test_overhead_is_floored_at_zero_and_the_median_ignores_one_outlier():
    policy = HandoffPolicy(window=3)
    policy.record_concurrent(0.001, [0.002, 0.003])  # faster than the slower engine: 0, not negative
    policy.record_concurrent(0.0031, [0.002, 0.003])  # 0.0001
    policy.record_concurrent(0.050, [0.002, 0.003])  # one descheduled search: 0.047
    assert policy.costs([])[0] == pytest.approx(0.0001)


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
    assert len(searcher.policy._overhead) == 1  # the concurrent search was measured


def test_a_policy_that_finds_no_gain_runs_both_engines_in_the_caller():
    policy = HandoffPolicy(probe=1000)
    policy.record_engine("sparse", 0.0001)
    policy.record_engine("dense", 0.0001)
    policy.record_concurrent(0.0011, [0.0001, 0.0001])  # overhead 0.001 s > 0.0001 s
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
        searcher.policy.record_engine("dense", 0.002)  # overhead unmeasured: concurrent
        result = searcher.search(Query("q"), top_k=3, depth=2, weights={}, fusion="rrf")
    assert [h.key for h in result.hits] == ["k2", "k1", "k3"]  # the same fused list whoever ran what
    assert engines["dense"].threads == [threading.current_thread().name]
    assert engines["sparse"].threads[0].startswith("worker")

from server.web.ratelimit import TokenBucket


def test_bucket_spends_its_burst_then_refills_at_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3.0, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.5  # one token back
    assert [bucket.take() for _ in range(2)] == [True, False]
    now[0] += 100  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 3


def test_zero_rate_is_unlimited() -> None:
    bucket = TokenBucket(rate=0, burst=1, clock=lambda: 0.0)
    assert all(bucket.take() for _ in range(10_000))

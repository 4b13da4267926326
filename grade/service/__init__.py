"""``kernelmill serve``: a grading service for RL trainers.

An ASGI front end (``app``) takes submissions, answers job ids at once and the verdicts when
polled; a job table (``jobs``) bounds the queue, groups a request's submissions by problem and
answers each job once; the pool (``actors``) grades on long-lived hosts, one Ray actor per GPU,
with the batch grader's own per-group function. ``client`` is a plain client with retries;
``trl`` and ``verl`` are reward adapters over it.
"""

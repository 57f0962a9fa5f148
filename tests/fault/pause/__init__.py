"""A Django app the fault tests install in their worker: it stops the cycle at a step.

With KAI_TEST_PAUSE_AT=<point>, the worker writes KAI_TEST_PAUSE_FILE when the cycle reaches that
step (the `cycle_step` signal) and waits until the file is deleted or KAI_TEST_PAUSE_SECONDS
pass, so a test can kill it, or take the database or broker away, at that exact point.
"""

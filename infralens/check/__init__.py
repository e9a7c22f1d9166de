"""Check: run every starter and confirm it still says what its page claims.

    runner    a lab's starters → RunResult values, reusing a stored result whose key is current
    process   one run as a supervised process group in a scratch folder, bounded and killed whole
    compile   C++ and CUDA starters: the compiler and its version, its flags, its first error
    verdicts  artifacts, expect patterns, claims, calculators and questions against a run
    results   the store of results between runs, keyed by what a run depends on; merge of shards
    devices   the machine: CPU, NVIDIA GPUs, the torch build, and whether a run can be made here
    sandbox   bubblewrap for `check --sandbox`
    shards    a stable split of the labs into N shares for a CI matrix
    reports   JSON and JUnit of a check
"""
